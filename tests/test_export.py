"""Exports for LLaMA-Factory and ms-swift: structure, placeholders vs media, trimmed OVI span clips."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from core.errors import ConfigError
from core.files import save_samples
from core.sample import Part, Sample, Turn
from core.video_io import read_all_frames, write_mp4
from data_builders.cli_config import ExportBuild
from data_builders.export import ExportResult, export_dataset

FPS, SECONDS = 8.0, 10


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A V2P-like sample (whole video + VP frame), an OVI-like one (two spans), and two bad ones."""
    root = tmp_path_factory.mktemp("data")
    frames = np.zeros((int(FPS * SECONDS), 48, 64, 3), dtype=np.uint8)
    frames[:, :, :, 0] = np.arange(len(frames))[:, None, None] * 3  # red grows with time: a clock
    video = root / "videos" / "v.mp4"
    write_mp4(video, frames, FPS)
    Image.fromarray(frames[5]).save(root / "vp.jpg")
    v2p = Sample(
        "v2p_1",
        "v2p",
        [
            Turn(
                "user",
                [
                    Part.video(str(video), 0.0, SECONDS),
                    Part.txt("What is marked?\nA: x\nB: y"),
                    Part.image(str(root / "vp.jpg")),
                ],
            ),
            Turn("assistant", [Part.txt("A")], loss=True),
        ],
        "synthetic",
        "v",
        (0.0, SECONDS),
    )
    ovi = Sample(
        "ovi_1",
        "ovi",
        [
            Turn("user", [Part.video(str(video), 0.0, 4.0), Part.txt("What happens?")]),
            Turn("assistant", [Part.txt("A red square moves")], loss=False),
            Turn("user", [Part.video(str(video), 4.0, 6.0), Part.txt("Stop, never mind.")]),
            Turn("assistant", [Part.txt("Okay, I'll stop here.")], loss=True),
        ],
        "synthetic",
        "v",
        (0.0, 6.0),
    )
    loss_early = Sample(
        "bad_loss",
        "ovi",
        [*ovi.turns[:1], Turn("assistant", [Part.txt("x")], loss=True), *ovi.turns[2:]],
        "s",
        "v",
        (0, 1),
    )
    tagged = Sample(
        "bad_tag", "v2p", [Turn("user", [Part.txt("<image> what?")]), v2p.turns[1]], "s", "v", (0, 1)
    )
    save_samples([v2p, ovi, loss_early, tagged], root / "hf")
    return root / "hf"


def _export(hf_dir: Path, out: Path, fmt: str, **settings: Any) -> ExportResult:
    return export_dataset(ExportBuild(dataset=str(hf_dir), out=str(out), format=fmt, **settings))


def _check_placeholders(row: dict) -> None:
    text = "".join(m["content"] for m in row["messages"])
    assert text.count("<video>") == len(row.get("videos", [])) and text.count("<image>") == len(
        row.get("images", [])
    )


def _duration(path: str) -> float:
    import decord

    reader = decord.VideoReader(path)
    return len(reader) / reader.get_avg_fps()


