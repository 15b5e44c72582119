"""The marked target of each synthetic V2P row, described in words (for the text-prompt diagnostic).

The V2P-Bench paper compares a visual prompt with the same target described in words ("the object marked
by the box" vs "the red circle"); the authors released no text-prompt variant (our reconstruction). The
synthetic twin can make one because its rows carry ``target_id`` and its object tracks carry the target's
attributes: ``<world>/tracks/<video_id>.json`` with ``objects: [{id, attributes: {colour, shape}}]``. The
world is found through the ``build_info.json`` the builder writes next to the release folder.

A real release names no target object, so :func:`load_targets` raises :class:`TargetsUnavailable` for it,
with a sentence saying why, which the evaluator reports instead of failing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import DataError
from core.files import read_json_object, read_jsonl
from core.formats.v2p import RELEASE_FILE

# Attribute sets tried in order: the fullest description first, then ones that leave out a word that
# would give the answer away (a colour question cannot call its target "the red circle").
_DESCRIPTIONS: tuple[tuple[str, ...], ...] = (
    ("colour", "shape"),
    ("colour", "class"),
    ("colour",),
    ("shape",),
    ("class",),
)


class TargetsUnavailable(Exception):
    """The release has no target attributes to describe (a real release, or a twin without its world)."""


@dataclass(frozen=True)
class Target:
    """The marked object of one row, and the other objects of its video.

    Attributes:
        attributes: the target's attributes, e.g. ``{"colour": "red", "shape": "circle"}``.
        others: the other annotated objects' attributes in the same video.
        exhaustive: every object in the video is annotated, so a description can be checked to be unique.
    """

    attributes: dict[str, str]
    others: tuple[dict[str, str], ...]
    exhaustive: bool = True


def load_targets(release_root: str | Path) -> dict[str, Target]:
    """Per row id (as :func:`~core.formats.v2p.load_v2p_release` names the samples), its target.

    Rows without ``target_id``, or whose track lacks that object, are left out.

    Raises:
        TargetsUnavailable: no row has a ``target_id`` (a real release), or the object tracks cannot be
            found through ``build_info.json``.
    """
    release_root = Path(release_root)
    rows = read_jsonl(release_root / RELEASE_FILE, problems=[])
    if not any("target_id" in row for _, row in rows):
        raise TargetsUnavailable(
            "the release rows have no target_id: a real V2P-Bench release does not say which object is "
            "marked, so the target cannot be described in words"
        )
    tracks_dir = _tracks_dir(release_root)
    videos: dict[str, dict[str, Any]] = {}
    targets = {}
    for number, row in rows:
        if "target_id" not in row:
            continue
        video_id = str(row["video_id"])
        if video_id not in videos:
            videos[video_id] = _read_track(tracks_dir / f"{video_id}.json")
        target = _target(videos[video_id], row["target_id"])
        if target is not None:
            targets[_row_id(row, number)] = target
    return targets


def target_phrase(target: Target, avoid: Iterable[str] = ()) -> str | None:
    """Words naming the target, e.g. ``"the red circle"``, ``"the red object"`` or ``"the circle"``.

    The first description (colour + shape, colour + class, colour, shape, class) that uses none of the
    words in ``avoid`` (the options: naming the answer would give it away) and fits no other object of
    the video.

    Returns:
        The phrase, or None when no description qualifies, or the video's objects are not all annotated
        (then uniqueness cannot be checked).
    """
    if not target.exhaustive:
        return None
    banned = {word for text in avoid for word in _words(text)}
    for names in _DESCRIPTIONS:
        chosen = {name: target.attributes.get(name) for name in names}
        if None in chosen.values() or _words(" ".join(chosen.values())) & banned:
            continue
        if any(all(other.get(n) == v for n, v in chosen.items()) for other in target.others):
            continue  # another object fits the same words
        noun = chosen.get("shape") or chosen.get("class") or "object"
        return " ".join(filter(None, ["the", chosen.get("colour"), noun]))
    return None


def _tracks_dir(release_root: Path) -> Path:
    info_path = release_root.parent / "build_info.json"
    try:
        world = Path(str(read_json_object(info_path, "build info")["world_root"]))
    except (DataError, KeyError) as err:
        raise TargetsUnavailable(f"no object tracks for the target attributes: {err}") from None
    # A relative world_root was relative to the build's working directory; the synthetic layout puts
    # the world next to the release's parent folder, so look there too.
    for candidate in (world, release_root.parent.parent / world.name):
        if (candidate / "tracks").is_dir():
            return candidate / "tracks"
    raise TargetsUnavailable(f"no object tracks for the target attributes: {world / 'tracks'} not found")


def _read_track(path: Path) -> dict[str, Any]:
    try:
        return read_json_object(path, "track")
    except DataError:
        return {"objects": []}  # its rows are left out, like rows whose object is missing


def _target(track: dict[str, Any], target_id: Any) -> Target | None:
    objects = track.get("objects") or []
    found = [obj for obj in objects if obj.get("id") == target_id]
    if len(found) != 1:
        return None
    others = tuple(_attributes(obj) for obj in objects if obj is not found[0])
    return Target(_attributes(found[0]), others, bool(track.get("exhaustive", True)))


def _attributes(obj: dict[str, Any]) -> dict[str, str]:
    return {str(name): str(value) for name, value in (obj.get("attributes") or {}).items()}


def _row_id(row: dict[str, Any], number: int) -> str:
    # The release loader's rule: an explicit id, else the 1-based line number.
    for key in ("id", "qid"):
        if row.get(key) is not None:
            return str(row[key])
    return f"{number:06d}"


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))
