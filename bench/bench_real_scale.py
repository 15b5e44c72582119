"""OVI-Train from annotation files at the real ActivityNet Captions train scale, without the real files.

Writes an ActivityNet-Captions-shaped ``train.json`` (10,009 videos, 37,421 captions: overlapping events,
durations with float noise such as 70.28999999999999, last events ending at the rounded duration, and a
few real annotation errors: last events 1.5 s past the video) and a QVHighlights-shaped train jsonl
(7,218 queries), one tiny mp4 hard-linked per video, then times ``build_ovi_train`` on each (template
questions, both forms, as the CLI's defaults) and prints rows, quarantined segments (and how many of those
lie within float noise of the duration: none should) and the question-kind distribution.

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


def _float_noise(reasons: list[str]) -> int:
    """Quarantine reasons "segment end E beyond the duration D" with E - D within the tolerance."""
    found = (re.search(r"segment end ([\d.]+) beyond the duration ([\d.]+)", r) for r in reasons)
    return sum(1 for m in found if m and float(m[1]) - float(m[2]) <= TIME_TOLERANCE_S)


def _build(name: str, path: Path, videos: Path, out: Path, fmt: str) -> None:
    start = time.perf_counter()
    build_ovi_train(ovi_build(path, videos, out=str(out), format=fmt))
    seconds = time.perf_counter() - start
    info = json.loads((out / "build_info.json").read_text())
    kinds = Counter(info["by_question_kind"])
    shares = ", ".join(f"{kind} {n / info['rows']:.1%}" for kind, n in kinds.most_common())
    print(
        f"{name}: {info['rows']} rows ({info['videos']} videos) in {seconds:.1f} s; quarantined "
        f"{info['quarantined']}, of them within float noise of the duration: "
        f"{_float_noise(info['quarantine_reasons'])}\n  question kinds: {shares}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=REAL_VIDEOS, help="ActivityNet videos (real: 10,009)")
    args = parser.parse_args()
    scale = args.videos / REAL_VIDEOS
    root = Path(tempfile.mkdtemp(prefix="bench_real_scale_"))
    try:
        captions = realistic_activitynet(args.videos, round(REAL_CAPTIONS * scale), seed=0, bad_ends=BAD_ENDS)
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