def test_llamafactory_export(hf_dir: Path, tmp_path: Path):
    result = _export(hf_dir, tmp_path / "lf", "llamafactory", name="vp_demo")
    rows = json.loads((tmp_path / "lf" / "vp_demo.json").read_text())
    assert [r["id"] for r in rows] == ["v2p_1", "ovi_1"] and result.rows == 2
    for row in rows:
        _check_placeholders(row)
        assert [m["role"] for m in row["messages"]][:2] == ["system", "user"]
    v2p, ovi = rows
    assert v2p["messages"][1]["content"] == "<video>What is marked?\nA: x\nB: y<image>"  # the adapter's order
    assert v2p["videos"] == [str((hf_dir.parent / "videos" / "v.mp4").resolve())]  # a whole file: itself
    assert v2p["images"] == [str((hf_dir.parent / "vp.jpg").resolve())]
    # OVI: each span is its own trimmed clip of the span's length, named relative to the export folder
    # (LLaMA-Factory resolves it against dataset_dir, so the folder can move).
    assert len(ovi["videos"]) == 2 and all(v.startswith("clips/") for v in ovi["videos"])
    clips = [str(tmp_path / "lf" / v) for v in ovi["videos"]]
    assert [round(_duration(v), 1) for v in clips] == [4.0, 2.0] and result.clips == 2
    clock = read_all_frames(clips[1])[:, :, :, 0].mean(axis=(1, 2)) / 3 / FPS  # seconds into the source
    assert abs(clock[0] - 4.1) < 0.3 and abs(clock[-1] - 5.9) < 0.3
    assert ovi["messages"][3]["content"] == "<video>Stop, never mind."
    entry = json.loads((tmp_path / "lf" / "dataset_info.json").read_text())["vp_demo"]
    assert entry["file_name"] == "vp_demo.json" and entry["formatting"] == "sharegpt"
    assert entry["columns"] == {"messages": "messages", "videos": "videos", "images": "images"}
    assert entry["tags"]["role_tag"] == "role" and entry["tags"]["assistant_tag"] == "assistant"
    info = json.loads((tmp_path / "lf" / "export_info.json").read_text())
    reasons = {s["id"]: s["reason"] for s in info["skipped"]}
    assert set(reasons) == {"bad_loss", "bad_tag"} and "final assistant turn" in reasons["bad_loss"]
    assert "mask_history: true" in (tmp_path / "lf" / "README.md").read_text()
    # A second export into the same folder adds its entry and keeps the first.
    _export(hf_dir, tmp_path / "lf", "llamafactory", name="other", system=None)
    assert set(json.loads((tmp_path / "lf" / "dataset_info.json").read_text())) == {"vp_demo", "other"}


