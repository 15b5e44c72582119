"""The source readers (QVHighlights, YouCook2, UCF-Crime, MovieChat): real formats, times in seconds,
bad input named or quarantined, and OVI items built end to end from each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from caption_sources import ovi_build

from core.errors import ConfigError, DataError, DataErrors
from core.formats.ovi import check_ovi_row, load_ovibench
from core.video_io import write_mp4
from data_builders.ovi_train import build_ovi_items, build_ovi_train
from data_builders.sources import (
    SOURCES,
    Caption,
    load_activitynet,
    load_activitynet_captions,
    load_moviechat,
    load_qvhighlights,
    load_ucf_crime,
    load_youcook2,
    read_source,
)
from data_builders.sources.captions import annotation_step, segment_problem, within_video


def _video(path: Path, frames: int, fps: float) -> Path:
    """A black 32x32 mp4 of ``frames`` frames (decoding is never needed; length and fps are)."""
    write_mp4(path, np.zeros((frames, 32, 32, 3), dtype=np.uint8), fps=fps)
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _spans(captions: list[Caption]) -> list[tuple[int, float, float]]:
    return [(c.index, c.start, c.end) for c in captions]


def _check_rows(rows: list[dict], source: str) -> None:
    """Valid OVIBench rows, of the source, whose segment and times lie inside the video."""
    assert rows
    for number, row in enumerate(rows, start=1):
        assert check_ovi_row(row, number) == []
        assert row["source"] == source
        start, end = row["segment"]
        assert 0 <= start < end <= row["duration"] and row["question_time"] == end


def test_sources_registry_and_option_checks(tmp_path: Path):
    assert set(SOURCES) == {"activitynet", "qvhighlights", "youcook2", "ucf_crime", "moviechat"}
    with pytest.raises(ConfigError, match="unknown source format 'kinetics'"):
        read_source("kinetics", tmp_path / "x.json", tmp_path)
    with pytest.raises(ConfigError, match=r"takes no option\(s\) \['subset'\]; it takes \['window_s'\]"):
        read_source("moviechat", tmp_path, tmp_path, subset="training")
    with pytest.raises(ConfigError, match="window_s must be a positive"):
        read_source("moviechat", tmp_path, tmp_path, window_s=0)
    with pytest.raises(ConfigError, match="subset must be"):
        read_source("youcook2", tmp_path / "x.json", tmp_path, subset=3)


# ---------------------------------------------------------------- QVHighlights

QVH_TRAIN = [
    {
        "qid": 9769,
        "query": "A man rides a red bike along the beach.",
        "duration": 150,
        "vid": "j7rJstUseKg_360.0_510.0",
        "relevant_windows": [[0, 10], [20, 34.5]],
        "relevant_clip_ids": [0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16],
        "saliency_scores": [[4, 3, 2]] * 12,
    },
    {
        "qid": 10016,
        "query": "A dog barks at the waves",
        "duration": 150,
        "vid": "j7rJstUseKg_360.0_510.0",
        "relevant_windows": [[100, 150]],
        "relevant_clip_ids": list(range(50, 75)),
        "saliency_scores": [[2, 2, 2]] * 25,
    },
    {
        "qid": 2579,
        "query": "Chef cuts the pizza into eight slices.",
        "duration": 126,
        "vid": "NUsG9BgSes0_210.0_360.0",
        "relevant_windows": [[40, 52], [120, 128], [30, 24], [-2, 6]],
        "relevant_clip_ids": [20, 21, 22, 23, 24, 25],
        "saliency_scores": [[1, 1, 1]] * 6,
    },
]
QVH_TEST = [
    {"qid": 7, "query": "Two women talk in a kitchen.", "duration": 150, "vid": "bP5KfdFJzC4_60.0_210.0"},
    {"qid": 8, "query": "Somebody plays a guitar on stage", "duration": 150, "vid": "bP5KfdFJzC4_60.0_210.0"},
]


@pytest.fixture()
def qvh(tmp_path: Path) -> tuple[Path, Path, Path]:
    videos = tmp_path / "videos"
    for vid in ("j7rJstUseKg_360.0_510.0", "NUsG9BgSes0_210.0_360.0", "bP5KfdFJzC4_60.0_210.0"):
        _video(videos / f"{vid}.mp4", 4, fps=1.0)
    train = _jsonl(tmp_path / "highlight_train_release.jsonl", QVH_TRAIN)
    test = _jsonl(tmp_path / "highlight_test_release.jsonl", QVH_TEST)
    return train, test, videos


def test_qvhighlights_windows_become_captions_grouped_by_vid(qvh: tuple[Path, Path, Path]):
    train, _, videos_dir = qvh
    videos, quarantined = load_qvhighlights(train, videos_dir)
    assert [v.key for v in videos] == ["j7rJstUseKg_360.0_510.0", "NUsG9BgSes0_210.0_360.0"]
    bike, pizza = videos
    assert bike.duration == 150.0 and bike.file == "j7rJstUseKg_360.0_510.0.mp4"
    # Indices run across the vid's lines: qid 9769's two windows, then qid 10016's.
    assert _spans(bike.captions) == [(0, 0.0, 10.0), (1, 20.0, 34.5), (2, 100.0, 150.0)]
    assert [c.sentence for c in bike.captions] == ["a man rides a red bike along the beach"] * 2 + [
        "a dog barks at the waves"
    ]
    assert all(c.question is None for c in bike.captions)
    assert _spans(pizza.captions) == [(0, 40.0, 52.0)]
    assert quarantined == [
        "NUsG9BgSes0_210.0_360.0 (row 3, qid 2579)[1]: segment end 128.0 beyond the duration 126.0",
        "NUsG9BgSes0_210.0_360.0 (row 3, qid 2579)[2]: empty or reversed segment [30.0, 24.0]",
        "NUsG9BgSes0_210.0_360.0 (row 3, qid 2579)[3]: negative start -2.0",
    ]


def test_qvhighlights_test_split_queries_span_the_whole_clip(qvh: tuple[Path, Path, Path]):
    _, test, videos_dir = qvh
    (video,), quarantined = load_qvhighlights(test, videos_dir)
    assert not quarantined and video.key == "bP5KfdFJzC4_60.0_210.0"
    assert _spans(video.captions) == [(0, 0.0, 150.0), (1, 0.0, 150.0)]


def test_qvhighlights_bad_lines_are_named(tmp_path: Path):
    lines = [dict(QVH_TRAIN[0]), dict(QVH_TRAIN[1]), dict(QVH_TRAIN[2])]
    del lines[1]["relevant_windows"]  # labelled file: a line without windows is an error
    del lines[2]["duration"]
    path = _jsonl(tmp_path / "highlight_val_release.jsonl", lines)
    with pytest.raises(DataErrors) as err:
        load_qvhighlights(path, tmp_path)
    assert str(path) in str(err.value)
    assert err.value.problems == [
        "row 2, field 'relevant_windows': missing (other lines of the file have it)",
        "row 3, field 'duration': expected a positive number of seconds",
    ]
    clash = [QVH_TRAIN[0], {**QVH_TRAIN[1], "qid": 9769, "duration": 149}]
    with pytest.raises(DataErrors) as err:
        load_qvhighlights(_jsonl(tmp_path / "clash.jsonl", clash), tmp_path)
    assert err.value.problems == [
        "row 2, field 'qid': duplicate qid 9769 (first on row 1)",
        "row 2, field 'duration': 149.0 for vid 'j7rJstUseKg_360.0_510.0', but 150.0 on row 1",
    ]


def test_qvhighlights_builds_ovi_items(qvh: tuple[Path, Path, Path]):
    train, test, videos_dir = qvh
    rows, quarantined = build_ovi_items(ovi_build(train, videos_dir, format="qvhighlights"))
    _check_rows(rows, "qvhighlights")
    assert len(quarantined) == 3
    assert {r["source_id"] for r in rows} == {"j7rJstUseKg_360.0_510.0", "NUsG9BgSes0_210.0_360.0"}
    # One scene per window; the bike query's first one asks when it happens: both its windows.
    assert {tuple(r["segment"]) for r in rows} == {(0.0, 34.5), (20.0, 34.5), (100.0, 150.0), (40.0, 52.0)}
    rows, quarantined = build_ovi_items(ovi_build(test, videos_dir, format="qvhighlights"))
    assert not quarantined and {tuple(r["segment"]) for r in rows} == {(0.0, 150.0)}


def test_cli_builds_from_another_format(qvh: tuple[Path, Path, Path], tmp_path: Path):
    train, _, videos_dir = qvh
    paths = {"captions": train, "videos": videos_dir, "out": tmp_path / "out", "format": "qvhighlights"}
    overrides = [f"builder.{key}={value}" for key, value in paths.items()]
    command = [sys.executable, "-m", "data_builders", "builder=ovi_train", *overrides]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    info = json.loads((tmp_path / "out" / "build_info.json").read_text())
    assert info["settings"]["source_format"] == "qvhighlights" and info["quarantined"] == 3
    assert {s.source for s in load_ovibench(tmp_path / "out")} == {"qvhighlights"}


# ---------------------------------------------------------------- YouCook2

YOUCOOK2 = {
    "database": {
        "GLd3aX16zBg": {
            "duration": 241.62,
            "subset": "training",
            "recipe_type": "113",
            "video_url": "https://www.youtube.com/watch?v=GLd3aX16zBg",
            "annotations": [
                {"id": 0, "segment": [90, 102], "sentence": "spread margarine on two slices of white bread"},
                {"id": 1, "segment": [114, 127], "sentence": "place a slice of cheese on the bread"},
                {"id": 2, "segment": [230, 250], "sentence": "cut the sandwich in half"},
            ],
        },
        "xHr8X2Wpmno": {
            "duration": 189.0,
            "subset": "validation",
            "recipe_type": "201",
            "video_url": "https://www.youtube.com/watch?v=xHr8X2Wpmno",
            "annotations": [
                {"id": 0, "segment": [5, 20.5], "sentence": "Boil the noodles in a pot of water."},
                {"id": 1, "segment": [40, 30], "sentence": "drain the noodles"},
                {"id": 2, "segment": [-1, 12], "sentence": "add salt to the water"},
            ],
        },
    }
}


@pytest.fixture()
def youcook2(tmp_path: Path) -> tuple[Path, Path]:
    videos = tmp_path / "raw_videos"
    _video(videos / "training" / "113" / "GLd3aX16zBg.mp4", 4, fps=1.0)  # the dataset's own layout
    _video(videos / "xHr8X2Wpmno.mp4", 4, fps=1.0)  # or flat
    path = tmp_path / "youcookii_annotations_trainval.json"
    path.write_text(json.dumps(YOUCOOK2))
    return path, videos


def test_youcook2_segments_in_seconds_and_videos_found(youcook2: tuple[Path, Path]):
    videos, quarantined = load_youcook2(*youcook2)
    sandwich, noodles = videos
    assert sandwich.duration == 241.62 and sandwich.file == "training/113/GLd3aX16zBg.mp4"
    assert _spans(sandwich.captions) == [(0, 90.0, 102.0), (1, 114.0, 127.0)]
    assert noodles.file == "xHr8X2Wpmno.mp4"
    assert [(c.start, c.end, c.sentence) for c in noodles.captions] == [
        (5.0, 20.5, "boil the noodles in a pot of water")
    ]
    assert quarantined == [
        "GLd3aX16zBg[2]: segment end 250.0 beyond the duration 241.62",
        "xHr8X2Wpmno[1]: empty or reversed segment [40.0, 30.0]",
        "xHr8X2Wpmno[2]: negative start -1.0",
    ]


def test_youcook2_subset_filter(youcook2: tuple[Path, Path]):
    videos, quarantined = load_youcook2(*youcook2, subset="validation")
    assert [v.key for v in videos] == ["xHr8X2Wpmno"] and len(quarantined) == 2
    videos, _ = load_youcook2(*youcook2, subset=["training", "validation"])
    assert len(videos) == 2


def test_youcook2_bad_entries_are_named(tmp_path: Path):
    data = json.loads(json.dumps(YOUCOOK2))
    entry = data["database"]["GLd3aX16zBg"]
    del entry["annotations"][0]["sentence"]
    entry["annotations"][1]["id"] = 2
    entry["annotations"][2]["segment"] = [230]
    del data["database"]["xHr8X2Wpmno"]["duration"]
    path = tmp_path / "youcookii_annotations_trainval.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DataErrors) as err:
        load_youcook2(path, tmp_path)
    assert str(path) in str(err.value)
    assert err.value.problems == [
        "video 'GLd3aX16zBg', field 'annotations[0].sentence': expected a string",
        "video 'GLd3aX16zBg', field 'annotations[2].id': duplicate id 2",
        "video 'GLd3aX16zBg', field 'annotations[2].segment': expected [start, end] seconds, got [230]",
        "video 'xHr8X2Wpmno', field 'duration': expected a positive number of seconds",
    ]
    path.write_text(json.dumps({"GLd3aX16zBg": {}}))
    with pytest.raises(DataError, match="field 'database': expected an object of videos"):
        load_youcook2(path, tmp_path)


def test_files_keyed_by_video_share_the_entry_checks(tmp_path: Path):
    """ActivityNet and YouCook2 entries: an object with a positive duration, then each format's own fields."""
    entries = {"v_list": [], "v_zero": {"duration": 0}}
    activitynet, youcook2 = tmp_path / "activitynet.json", tmp_path / "youcook2.json"
    activitynet.write_text(json.dumps(entries))
    youcook2.write_text(json.dumps({"database": entries}))
    for path, load, own_field in (
        (activitynet, load_activitynet, "'timestamps'"),
        (youcook2, load_youcook2, "'subset'"),
    ):
        with pytest.raises(DataErrors) as err:
            load(path, tmp_path)
        problems = err.value.problems
        assert problems[:2] == [
            "video 'v_list': expected an object",
            "video 'v_zero', field 'duration': expected a positive number of seconds",
        ]
        assert own_field in problems[2]


