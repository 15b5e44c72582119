"""What a command-line entry does around its work: quiet library defaults, one-line user errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable

from data_builders.errors import DataError, DecodeError, SettingError

# Errors a user fixes by changing their input or settings: a traceback would only hide the message.
USER_ERRORS: tuple[type[BaseException], ...] = (DataError, DecodeError, SettingError)


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


def asks_help_without_builder(argv: list[str]) -> bool:
    """Whether the command line asks for ``--help`` without choosing a builder.

    Hydra composes the config before printing its help, and the builder is required, so it would fail;
    the builders' overview (:func:`builders_help`) answers instead.
    """
    chosen = any(arg.lstrip("+~").split("=", 1)[0] == "builder" for arg in argv)
    return not chosen and any(arg in ("--help", "-h") for arg in argv)


def builders_help(usage: str, builders: Iterable[str]) -> str:
    """The overview ``python -m data_builders --help`` prints: ``usage`` (the command's docstring), the
    builders to choose from, and how to see one builder's settings."""
    return (
        f"{usage.strip()}\n\nBuilders (builder=NAME): {', '.join(builders)}\n"
        "Every setting of one builder, with its current value: python -m data_builders builder=NAME --help\n"
    )