def test_swift_export(hf_dir: Path, tmp_path: Path):
    _export(hf_dir, tmp_path / "sw", "swift", system=None)
    lines = (tmp_path / "sw" / "sw.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 2 and all(set(r) == {"id", "messages", "videos", "images"} for r in rows)
    for row in rows:
        _check_placeholders(row)
        assert row["messages"][0]["role"] == "user"  # no system message asked for
    assert "--loss_scale last_round" in (tmp_path / "sw" / "README.md").read_text()


def test_unknown_format_is_a_setting_error(hf_dir: Path, tmp_path: Path):
    with pytest.raises(ConfigError, match="llamafactory"):
        _export(hf_dir, tmp_path / "x", "axolotl")


def test_export_cli(hf_dir: Path, tmp_path: Path):
    command = [sys.executable, "-m", "data_builders", "builder=export", f"builder.dataset={hf_dir}"]
    done = subprocess.run(
        [*command, "builder.format=swift", "builder.out=out"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "out.jsonl").is_file() and "2 rows, 2 left out" in done.stdout
    # A format outside the closed choice fails when the config is composed, before anything runs.
    bad = subprocess.run(
        [*command, "builder.format=csv", "builder.out=bad"], cwd=tmp_path, capture_output=True, text=True
    )
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "Invalid value 'csv', expected one of [llamafactory, swift]" in bad.stderr
    assert "builder.format" in bad.stderr and not (tmp_path / "bad").exists()


def test_an_export_folder_moved_still_finds_its_media_in_llamafactory(hf_dir: Path, tmp_path: Path):
    """The review moved an export and LLaMA-Factory crashed on the clips' absolute paths."""
    _export(hf_dir, tmp_path / "lf", "llamafactory", name="d")
    (tmp_path / "lf").rename(tmp_path / "moved")
    for row in json.loads((tmp_path / "moved" / "d.json").read_text()):
        for path in row["videos"] + row["images"]:
            assert (tmp_path / "moved" / path).is_file()  # how LF resolves it: dataset_dir / path
    readme = (tmp_path / "moved" / "README.md").read_text()
    assert "relative to this folder" in readme and "video_maxlen: 8" in readme
    _export(hf_dir, tmp_path / "sw", "swift")
    rows = [json.loads(line) for line in (tmp_path / "sw" / "sw.jsonl").read_text().splitlines()]
    assert all(Path(p).is_absolute() for row in rows for p in row["videos"])  # swift: the working dir
    readme = (tmp_path / "sw" / "README.md").read_text()
    assert "ROOT_IMAGE_DIR" in readme and "FPS_MAX_FRAMES=8" in readme and "Not reproduced" in readme


def test_the_readmes_say_how_to_train_after_a_move_and_with_which_template(hf_dir: Path, tmp_path: Path):
    """The swift README suggested ROOT_IMAGE_DIR after a move, which ms-swift only prefixes to relative
    paths (os.path.join keeps an absolute one): 36 of 44 rows then failed. The LLaMA-Factory README's
    dataset_dir kept the old path after a move; neither named a template, and LLaMA-Factory's `qwen3_vl`
    adds an empty think block to every trained answer (shared research/exports-verified-2026-12d.md)."""
    from core.config import Family

    _export(hf_dir, tmp_path / "sw", "swift", name="d")
    (tmp_path / "sw").rename(tmp_path / "moved")
    rows = [json.loads(line) for line in (tmp_path / "moved" / "d.jsonl").read_text().splitlines()]
    clips = [p for row in rows for p in row["videos"] if "clips" in Path(p).parts]
    assert clips and not any(Path(os.path.join(tmp_path / "moved", p)).exists() for p in clips)
    readme = (tmp_path / "moved" / "README.md").read_text()
    assert "export it again" in readme and "(or set ROOT_IMAGE_DIR)" not in readme
    assert "ROOT_IMAGE_DIR does not help" in readme and "--template qwen2_5_vl" in readme

    _export(hf_dir, tmp_path / "lf", "llamafactory", family=Family.qwen3_vl)
    readme = (tmp_path / "lf" / "README.md").read_text()
    dataset_dir = next(line for line in readme.splitlines() if line.startswith("dataset_dir: "))
    assert dataset_dir.endswith("# this folder: its path now, if it has moved")
    assert "then set dataset_dir to its new path" in readme
    assert "\ntemplate: qwen3_vl_nothink\n" in readme and "Not `qwen3_vl`: it adds an empty think" in readme

    _export(hf_dir, tmp_path / "iv", "swift", family=Family.internvl)
    readme = (tmp_path / "iv" / "README.md").read_text()
    assert "--template" not in readme and "No template of this tool was checked" in readme


@pytest.mark.parametrize(
    ("family", "system"),
    [("qwen2_5_vl", "You are a helpful assistant."), ("qwen3_vl", None), ("internvl", None)],
)
def test_the_export_writes_the_families_own_system_turn(hf_dir: Path, tmp_path: Path, family, system):
    """Qwen3-VL and InternVL render no system turn; the export wrote one for every family."""
    from core.config import Family
    from models.chat import chat_format_for

    _export(hf_dir, tmp_path / "sw", "swift", family=Family(family))
    row = json.loads((tmp_path / "sw" / "sw.jsonl").read_text().splitlines()[0])
    first = row["messages"][0]
    assert (
        (first["content"] if first["role"] == "system" else None) == system == chat_format_for(family).system
    )


def test_no_exported_clip_has_fewer_than_two_frames(tmp_path: Path):
    """A span shorter than one frame interval (of the clip rate and of the source) became a one-frame clip,
    which ms-swift cannot read: it swapped such rows for random others without a word."""
    frames = np.zeros((int(FPS * SECONDS), 48, 64, 3), dtype=np.uint8)
    video = tmp_path / "v.mp4"
    write_mp4(video, frames, FPS)
    spans = [(2.0, 2.05), (3.0, 3.2), (5.0, 5.3)]  # 0.05 s < 1/8 s (the source) < 1/4 s (clip_fps)
    samples = [
        Sample(
            f"s{i}",
            "ovi",
            [
                Turn("user", [Part.video(str(video), 0.0, start), Part.txt("What happens?")]),
                Turn("assistant", [Part.txt("A red")], loss=False),
                Turn("user", [Part.video(str(video), start, end), Part.txt("Stop.")]),
                Turn("assistant", [Part.txt("Okay.")], loss=True),
            ],
            "synthetic",
            "v",
            (0.0, end),
        )
        for i, (start, end) in enumerate(spans)
    ]
    save_samples(samples, tmp_path / "hf")
    _export(tmp_path / "hf", tmp_path / "sw", "swift")
    rows = [json.loads(line) for line in (tmp_path / "sw" / "sw.jsonl").read_text().splitlines()]
    clips = [row["videos"][1] for row in rows]
    assert [len(read_all_frames(clip)) >= 2 for clip in clips] == [True, True, True]
    assert [round(_duration(clip), 2) for clip in clips] == [0.05, 0.2, 0.3]  # the span's own length
