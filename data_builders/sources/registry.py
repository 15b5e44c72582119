"""Calling a reader by its format name, with the name and the reader's options checked first.

Both registries use it: the caption sources (:data:`data_builders.sources.SOURCES`) and the object-track
formats (:data:`data_builders.sources.tracks.TRACK_FORMATS`). A reader's options are its keyword-only
parameters, so a misspelt option fails before any file is read, naming those it takes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from core.errors import ConfigError


def call_reader(readers: Mapping[str, Callable[..., Any]], what: str, name: str, *args: Any, **options: Any):
    """``readers[name](*args, **options)``; ``what`` says what the names are ("source format").

    Raises:
        ConfigError: an unknown name, or an option its reader does not take (naming those it does).
    """
    reader = readers.get(name)
    if reader is None:
        raise ConfigError(f"unknown {what} {name!r}; choose one of {sorted(readers)}")
    accepted = [key for key, p in inspect.signature(reader).parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(f"{what} {name!r} takes no option(s) {unknown}; it takes {accepted or 'none'}")
    return reader(*args, **options)
