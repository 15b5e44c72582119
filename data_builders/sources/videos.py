"""Finding a source's video files on disk, and reading a video's frame rate and length.

Source datasets lay their videos out differently (UCF-Crime by class folder, YouCook2 by split and
recipe type, mixed containers), so readers look a video up by name instead of assuming
``<key>.mp4``.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import DecodeError

VIDEO_SUFFIXES = (".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v")


class VideoFinder:
    """Looks videos up under one directory: first at given relative paths, then by file name or stem.

    The directory is walked once, on the first lookup that needs it; a missing directory finds
    nothing. When several files share a stem, the one in the first folder (in sorted order) wins, and
    within a folder ``.mp4`` comes first, so lookups are deterministic.
    """

    def __init__(self, videos_dir: str | Path | None):
        self.root = Path(videos_dir) if videos_dir is not None else None
        self._index: dict[str, str] | None = None

    def find(self, stem: str, *candidates: str) -> str | None:
        """The path of a video relative to the root, or None when there is none.

        Args:
            stem: the file name without its suffix (``"Abuse028_x264"``, a YouTube id).
            candidates: relative paths to try first, in order (``"Abuse/Abuse028_x264.mp4"``).
        """
        if self.root is None:
            return None
        for relative in (*candidates, *(stem + suffix for suffix in VIDEO_SUFFIXES)):
            if (self.root / relative).is_file():
                return Path(relative).as_posix()
        return self._walk().get(stem)

    def _walk(self) -> dict[str, str]:
        if self._index is None:
            found: dict[str, str] = {}
            for folder, _, names in sorted(os.walk(self.root)):
                for name in sorted(names, key=lambda n: (Path(n).stem, _suffix_rank(n))):
                    stem = Path(name).stem
                    if _suffix_rank(name) < len(VIDEO_SUFFIXES) and stem not in found:
                        found[stem] = (Path(folder) / name).relative_to(self.root).as_posix()
            self._index = found
        return self._index


def _suffix_rank(name: str) -> int:
    suffix = Path(name).suffix.lower()
    return VIDEO_SUFFIXES.index(suffix) if suffix in VIDEO_SUFFIXES else len(VIDEO_SUFFIXES)


def probe_video(path: str | Path) -> tuple[float, int]:
    """A video's average frame rate and frame count, from its container (decord, no decoding).

    Raises:
        DecodeError: the file cannot be opened as a video or reports no frame rate.
    """
    import decord  # imported here: only readers of frame-numbered sources need it

    try:
        reader = decord.VideoReader(str(path), ctx=decord.cpu(0))
        fps, frames = float(reader.get_avg_fps()), len(reader)
    except (decord.DECORDError, RuntimeError) as err:
        raise DecodeError(str(path), str(err).splitlines()[0] if str(err) else type(err).__name__) from None
    if fps <= 0 or frames <= 0:
        raise DecodeError(str(path), f"no frame rate or no frames (fps {fps}, {frames} frames)")
    return fps, frames
