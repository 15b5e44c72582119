"""``Choice``: the base of every closed choice in a config (a decoder, a backend, a model family …)."""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """An Enum whose members are their own names and compare equal to them as strings.

    Typed configs use these, so a typo (``judge.backend=endpont``) fails when the config is composed,
    naming the field and the choices. Members are strings too, so they key dicts, print and serialise
    as their value (``f"{Family.qwen2_vl}" == "qwen2_vl"``); name every member as its value.
    """

    def __str__(self) -> str:
        return self.value
