"""Typed errors for bad input. Each names the file, the row (1-based line) and the field."""

from __future__ import annotations

from pathlib import Path


class DataError(ValueError):
    """Bad input data: names where it is so a user can fix it."""

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


class SettingError(ValueError):
    """A setting is wrong (an unknown shape, a mix of the wrong length, a missing path): names it."""


class DecodeError(RuntimeError):
    """A video could not be decoded (corrupt, truncated, or decoding timed out)."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"{path}: cannot decode video: {reason}")


class ConfigError(SettingError):
    """A configuration value is wrong or points at something missing; the message names the key."""