def test_youcook2_builds_ovi_items(youcook2: tuple[Path, Path]):
    rows, quarantined = build_ovi_items(ovi_build(*youcook2, format="youcook2"))
    _check_rows(rows, "youcook2")
    assert len(quarantined) == 3
    by_video = {r["source_id"]: r["video_path"] for r in rows}
    assert by_video == {
        "GLd3aX16zBg": "videos/training/113/GLd3aX16zBg.mp4",
        "xHr8X2Wpmno": "videos/xHr8X2Wpmno.mp4",
    }


# ---------------------------------------------------------------- UCF-Crime

# Real spacing: runs of spaces, and stray tabs on the second line.
UCF_LINES = [
    "Arson011_x264.mp4  Arson  300  600  -1  -1",
    "Burglary005_x264.mp4\tBurglary \t300  600\t 750 \t900",
    "Normal_Videos_003_x264.mp4  Normal  -1  -1  -1  -1",
    "",
]


@pytest.fixture()
def ucf(tmp_path: Path) -> tuple[Path, Path]:
    videos = tmp_path / "UCF_Crimes" / "Videos"
    _video(videos / "Arson" / "Arson011_x264.mp4", 660, fps=30.0)  # 22 s, under its class folder
    _video(videos / "Burglary005_x264.mp4", 1000, fps=25.0)  # 40 s, flat
    _video(videos / "Testing_Normal_Videos_Anomaly" / "Normal_Videos_003_x264.mp4", 100, fps=25.0)  # 4 s
    path = tmp_path / "Temporal_Anomaly_Annotation_for_Testing_Videos.txt"
    path.write_text("\n".join(UCF_LINES))
    return path, videos


