"""What every builder leaves in its ``out`` folder beside its release files: one tail for all of them.

- ``hf/``: the training set, the samples the release format's own loader makes of the written files
  (:func:`~core.formats.ovi.release_ovibench`, :func:`~core.formats.v2p.release_v2p`), never
  the rows in memory, so training sees exactly what the benchmark loader sees;
- ``stats.md`` and ``build_info.json``: the build's summary for people and for machines (a
  :class:`BuildReport`; a build that writes its own summary, as the OVI-Train composition does, gives none).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from core.files import save_samples, write_reports
from core.sample import Sample

HF_DIR = "hf"


class BuildReport(NamedTuple):
    """A build's summary: ``stats`` (markdown, ``stats.md``) and ``info`` (``build_info.json``)."""

    stats: str
    info: dict[str, Any]


def save_build(out_dir: Path, samples: Iterable[Sample], report: BuildReport | None = None) -> Path:
    """Save ``samples`` as ``<out_dir>/hf`` and write ``report``'s two files; returns ``out_dir``."""
    save_samples(samples, out_dir / HF_DIR)
    if report is not None:
        write_reports(out_dir, report.stats, report.info)
    return out_dir
