"""Readers of the OVI-Train source datasets' annotations.

Each reader turns one dataset's own annotation format into the shared caption model of
:mod:`data_builders.sources.captions` (a list of :class:`CaptionedVideo`), which is all the OVI
item builder needs. Every reader converts times to seconds as it loads (UCF-Crime and MovieChat count
in frames), keys each video by the source's own id, and returns ``(videos, quarantined)``.

:data:`SOURCES` maps each format name to its reader, all called as ``reader(path, videos_dir,
**options)``; :func:`read_source` is that call with the name and options checked.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_builders.sources.activitynet import load_activitynet_captions
from data_builders.sources.captions import Caption, CaptionedVideo
from data_builders.sources.moviechat import load_moviechat
from data_builders.sources.qvhighlights import load_qvhighlights
from data_builders.sources.registry import call_reader
from data_builders.sources.ucf_crime import load_ucf_crime
from data_builders.sources.youcook2 import load_youcook2

Reader = Callable[..., tuple[list[CaptionedVideo], list[str]]]


def load_activitynet(
    path: str | Path, videos_dir: str | Path | None = None
) -> tuple[list[CaptionedVideo], list[str]]:
    """ActivityNet Captions with the uniform reader signature; its videos are ``<key>.mp4``."""
    return load_activitynet_captions(path)


SOURCES: dict[str, Reader] = {
    "activitynet": load_activitynet,
    "qvhighlights": load_qvhighlights,
    "youcook2": load_youcook2,
    "ucf_crime": load_ucf_crime,
    "moviechat": load_moviechat,
}


def read_source(
    source_format: str, path: str | Path, videos_dir: str | Path | None, **options: Any
) -> tuple[list[CaptionedVideo], list[str]]:
    """Read ``path`` with the reader of ``source_format``.

    Raises:
        ConfigError: an unknown format, or an option its reader does not take (naming those it does).
        DataError: as the reader raises for bad annotations.
    """
    return call_reader(SOURCES, "source format", source_format, path, videos_dir, **options)


__all__ = [
    "SOURCES",
    "Caption",
    "CaptionedVideo",
    "Reader",
    "load_activitynet",
    "load_activitynet_captions",
    "load_moviechat",
    "load_qvhighlights",
    "load_ucf_crime",
    "load_youcook2",
    "read_source",
]