def test_ucf_crime_frames_become_seconds_at_each_videos_fps(ucf: tuple[Path, Path]):
    (arson, burglary, normal), quarantined = load_ucf_crime(*ucf)
    assert not quarantined
    assert (arson.key, arson.file, arson.duration) == ("Arson011_x264", "Arson/Arson011_x264.mp4", 22.0)
    assert _spans(arson.captions) == [(0, 10.0, 20.0)]  # frames 300..600 at 30 fps
    assert arson.captions[0].sentence == "an anomaly of type arson happens"
    assert burglary.duration == 40.0
    assert _spans(burglary.captions) == [(0, 12.0, 24.0), (1, 30.0, 36.0)]  # at 25 fps
    assert normal.file == "Testing_Normal_Videos_Anomaly/Normal_Videos_003_x264.mp4"
    assert [(c.start, c.end, c.sentence) for c in normal.captions] == [(0.0, 4.0, "normal activity")]


def test_ucf_crime_fps_can_be_given(ucf: tuple[Path, Path]):
    videos, _ = load_ucf_crime(*ucf, fps_of=lambda path: 60.0)
    assert _spans(videos[0].captions) == [(0, 5.0, 10.0)] and videos[0].duration == 22.0
    assert _spans(videos[1].captions) == [(0, 5.0, 10.0), (1, 12.5, 15.0)]


