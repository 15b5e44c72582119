"""The paper's OVI-Train recipe (builder=ovi_train_paper): all five source formats built, sampled to per-type
targets with every form of an instance kept together, merged, and target vs achieved written; missing
sources skipped and recorded; reruns reuse each source's build."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from caption_sources import make_source

from core.errors import ConfigError, DataError
from core.formats.ovi import load_ovibench
from core.text_models import TextBackend
from core.video_io import write_mp4
from core.vocab import InterruptionType
from data_builders.cli_config import OviTrainPaperBuild
from data_builders.ovi_compose import TYPES, _source_build, compose_ovi_train, questions_line

# The paper's Table 3: Cancellation, Correction, False Trigger per source.
TABLE_3 = {
    "activitynet": (840, 1616, 799),
    "moviechat": (475, 913, 477),
    "qvhighlights": (2736, 5365, 2744),
    "ucf_crime": (173, 297, 140),
    "youcook2": (1041, 2050, 1099),
}
TEMPLATES_LINE = "Questions: templates, NOT the paper's VLM-generated ones"
ACTIONS = (
    "a man rides a red bike",
    "a dog runs on the beach",
    "two women cook pasta",
    "a child plays guitar",
)


def _video(path: Path, frames: int = 4, fps: float = 1.0) -> None:
    write_mp4(path, np.zeros((frames, 32, 32, 3), dtype=np.uint8), fps=fps)


def _activitynet(root: Path) -> None:
    captions, _ = make_source(root, n_videos=12)
    captions.rename(root / "train.json")


def _qvhighlights(root: Path) -> None:
    lines = []
    for i in range(6):
        vid = f"clip{i:02d}_360.0_510.0"
        _video(root / "videos" / f"{vid}.mp4")
        for j, action in enumerate(ACTIONS[:3]):
            windows = [[10.0 * j, 10.0 * j + 8], [60.0 + 20 * j, 70.0 + 20 * j]]
            query = {"qid": 10 * i + j, "query": f"{action} number {i}.", "duration": 150, "vid": vid}
            lines.append({**query, "relevant_windows": windows})
    (root / "highlight_train_release.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _youcook2(root: Path) -> None:
    database = {}
    for i, subset in enumerate(["training"] * 4 + ["validation"]):
        key = f"yc{i:02d}"
        _video(root / "raw_videos" / subset / "113" / f"{key}.mp4")
        steps = ["chop the onions finely", "fry the onions in oil", "add the tomatoes", "stir in the rice"]
        annotations = [
            {"id": k, "segment": [20 * k, 20 * k + 15], "sentence": s} for k, s in enumerate(steps)
        ]
        database[key] = {"duration": 90.0, "subset": subset, "recipe_type": "113", "annotations": annotations}
    (root / "youcookii_annotations_trainval.json").write_text(json.dumps({"database": database}))


def _ucf_crime(root: Path) -> None:
    lines = []
    for i, label in enumerate(["Arson", "Burglary", "Robbery", "Arson", "Burglary"]):
        name = f"{label}{i:03d}_x264.mp4"
        _video(root / "Videos" / label / name, frames=250, fps=25.0)  # 10 s
        lines.append(f"{name}  {label}  25  100  150  225")
    (root / "Temporal_Anomaly_Annotation_for_Testing_Videos.txt").write_text("\n".join(lines) + "\n")


def _moviechat(root: Path) -> None:
    (root / "jsons").mkdir(parents=True)
    for i in range(3):
        _video(root / "raw_videos" / f"movie{i}.mp4")
        points = [
            {"time": 250 * (k + 1), "question": f"What happens in scene {k}?", "answer": f"{a} in scene {k}."}
            for k, a in enumerate(ACTIONS)
        ]
        entry = {
            "info": {"video_path": f"movie{i}.mp4", "fps": 25.0, "num_frame": 2500},
            "breakpoint": points,
        }
        (root / "jsons" / f"movie{i}.json").write_text(json.dumps(entry))


def make_five_sources(data_root: Path) -> Path:
    """Annotations and tiny videos of all five formats, laid out as conf/builder/ovi_train_paper.yaml says."""
    for name, make in (
        ("activitynet", _activitynet),
        ("qvhighlights", _qvhighlights),
        ("youcook2", _youcook2),
        ("ucf_crime", _ucf_crime),
        ("moviechat", _moviechat),
    ):
        (data_root / name).mkdir(parents=True)
        make(data_root / name)
    return data_root


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_five_sources(tmp_path_factory.mktemp("ovi_sources"))


def _paper_build(compose, data_root: Path, out: Path, *overrides: str) -> OviTrainPaperBuild:
    """The shipped recipe (Table 3 and its layout) pointed at ``data_root``."""
    cfg = compose(
        "build", "builder=ovi_train_paper", f"builder.data_root={data_root}", f"builder.out={out}", *overrides
    )
    return cfg.builder


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "ovibench.jsonl").read_text().splitlines()]


def test_the_recipe_holds_table_3(compose, tmp_path: Path):
    cfg = _paper_build(compose, tmp_path, tmp_path / "out")
    targets = {
        name: tuple(
            s.targets[InterruptionType[kind]] for kind in ("cancellation", "correction", "false_trigger")
        )
        for name, s in cfg.sources.items()
    }
    assert targets == TABLE_3
    assert sum(map(sum, targets.values())) == 20765  # the paper's OVI-Train
    assert {name: str(s.format) for name, s in cfg.sources.items()} == {name: name for name in TABLE_3}
    assert all(Path(s.captions).is_relative_to(tmp_path) for s in cfg.sources.values())


def test_the_recipe_asks_a_vlm_for_the_questions_when_an_endpoint_is_given(compose, tmp_path: Path):
    """The paper's questions are VLM-generated (OVIBench Fig. 3a): an endpoint in the recipe is used by every
    source's build; without one, templates, and composition.md says they are not the paper's."""
    url = ["builder.questions.endpoint.base_url=http://127.0.0.1:9/v1", "builder.questions.model=vlm-7b"]
    for overrides, backend in (([], TextBackend.none), (url, TextBackend.endpoint)):
        cfg = _paper_build(compose, tmp_path, tmp_path / "out", *overrides)
        name, source = next(iter(cfg.sources.items()))
        target = {kind: 1 for kind in TYPES}
        assert _source_build(cfg, name, source, target).questions.backend is backend
    assert TEMPLATES_LINE in questions_line(OviTrainPaperBuild().questions)


@pytest.mark.slow
def test_the_five_source_recipe_builds_and_writes_target_vs_achieved(data_root: Path, tmp_path: Path):
    out = tmp_path / "ovi_train"
    # ActivityNet sampled down to a small target; the others keep Table 3, far above what the fixtures hold.
    small = ["cancellation=3", "correction=5", "false_trigger=2"]
    command = [
        sys.executable,
        "-m",
        "data_builders",
        "builder=ovi_train_paper",
        f"builder.data_root={data_root}",
        f"builder.out={out}",
        *(f"builder.sources.activitynet.targets.{target}" for target in small),
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    record = json.loads((out / "composition.json").read_text())
    assert list(record["sources"]) == list(TABLE_3) and record["forms"] == ["open", "mcq"]
    rows = _rows(out)
    instances = Counter((r["source"], r["interruption_type"]) for r in rows if r["format"] == "open")
    for name, source in record["sources"].items():
        assert source["status"] == "built", name
        for kind in TYPES:
            assert source["achieved"][kind] == min(source["target"][kind], source["available"][kind])
            assert instances[name, kind] == source["achieved"][kind], (name, kind)
        assert sum(source["achieved"].values()) > 0, name
    assert record["sources"]["activitynet"]["achieved"] == {
        "Cancellation": 3,
        "Correction": 5,
        "False Trigger": 2,
    }
    assert sum(record["sources"]["activitynet"]["available"].values()) > 10  # sampled down, not built short
    assert record["sources"]["ucf_crime"]["target"] == dict(zip(TYPES, TABLE_3["ucf_crime"], strict=True))
    # Every instance keeps both its forms; rows are instances x forms.
    forms = defaultdict(set)
    for row in rows:
        forms[row["id"].removesuffix("-" + row["format"])].add(row["format"])
    assert set(map(frozenset, forms.values())) == {frozenset({"open", "mcq"})}
    assert len(rows) == record["rows"] == 2 * sum(instances.values())
    # YouCook2's subset option reached its reader: the validation video is left out.
    assert not any(r["source_id"] == "yc04" for r in rows)
    samples = load_ovibench(out)  # every video is where its row says
    import datasets

    assert len(datasets.load_from_disk(str(out / "hf"))) == len(samples) == len(rows)
    assert {r["video_path"].split("/")[1] for r in rows} == set(TABLE_3)
    table = (out / "composition.md").read_text()
    assert "| activitynet | 3 / 840 short |" not in table
    assert "| activitynet | 3 / 3 | 5 / 5 | 2 / 2 | 10 / 10 | built |" in table
    ucf = record["sources"]["ucf_crime"]["achieved"]
    assert f"| ucf_crime | {ucf['Cancellation']} / 173 short |" in table and "short: only" in table
    assert "| total |" in done.stdout  # the table is printed too


def _targets(cancellation: int, correction: int, false_trigger: int) -> dict[InterruptionType, int]:
    kinds = (InterruptionType.cancellation, InterruptionType.correction, InterruptionType.false_trigger)
    return dict(zip(kinds, (cancellation, correction, false_trigger), strict=True))


def _two_sources(data_root: Path, out: Path, seed: int = 0) -> OviTrainPaperBuild:
    """ActivityNet (sampled down) and UCF-Crime (short) with their fixture paths."""
    from data_builders.cli_config import OviSourceBuild

    return OviTrainPaperBuild(
        out=str(out),
        seed=seed,
        sources={
            "activitynet": OviSourceBuild(
                captions=str(data_root / "activitynet" / "train.json"),
                videos=str(data_root / "activitynet" / "videos"),
                format="activitynet",
                targets=_targets(4, 6, 4),
            ),
            "ucf_crime": OviSourceBuild(
                captions=str(data_root / "ucf_crime" / "Temporal_Anomaly_Annotation_for_Testing_Videos.txt"),
                videos=str(data_root / "ucf_crime" / "Videos"),
                format="ucf_crime",
                targets=_targets(50, 50, 50),
            ),
        },
    )


def test_same_seed_same_set_and_a_rerun_reuses_each_source(data_root: Path, tmp_path: Path, capsys):
    first = compose_ovi_train(_two_sources(data_root, tmp_path / "a"))
    again = compose_ovi_train(_two_sources(data_root, tmp_path / "b"))
    assert _rows(first) == _rows(again)
    assert TEMPLATES_LINE in (first / "composition.md").read_text()
    assert json.loads((first / "composition.json").read_text())["questions"].startswith(TEMPLATES_LINE)
    capsys.readouterr()
    compose_ovi_train(_two_sources(data_root, tmp_path / "a"))
    printed = capsys.readouterr().out
    assert "activitynet: reusing" in printed and "ucf_crime: reusing" in printed
    statuses = {
        k: v["status"] for k, v in json.loads((first / "composition.json").read_text())["sources"].items()
    }
    assert statuses == {"activitynet": "reused", "ucf_crime": "reused"}
    assert _rows(first) == _rows(again)
    other = compose_ovi_train(_two_sources(data_root, tmp_path / "c", seed=1))
    assert {r["id"] for r in _rows(other)} != {r["id"] for r in _rows(first)}


def test_a_changed_setting_rebuilds_the_source(data_root: Path, tmp_path: Path, capsys):
    cfg = _two_sources(data_root, tmp_path / "a")
    del cfg.sources["ucf_crime"]
    compose_ovi_train(cfg)
    cfg.forms = ["open"]
    capsys.readouterr()
    out = compose_ovi_train(cfg)
    assert "activitynet: building" in capsys.readouterr().out
    assert {r["format"] for r in _rows(out)} == {"open"} and len(_rows(out)) == 14


def test_a_short_source_gives_all_it_has_and_says_so(data_root: Path, tmp_path: Path):
    out = compose_ovi_train(_two_sources(data_root, tmp_path / "out"))
    record = json.loads((out / "composition.json").read_text())["sources"]["ucf_crime"]
    assert record["achieved"] == record["available"] and sum(record["available"].values()) < 150
    rows = [r for r in _rows(out) if r["source"] == "ucf_crime"]
    assert len({r["id"] for r in rows}) == len(rows) == 2 * sum(record["available"].values())  # no repeats
    line = next(x for x in (out / "composition.md").read_text().splitlines() if x.startswith("| ucf_crime"))
    assert line.count(" short |") == 4  # three types and the total
    built = ", ".join(f"{record['available'][kind]} {kind}" for kind in TYPES)
    assert line.endswith(f"| built; short: only {built} built |")


def test_a_missing_source_is_skipped_with_a_line_and_recorded(data_root: Path, tmp_path: Path, capsys):
    cfg = _two_sources(data_root, tmp_path / "out")
    cfg.sources["ucf_crime"].captions = str(tmp_path / "absent.txt")
    out = compose_ovi_train(cfg)
    assert f"ucf_crime: skipped, annotations not found: {tmp_path / 'absent.txt'}" in capsys.readouterr().out
    record = json.loads((out / "composition.json").read_text())["sources"]["ucf_crime"]
    assert record["status"] == "skipped" and record["achieved"] == {}
    assert {r["source"] for r in _rows(out)} == {"activitynet"}
    assert (
        "| ucf_crime | 0 / 50 short | 0 / 50 short | 0 / 50 short | 0 / 150 short | skipped: "
        in (out / "composition.md").read_text()
    )
    videos = tmp_path / "videos_elsewhere"
    cfg.sources["ucf_crime"].captions = _two_sources(data_root, out).sources["ucf_crime"].captions
    cfg.sources["ucf_crime"].videos = str(videos)
    compose_ovi_train(cfg)
    assert f"ucf_crime: skipped, videos directory not found: {videos}" in capsys.readouterr().out
    del cfg.sources["activitynet"]
    with pytest.raises(DataError, match="no source gave any instance"):
        compose_ovi_train(cfg)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda cfg: cfg.sources.clear(), "sources is empty"),
        (lambda cfg: cfg.sources["ucf_crime"].targets.update({"Correction": -1}), "correction must not be"),
        (lambda cfg: cfg.sources.update({"../x": cfg.sources["ucf_crime"]}), "a source name must be"),
    ],
)
def test_bad_settings_are_named(data_root: Path, tmp_path: Path, change, message: str):
    cfg = _two_sources(data_root, tmp_path / "out")
    change(cfg)
    with pytest.raises(ConfigError, match=message):
        compose_ovi_train(cfg)


def test_a_renamed_source_keeps_its_videos_apart(data_root: Path, tmp_path: Path):
    """Two sources may hold the same file names: each source's videos go under videos/<name>/."""
    cfg = _two_sources(data_root, tmp_path / "out")
    cfg.sources["activitynet_copy"] = cfg.sources.pop("ucf_crime")
    cfg.sources["activitynet_copy"].captions = cfg.sources["activitynet"].captions
    cfg.sources["activitynet_copy"].videos = cfg.sources["activitynet"].videos
    cfg.sources["activitynet_copy"].format = "activitynet"
    out = compose_ovi_train(cfg)
    rows = _rows(out)
    assert {r["source"] for r in rows} == {"activitynet", "activitynet_copy"}
    assert len({r["id"] for r in rows}) == len(rows)
    assert all(r["video_path"].startswith(f"videos/{r['source']}/") for r in rows)
    shutil.rmtree(out / "sources")  # the merged set stands on its own links
    assert len(load_ovibench(out)) == len(rows)
