"""Writing and reading small mp4 files: H.264 with a short GOP so random seeks stay cheap."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from core.files import atomic_path


def write_mp4(path: str | Path, frames: np.ndarray, fps: float, gop: int = 8) -> None:
    """Encode RGB frames to an H.264 mp4, atomically.

    The file is written next to ``path`` under a temporary name and moved into place, so a
    reader never sees a half-written video. Parent directories are created.

    Args:
        path: Destination ``.mp4`` path.
        frames: ``uint8[T, H, W, 3]`` RGB frames; ``H`` and ``W`` must be even (yuv420p).
        fps: Frame rate; may be fractional (e.g. 29.97).
        gop: Keyframe interval. Small, because libx264's default of 250 makes seeking decode
            hundreds of frames.

    Raises:
        ValueError: On a wrong shape, dtype, odd frame size or non-positive fps/gop.
    """
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) == 0:
        raise ValueError(f"frames must be non-empty uint8[T,H,W,3], got {frames.dtype}{list(frames.shape)}")
    height, width = frames.shape[1:3]
    if height % 2 or width % 2:
        raise ValueError(f"frame height and width must be even for yuv420p, got {height}x{width}")
    if fps <= 0 or gop < 1:
        raise ValueError(f"fps and gop must be positive, got fps={fps}, gop={gop}")

    with atomic_path(path) as tmp:
        _encode(str(tmp), frames, fps, gop)


def _encode(path: str, frames: np.ndarray, fps: float, gop: int) -> None:
    rate = Fraction(fps).limit_denominator(1001)
    with av.open(path, mode="w", format="mp4") as container:
        # One encoder thread: x264's output depends on its thread count, and a fixed bitstream
        # keeps decoded frames identical across machines for the same seed.
        stream = container.add_stream("libx264", rate=rate, options={"crf": "18", "threads": "1"})
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = gop
        for frame in frames:
            video_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
            container.mux(stream.encode(video_frame))
        container.mux(stream.encode())


def read_all_frames(path: str | Path) -> np.ndarray:
    """Decode every frame of a video with decord.

    Args:
        path: Video file.

    Returns:
        ``uint8[T, H, W, 3]`` RGB frames.
    """
    import decord  # imported here: only tests and checks decode whole files

    reader = decord.VideoReader(str(path), ctx=decord.cpu(0))
    return reader.get_batch(list(range(len(reader)))).asnumpy()