def test_ucf_crime_bad_events_are_quarantined(ucf: tuple[Path, Path]):
    path, videos_dir = ucf
    path.write_text(
        "Arson011_x264.mp4  Arson  600  300  700  900\n"  # reversed; past the 22 s end (660 frames)
        "Burglary005_x264.mp4  Burglary  -5  20  -1  40\n"  # negative; half absent
        "Normal_Videos_003_x264.mp4  Normal  -1  -1  10  20\n"  # an event on a Normal video
        "RoadAccidents001_x264.mp4  RoadAccidents  30  60  -1  -1\n"  # no such video
    )
    videos, quarantined = load_ucf_crime(path, videos_dir)
    assert [v.key for v in videos] == ["Normal_Videos_003_x264"]  # still its whole-video caption
    assert quarantined == [
        "Arson011_x264 (row 1)[0]: frames [600, 300] at 30 fps: empty or reversed segment [20.0, 10.0]",
        "Arson011_x264 (row 1)[1]: frames [700, 900] at 30 fps: segment end 30.0 beyond the duration 22.0",
        "Burglary005_x264 (row 2)[0]: frames [-5, 20] at 25 fps: negative start -0.2",
        "Burglary005_x264 (row 2)[1]: only one of its frame numbers is given: [-1, 40]",
        "Normal_Videos_003_x264 (row 3)[1]: a Normal video has no anomalous event, got frames [10, 20]",
        f"RoadAccidents001_x264 (row 4): video RoadAccidents001_x264.mp4 not found in {videos_dir}",
    ]
    path.write_text("Arson011_x264.mp4  Arson  -1  -1  -1  -1\n")
    assert load_ucf_crime(path, videos_dir) == (
        [],
        ["Arson011_x264 (row 1): no anomalous event for class Arson"],
    )


