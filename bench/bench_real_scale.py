"""OVI-Train from annotation files at the real ActivityNet Captions train scale, without the real files.

Writes an ActivityNet-Captions-shaped ``train.json`` (10,009 videos, 37,421 captions: overlapping events,
durations with float noise such as 70.28999999999999, last events ending at the rounded duration, as
the real file's three a step past it (148.84 for 148.82999999999998), and a few real annotation errors:
last events 1.5 s past the video) and a QVHighlights-shaped train jsonl (7,218 queries), one tiny mp4
hard-linked per video, then times ``build_ovi_train`` on each (template questions, both forms, as the
CLI's defaults) and prints rows, quarantined segments (and how many of those lie within the file's
rounding of the duration: none should) and the question-kind distribution.

    python bench/bench_real_scale.py                 # the real scale; about a minute on 2 cores
    python bench/bench_real_scale.py --videos 300    # smaller (captions scale along)
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the realistic generators

from caption_sources import link_videos, ovi_build, realistic_activitynet, realistic_qvhighlights  # noqa: E402

from data_builders.ovi_train import build_ovi_train  # noqa: E402
from data_builders.sources.captions import TIME_TOLERANCE_S  # noqa: E402

REAL_VIDEOS, REAL_CAPTIONS, REAL_QUERIES = 10_009, 37_421, 7_218
BAD_ENDS = 12  # real annotation errors kept in the file: they must stay quarantined
ROUNDING_ENDS = 3  # the real file's ends one 0.01 s step past a float-noisy duration: they must be kept
FILE_STEP_S = 0.01  # the real file writes its times to 0.01 s


def _within_rounding(reasons: list[str]) -> int:
    """Quarantine reasons "segment end E beyond the duration D" with E past D by no more than one step of
    the file's rounding (and float noise)."""
    found = (re.search(r"segment end ([\d.]+) beyond the duration ([\d.]+)", r) for r in reasons)
    return sum(1 for m in found if m and float(m[1]) - float(m[2]) <= FILE_STEP_S + TIME_TOLERANCE_S)


def _build(name: str, path: Path, videos: Path, out: Path, fmt: str) -> None:
    start = time.perf_counter()
    build_ovi_train(ovi_build(path, videos, out=str(out), format=fmt))
    seconds = time.perf_counter() - start
    info = json.loads((out / "build_info.json").read_text())
    kinds = Counter(info["by_question_kind"])
    shares = ", ".join(f"{kind} {n / info['rows']:.1%}" for kind, n in kinds.most_common())
    print(
        f"{name}: {info['rows']} rows ({info['videos']} videos) in {seconds:.1f} s; quarantined "
        f"{info['quarantined']}, of them within the file's rounding of the duration: "
        f"{_within_rounding(info['quarantine_reasons'])}, ends moved onto the video's end: "
        f"{info['segment_ends_moved_to_video_end']}\n  question kinds: {shares}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=REAL_VIDEOS, help="ActivityNet videos (real: 10,009)")
    args = parser.parse_args()
    scale = args.videos / REAL_VIDEOS
    root = Path(tempfile.mkdtemp(prefix="bench_real_scale_"))
    try:
        captions = realistic_activitynet(
            args.videos, round(REAL_CAPTIONS * scale), seed=0, bad_ends=BAD_ENDS, rounding_ends=ROUNDING_ENDS
        )
        anet = root / "activitynet" / "train.json"
        anet.parent.mkdir(parents=True)
        anet.write_text(json.dumps(captions))
        noisy = sum(v["duration"] != round(v["duration"], 2) for v in captions.values())
        print(
            f"activitynet train.json: {len(captions)} videos, "
            f"{sum(len(v['sentences']) for v in captions.values())} captions, {noisy} noisy durations"
        )
        anet_videos = link_videos(root / "activitynet" / "videos", list(captions))
        lines = realistic_qvhighlights(round(REAL_QUERIES * scale), seed=0)
        qvh = root / "qvhighlights" / "highlight_train_release.jsonl"
        qvh.parent.mkdir(parents=True)
        qvh.write_text("".join(json.dumps(line) + "\n" for line in lines))
        qvh_videos = link_videos(root / "qvhighlights" / "videos", sorted({x["vid"] for x in lines}))
        print(f"qvhighlights jsonl: {len(lines)} queries\n")
        _build("activitynet", anet, anet_videos, root / "out_activitynet", "activitynet")
        _build("qvhighlights", qvh, qvh_videos, root / "out_qvhighlights", "qvhighlights")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
