"""Readers of the OVI-Train source datasets' annotations.

Each reader turns one dataset's own annotation format into the shared caption model of
:mod:`data_builders.sources.captions` (a list of :class:`CaptionedVideo`), which is all the OVI
item builder needs. ActivityNet Captions is here; QVHighlights, YouCook2, UCF-Crime and MovieChat
readers belong beside it.
"""

from __future__ import annotations

from data_builders.sources.activitynet import load_activitynet_captions
from data_builders.sources.captions import Caption, CaptionedVideo

__all__ = ["Caption", "CaptionedVideo", "load_activitynet_captions"]