def test_ucf_crime_bad_lines_are_named(ucf: tuple[Path, Path]):
    path, videos_dir = ucf
    path.write_text(
        "Arson011_x264.mp4  Arson  300  600  -1  -1\n"
        "Burglary005_x264.mp4  Burglary  300  600\n"  # two numbers missing
        "\n"
        "Arson011_x264.mp4  Arson  300  600  -1  -1\n"  # the same video again
        "Normal_Videos_003_x264.mp4  Normal  -1  12.5  -1  -1\n"
    )
    with pytest.raises(DataErrors) as err:
        load_ucf_crime(path, videos_dir)
    assert str(path) in str(err.value)
    fields = "('name', 'class', 'start1', 'end1', 'start2', 'end2')"
    assert err.value.problems == [
        f"row 2: expected 6 fields {fields}, got 4",
        "row 4, field 'name': duplicate video Arson011_x264.mp4 (first on row 1)",
        "row 5, field 'end1': expected a frame number or -1, got '12.5'",
    ]
    with pytest.raises(DataError, match="cannot read the annotation"):
        load_ucf_crime(path.with_name("missing.txt"), videos_dir)


def test_ucf_crime_builds_ovi_train_with_nested_videos(ucf: tuple[Path, Path], tmp_path: Path):
    out = build_ovi_train(ovi_build(*ucf, out=str(tmp_path / "out"), format="ucf_crime", forms=["open"]))
    rows = [json.loads(line) for line in (out / "ovibench.jsonl").read_text().splitlines()]
    _check_rows(rows, "ucf_crime")
    assert {(r["source_id"], tuple(r["segment"])) for r in rows} == {
        ("Arson011_x264", (10.0, 20.0)),
        ("Burglary005_x264", (12.0, 24.0)),
        ("Burglary005_x264", (30.0, 36.0)),
        ("Normal_Videos_003_x264", (0.0, 4.0)),
    }
    assert (out / "videos" / "Arson" / "Arson011_x264.mp4").is_file()
    assert len(load_ovibench(out)) == len(rows)


