"""Small predicates and checks the row validators share, so every loader judges values alike."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def is_number(value: Any) -> bool:
    """An int or float, but not a bool (JSON ``true`` is not a number of seconds)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_string(value: Any) -> bool:
    """A str."""
    return isinstance(value, str)


def is_list_of(value: Any, check: Callable[[Any], bool], length: int | None = None) -> bool:
    """A list whose items all pass ``check``, of exactly ``length`` items when given."""
    if not isinstance(value, list) or (length is not None and len(value) != length):
        return False
    return all(map(check, value))


def duplicate_ids(numbered_ids: Iterable[tuple[int, Any]]) -> list[str]:
    """One problem per repeated id, naming its row and the row it first appeared on.

    Args:
        numbered_ids: ``(row number, id)`` pairs in file order; ``None`` ids are skipped.
    """
    first: dict[Any, int] = {}
    problems = []
    for number, row_id in numbered_ids:
        if row_id is None:
            continue
        if row_id in first:
            where = f"row {number}, field 'id'"
            problems.append(f"{where}: duplicate id {row_id!r} (first on row {first[row_id]})")
        first.setdefault(row_id, number)
    return problems
