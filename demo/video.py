"""The demo's video: its frames for scrubbing, and the visual prompt drawn on one of them.

The page sends the drag of a tool (a box in frame pixels) and the tool; the prompt is drawn here by
``data_builders.visual_prompts.draw_prompt``, in the styles the training data and the benchmark twins are
drawn in, so the model sees the kind of drawing it was tuned on, and the page shows the very pixels saved.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from core.errors import DataError
from core.video_io import read_all_frames
from data_builders.visual_prompts import PROMPT_COLOURS, draw_prompt

# The page's tools, as visual-prompt shapes (data_builders.visual_prompts.SHAPES).
TOOLS = {"box": "rectangle", "arrow": "arrow", "circle": "ellipse", "scribble": "scribble"}


@dataclass(frozen=True)
class Drawing:
    """A visual prompt on one frame: the shape, the box it marks (frame pixels), its look."""

    frame: int
    shape: str
    box: tuple[float, float, float, float]
    colour: str = "red"
    width: int = 2

    @property
    def style(self) -> dict:
        """As the V2P twins record a prompt's look (``prompt_style``)."""
        return {"colour": self.colour, "width": self.width, "doodle": False}


class Video:
    """A video file's frames, kept (sampled evenly to at most ``max_frames``) for scrubbing.

    Raises:
        DataError: the file is missing or does not decode.
    """

    def __init__(self, path: str | Path, max_frames: int):
        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(str(self.path), "video not found")
        try:
            frames = read_all_frames(self.path)
            import decord

            self.fps = float(decord.VideoReader(str(self.path)).get_avg_fps())
        except Exception as err:  # noqa: BLE001 - decord raises its own errors for a file it cannot read
            raise DataError(str(self.path), f"cannot decode the video: {err}") from None
        if not len(frames):
            raise DataError(str(self.path), "the video has no frames")
        self.duration = len(frames) / self.fps
        keep = np.unique(np.linspace(0, len(frames) - 1, min(len(frames), max_frames)).round().astype(int))
        self.frames = frames[keep]
        self.times = keep / self.fps  # each kept frame's time in seconds

    def info(self) -> dict:
        height, width = self.frames.shape[1:3]
        return {
            "name": self.path.name,
            "frames": len(self.frames),
            "duration": round(self.duration, 3),
            "width": int(width),
            "height": int(height),
            "times": [round(float(t), 3) for t in self.times],
        }

    def frame(self, index: int) -> np.ndarray:
        if not 0 <= index < len(self.frames):
            raise DataError(str(self.path), f"frame {index} is outside 0..{len(self.frames) - 1}")
        return self.frames[index]

    def draw(self, drawing: Drawing) -> np.ndarray:
        """The frame with the prompt drawn on it (``uint8[H, W, 3]``).

        Raises:
            DataError: an unknown colour, a box outside the frame or an empty one.
        """
        if drawing.colour not in PROMPT_COLOURS:
            raise DataError("drawing", f"colour {drawing.colour!r} not in {sorted(PROMPT_COLOURS)}")
        frame = self.frame(drawing.frame)
        height, width = frame.shape[:2]
        x0, y0, x1, y1 = drawing.box
        box = (max(0.0, x0), max(0.0, y0), min(float(width - 1), x1), min(float(height - 1), y1))
        if box[2] - box[0] < 2 or box[3] - box[1] < 2:
            raise DataError("drawing", f"box {drawing.box} is empty inside the {width}x{height} frame")
        return draw_prompt(
            frame, drawing.shape, box, colour=PROMPT_COLOURS[drawing.colour], width=drawing.width
        )


def encode(frame: np.ndarray, format: str = "JPEG") -> bytes:
    """A frame as image bytes (JPEG for the page, PNG where the pixels must survive: a saved prompt)."""
    out = io.BytesIO()
    Image.fromarray(frame).save(out, format=format, **({"quality": 90} if format == "JPEG" else {}))
    return out.getvalue()
