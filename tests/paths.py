"""The repository's paths, for every test: its root (commands run there) and its config directory."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