# ---------------------------------------------------------------- MovieChat


def _moviechat_entry(video_path: str, fps: float, num_frame: int, points: list[tuple]) -> dict:
    return {
        "info": {"video_path": video_path, "num_frame": num_frame, "fps": fps, "h": 32, "w": 32},
        "global": [{"question": "What is the film about?", "answer": "A family trip to the sea."}] * 3,
        "breakpoint": [{"time": t, "question": q, "answer": a} for t, q, a in points],
        "caption": "A family drives to the sea and goes swimming.",
    }


MOVIECHAT = {
    "AWA-6.json": _moviechat_entry(
        "AWA-6.mp4",
        25.0,
        2500,  # 100 s
        [
            (1500, "What is the man holding?", "The man is holding a red umbrella."),
            (125, "Where are they?", "They are standing in a parking lot."),
            (2600, "What happens at the end?", "The car drives away."),  # 104 s: past the end
            (-25, "What is on the table?", "A plate of fruit."),
            (500, " ", "Nothing."),
        ],
    ),
    "1.json": _moviechat_entry(
        "1.mp4",
        30.0,
        900,  # 30 s
        [
            (600, "How many people are in the room?", "Three people sit in the room."),
            (750, "Is the door open?", "Yes."),  # one word: too short to interrupt
            (900, "What colour is the sofa?", "The sofa is green."),
        ],
    ),
}


@pytest.fixture()
def moviechat(tmp_path: Path) -> tuple[Path, Path]:
    annotations, videos = tmp_path / "annotations", tmp_path / "videos"
    annotations.mkdir()
    for name, entry in MOVIECHAT.items():
        (annotations / name).write_text(json.dumps(entry))
        _video(videos / entry["info"]["video_path"], 4, fps=1.0)
    return annotations, videos


def test_moviechat_breakpoints_become_question_captions(moviechat: tuple[Path, Path]):
    (one, awa), quarantined = load_moviechat(*moviechat)  # files in name order: 1.json, AWA-6.json
    assert (awa.key, awa.duration, awa.file) == ("AWA-6", 100.0, "AWA-6.mp4")
    assert _spans(awa.captions) == [(0, 50.0, 60.0), (1, 0.0, 5.0)]  # frame 1500 at 25 fps = 60 s
    assert awa.captions[0].question == "What is the man holding?"
    assert awa.captions[0].sentence == "the man is holding a red umbrella"
    assert one.duration == 30.0 and _spans(one.captions) == [
        (0, 10.0, 20.0),
        (1, 15.0, 25.0),
        (2, 20.0, 30.0),
    ]
    assert quarantined == [
        "AWA-6[2]: breakpoint at frame 2600 (104.0 s): segment end 104.0 beyond the duration 100.0",
        "AWA-6[3]: breakpoint at frame -25 (-1.0 s): negative time -25 (frame index)",
        "AWA-6[4]: breakpoint at frame 500 (20.0 s): empty question",
    ]


def test_moviechat_window_and_single_file(moviechat: tuple[Path, Path]):
    annotations, videos_dir = moviechat
    (awa,), _ = load_moviechat(annotations / "AWA-6.json", videos_dir, window_s=30)
    assert _spans(awa.captions) == [(0, 30.0, 60.0), (1, 0.0, 5.0)]


def test_moviechat_bad_files_are_named(moviechat: tuple[Path, Path]):
    annotations, videos_dir = moviechat
    bad = json.loads(json.dumps(MOVIECHAT["1.json"]))
    del bad["info"]["fps"]
    bad["breakpoint"][1]["time"] = "00:25"
    del bad["breakpoint"][2]["answer"]
    (annotations / "1.json").write_text(json.dumps(bad))
    (annotations / "AWA-7.json").write_text(json.dumps(MOVIECHAT["AWA-6.json"]))  # the same video again
    (annotations / "broken.json").write_text("{")
    with pytest.raises(DataErrors) as err:
        load_moviechat(annotations, videos_dir)
    assert str(annotations) in str(err.value)
    problems = err.value.problems
    assert problems[:4] == [
        "1.json, field 'info.fps': expected a positive number",
        "1.json, field 'breakpoint[1].time': expected a frame index",
        "1.json, field 'breakpoint[2].answer': expected a string",
        "AWA-7.json: video 'AWA-6' is annotated in AWA-6.json too",
    ]
    assert problems[4].startswith(f"{annotations / 'broken.json'}: cannot read MovieChat annotation JSON")
    with pytest.raises(DataError, match="no MovieChat annotation files"):
        load_moviechat(videos_dir, videos_dir)  # a directory without *.json
    with pytest.raises(DataError, match="No such file"):
        load_moviechat(annotations / "missing.json", videos_dir)


