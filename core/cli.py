"""What a command-line entry does around its work: quiet library defaults, one-line user errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from core.errors import UserError

# Errors a user fixes by changing their input or settings: a traceback would only hide the message.
USER_ERRORS: tuple[type[BaseException], ...] = (UserError,)


def run_cli(work: Callable[[], object], user_errors: tuple[type[BaseException], ...] = USER_ERRORS) -> None:
    """Run ``work``; a user error prints ``error: <message>`` to stderr and exits 2, without a traceback.

    Args:
        work: the command's body.
        user_errors: the exception types to report this way; anything else propagates.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        work()
    except user_errors as exc:
        fail(str(exc))


def fail(message: str) -> None:
    """Print ``error: <message>`` to stderr and exit 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)
