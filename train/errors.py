"""Typed errors for configuration problems; the entry points print them without a traceback."""

from __future__ import annotations

from data_builders.errors import SettingError


class ConfigError(SettingError):
    """A configuration value is wrong or points at something missing; the message names the key."""