def test_moviechat_builds_ovi_items_asking_its_own_questions(moviechat: tuple[Path, Path]):
    rows, quarantined = build_ovi_items(ovi_build(*moviechat, format="moviechat", forms=["open"]))
    _check_rows(rows, "moviechat")
    assert "1[1]: answer too short to interrupt" in quarantined and len(quarantined) == 4
    asked = {(r["source_id"], r["question_time"]): (r["question"], r["answer"]) for r in rows}
    assert asked == {
        ("AWA-6", 60.0): ("What is the man holding?", "The man is holding a red umbrella."),
        ("AWA-6", 5.0): ("Where are they?", "They are standing in a parking lot."),
        ("1", 20.0): ("How many people are in the room?", "Three people sit in the room."),
        ("1", 30.0): ("What colour is the sofa?", "The sofa is green."),
    }
    answers = {question: answer for question, answer in asked.values()}
    for row in rows:
        if row["interruption_type"] == "Correction":  # asks another breakpoint question seen by then
            question = row["interruption"].split(": ", 1)[1]
            assert row["reference_reaction"] == answers[question] != row["answer"]


def test_an_end_past_the_duration_within_the_files_rounding_is_the_videos_end(tmp_path: Path):
    """The real ActivityNet Captions train file gives durations and ends to 0.01 s, and 29 of its 33
    quarantined captions end 0.01 s past the stated duration (61.14 for 61.13): that is the file's
    rounding, so the segment runs to the video's end (counted in stats.md). Only more than a step past,
    or empty and reversed segments, stay quarantined."""
    anet = {
        "v_a": {
            "duration": 61.13,
            "timestamps": [[50.0, 61.14], [55.0, 61.16], [30.0, 20.0], [61.13, 61.14], [1.0, 61.13]],
            "sentences": ["a man runs", "a man stops", "reversed", "empty once moved", "ends at the end"],
        }
    }
    (tmp_path / "anet.json").write_text(json.dumps(anet))
    (video,), quarantined = load_activitynet_captions(tmp_path / "anet.json")
    kept = {c.index: (c.end, c.moved_to_end) for c in video.captions}
    assert kept == {0: (61.13, True), 4: (61.13, False)}
    assert [q.split(": ", 1)[0] for q in quarantined] == ["v_a[1]", "v_a[2]", "v_a[3]"]
    assert "beyond the duration" in quarantined[0] and "reversed" in quarantined[1]
    assert segment_problem(0.0, 61.14, "x", 61.13) is None  # before: beyond the 1 ms tolerance
    assert segment_problem(0.0, 61.2, "x", 61.1) is None and segment_problem(0.0, 61.3, "x", 61.1)
    _video(tmp_path / "videos" / "v_a.mp4", 62 * 4, 4.0)
    build_ovi_train(ovi_build(tmp_path / "anet.json", tmp_path / "videos", forms=["open"]))
    stats = (tmp_path / "out" / "stats.md").read_text()
    assert "Segment ends moved onto the video's end: 1 " in stats and "Questions: templates" in stats


