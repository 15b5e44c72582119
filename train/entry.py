"""What every command-line entry does around its work: quiet library defaults, readable errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from data_builders.errors import DataError, DecodeError
from train.errors import ConfigError


def run_cli(work: Callable[[], object]) -> None:
    """Run ``work``; user-facing errors print as one message and exit 2, without a traceback."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        work()
    except (ConfigError, DataError, DecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
