"""The project's errors, one per failure mode. Each is a :class:`UserError`: what the user fixes (an input
file, a setting, a server), with a message that says what and where, so a command line prints it in one
line instead of a traceback (``core.cli.run_cli``)."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """Something the user fixes; the message names it."""


class DataError(UserError, ValueError):
    """Bad input data: names the file, the row (1-based line) and the field, so a user can fix it."""

    def __init__(self, file: str, message: str, row: int | None = None, field: str | None = None):
        self.file, self.row, self.field = str(file), row, field
        where = (
            self.file + (f", row {row}" if row is not None else "") + (f", field '{field}'" if field else "")
        )
        super().__init__(f"{where}: {message}")


class DataErrors(DataError):
    """Several bad rows in one file, reported together so they can be fixed in one pass."""

    def __init__(self, file: str | Path, problems: list[str]):
        self.problems = list(problems)
        listing = "\n  ".join(self.problems)
        super().__init__(str(file), f"{len(self.problems)} problem(s):\n  {listing}")


class ConfigError(UserError, ValueError):
    """A setting is wrong or points at something missing (an unknown shape, a weight out of range, a path
    that is not there); the message names the key."""


class DecodeError(UserError, RuntimeError):
    """A video could not be decoded (corrupt, truncated, or decoding timed out)."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"{path}: cannot decode video: {reason}")