def test_a_duration_written_with_float_noise_has_the_precision_of_its_rounded_form(tmp_path: Path):
    """The real ActivityNet Captions file writes some durations with float noise; ends one 0.01 s step past
    them (120 for 119.99000000000001, 148.84 for 148.82999999999998) were refused as beyond the duration,
    the noise read as a 1e-14 precision. They are the file's rounding; two steps past, empty and reversed
    segments stay quarantined."""
    anet = {
        "v_up": {"duration": 119.99000000000001, "timestamps": [[80.0, 120]], "sentences": ["a man waves"]},
        "v_down": {
            "duration": 148.82999999999998,
            "timestamps": [[100.0, 148.84], [140.0, 148.85], [148.84, 148.84], [30.0, 20.0]],
            "sentences": ["a man sits", "two steps past", "empty", "reversed"],
        },
    }
    (tmp_path / "anet.json").write_text(json.dumps(anet))
    videos, quarantined = load_activitynet_captions(tmp_path / "anet.json")
    kept = {v.key: [(c.end, c.moved_to_end) for c in v.captions] for v in videos}
    assert kept == {"v_up": [(119.99000000000001, True)], "v_down": [(148.82999999999998, True)]}
    assert [q.split(": ", 1)[1] for q in quarantined] == [
        "segment end 148.85 beyond the duration 148.82999999999998",
        "empty or reversed segment [148.84, 148.84]",
        "empty or reversed segment [30.0, 20.0]",
    ]
    assert annotation_step(119.99000000000001) == annotation_step(148.82999999999998, 148.84) == 0.01


# ---------------------------------------------------------------- every reader: float noise, provenance

NOISY = 70.28999999999999  # a duration as real files carry it; the last segment ends at 70.29


def test_a_segment_ending_at_the_rounded_duration_is_kept_by_every_reader(tmp_path: Path):
    assert segment_problem(0.0, 70.29, "x", NOISY) is None and segment_problem(-1e-9, 1.0, "x", 5.0) is None
    assert segment_problem(0.0, 70.31, "x", NOISY) == f"segment end 70.31 beyond the duration {NOISY}"
    assert within_video(-1e-9, 70.29, NOISY) == (0.0, NOISY)
    anet = {"v_a": {"duration": NOISY, "timestamps": [[0, 30.5], [30.5, 70.29]], "sentences": ["a", "b"]}}
    (tmp_path / "anet.json").write_text(json.dumps(anet))
    qvh = [{**QVH_TRAIN[1], "duration": NOISY, "relevant_windows": [[40, 70.29]]}]
    youcook = {"database": {"y": {**YOUCOOK2["database"]["GLd3aX16zBg"], "duration": NOISY}}}
    youcook["database"]["y"]["annotations"] = [{"id": 7, "segment": [50, 70.29], "sentence": "serve"}]
    (tmp_path / "youcook.json").write_text(json.dumps(youcook))
    # The last breakpoint at the last frame (MovieChat and UCF-Crime compute both times alike from frames).
    movie = _moviechat_entry("m.mp4", 29.97, 2107, [(2107, "What happens at the end?", "They wave goodbye.")])
    (tmp_path / "m.json").write_text(json.dumps(movie))
    readers = [
        read_source("activitynet", tmp_path / "anet.json", tmp_path),
        read_source("qvhighlights", _jsonl(tmp_path / "qvh.jsonl", qvh), tmp_path),
        read_source("youcook2", tmp_path / "youcook.json", tmp_path),
        read_source("moviechat", tmp_path / "m.json", tmp_path),
    ]
    for (video,), quarantined in readers:
        assert quarantined == [] and video.captions
        assert all(0 <= c.start < c.end <= video.duration for c in video.captions)
    assert [c.end for c in readers[0][0][0].captions] == [30.5, NOISY]


def test_every_reader_records_the_sources_own_annotation_ids(
    qvh: tuple[Path, Path, Path], youcook2: tuple[Path, Path], moviechat: tuple[Path, Path]
):
    (_, pizza), _ = load_qvhighlights(*qvh[::2])
    assert [c.ref for c in pizza.captions] == [{"qid": 2579, "window": 0}]
    (sandwich, _), _ = load_youcook2(*youcook2)
    assert [c.ref for c in sandwich.captions] == [{"id": 0}, {"id": 1}]
    (_, awa), _ = load_moviechat(*moviechat)
    assert [c.ref for c in awa.captions] == [{"breakpoint": 0}, {"breakpoint": 1}]
    rows, _ = build_ovi_items(ovi_build(qvh[0], qvh[2], format="qvhighlights", forms=["open"]))
    qids = {ref["qid"] for row in rows for ref in row["source_annotations"]}
    assert qids == {9769, 10016, 2579}  # every query of the file (the third's bad windows quarantined)
