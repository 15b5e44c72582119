"""Export our HF datasets of :class:`~core.sample.Sample` rows for LLaMA-Factory and ms-swift.

Both tools read a conversation as ``messages`` (``role`` / ``content``) whose text holds one
``<video>`` / ``<image>`` placeholder per medium, in order, with the media paths in ``videos`` /
``images`` lists. The text of a turn is its parts joined with no separator, placeholders where the
media are — the same order :mod:`models.chat` renders for our own training, so the prompt a model
sees is the same whichever tool trains it.

- ``llamafactory``: ``<out>/<name>.json`` (a JSON list) and ``<out>/dataset_info.json`` with the
  entry describing it (sharegpt formatting, role/content tags; other entries already in that file
  are kept). Train with ``dataset_dir: <out>`` and ``dataset: <name>``.
- ``swift``: ``<out>/<name>.jsonl``, one ``{"messages", "videos", "images"}`` object per line;
  train with ``--dataset <out>/<name>.jsonl``.

Preference pairs (:mod:`data_builders.preferences`) take the same path (:func:`export_conversations`) into
each tool's preference form: LLaMA-Factory's ``ranking: true`` entry (``messages`` up to the reaction, then
``chosen`` and ``rejected``), ms-swift's ``rejected_response`` beside messages ending with the chosen one.

Video spans. Both tools take whole files, but an OVI-Train sample shows two spans of one video
(``[0, t_q]`` with the question, ``(t_q, t_i]`` with the interruption), and giving the whole file
twice would show the model the future. So every span that is not the whole file is written as its
own trimmed mp4 under ``<out>/clips/`` (decoded with decord, encoded with
:func:`~core.video_io.write_mp4`) at ``clip_fps`` frames per second (default 4, above the
2 fps both tools sample Qwen2.5-VL video at) with the longer side at most ``clip_max_side`` px; the
clip keeps the span's duration. Whole-file spans (all V2P rows) point at the original file.

Training only the final turn. Our samples put loss on the last assistant turn only (OVI's partial
answer is given, not predicted). LLaMA-Factory learns every assistant turn unless ``mask_history:
true``; ms-swift likewise unless ``--loss_scale last_round``. Set those; ``<out>/README.md`` says
so too. A sample whose loss is elsewhere, whose turns do not alternate user/assistant, or whose text
already contains a placeholder is left out and listed in ``export_info.json`` with the reason.

Paths. LLaMA-Factory resolves a relative media path against ``dataset_dir``, so its export names its
own clips relative to the export folder (the folder can be moved; ``dataset_dir`` then names where it
is); ms-swift resolves them against the working directory only, so its export names every path
absolutely, and a moved swift export is exported again (``ROOT_IMAGE_DIR`` is only prefixed to relative
paths). Whole-file media stay absolute.

System turn and template. The export writes the system turn of ``family``'s chat format (Qwen3-VL and
InternVL have none), unless ``system`` gives another; ``<out>/README.md`` names the tool's template that
renders that family's prompt as ours (:data:`TOOL_TEMPLATES`), gives each tool's media settings closest to
the frames our training takes (``media``) and says what they cannot reproduce.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.config import SYSTEM_PROMPTS, Family
from core.decoding import MediaSpec
from core.errors import ConfigError, DataError, DecodeError
from core.files import write_json_atomic, write_jsonl_atomic, write_text_atomic
from core.sample import Part, Sample
from data_builders.cli_config import FAMILY_SYSTEM, ExportBuild, ExportFormat

EXPORT_FORMATS = tuple(fmt.value for fmt in ExportFormat)
PLACEHOLDERS = {"video": "<video>", "image": "<image>"}
EXPORT_INFO_FILE = "export_info.json"

# Each tool's chat template that renders a family's prompt token for token as ours, checked by training on
# our exports with the real tools (shared research/exports-verified-2026-12d.md; Qwen2-VL shares
# Qwen2.5-VL's chat format). LLaMA-Factory's plain ``qwen3_vl`` adds an empty think block before every
# trained answer. Families missing here were not checked.
TOOL_TEMPLATES: dict[str, dict[str, str]] = {
    "llamafactory": {
        Family.qwen2_vl: "qwen2_vl",
        Family.qwen2_5_vl: "qwen2_vl",
        Family.qwen3_vl: "qwen3_vl_nothink",
    },
    "swift": {Family.qwen2_vl: "qwen2_vl", Family.qwen2_5_vl: "qwen2_5_vl", Family.qwen3_vl: "qwen3_vl"},
}
# What the checked tool versions get wrong with a family's template (the same research, T2 and T4).
_LF_QWEN3_VL = (
    "Not `qwen3_vl`: it adds an empty think block before every trained answer. LLaMA-Factory 0.9.5 stops "
    "with an IndexError on Qwen3-VL rows of more than one video."
)
_SWIFT_QWEN3_VL = (
    "ms-swift 4.6 with transformers 5.19 or later nests the vision markers inside each video block (a tool "
    "issue); the other tokens are ours."
)
_TOOL_CAVEATS = {("llamafactory", Family.qwen3_vl): _LF_QWEN3_VL, ("swift", Family.qwen3_vl): _SWIFT_QWEN3_VL}


@dataclass
class ExportResult:
    """Where the export went, how many rows it has, what was left out (``(id, reason)``), clips written."""

    path: Path
    rows: int
    skipped: list[tuple[str, str]] = field(default_factory=list)
    clips: int = 0


class ClipWriter:
    """Media paths for video spans: the file itself for a whole-file span, else a trimmed mp4 (once).

    Args:
        folder: where clips go.
        fps: the clips' frame rate (``None``: the source's).
        max_side: the clips' longer side at most this many pixels.
    """

    def __init__(self, folder: Path, fps: float | None, max_side: int):
        if (fps is not None and fps <= 0) or max_side < 2:
            raise ConfigError(f"clip_fps and clip_max_side must be positive, got {fps}, {max_side}")
        self.folder, self.fps, self.max_side = folder, fps, max_side
        self._info: dict[str, tuple[int, float, int, int]] = {}
        self.written = 0

    def path_for(self, part: Part) -> str:
        """The absolute path of the file that holds a video part.

        Raises:
            DecodeError: the video cannot be read.
        """
        source = str(Path(part.path).resolve())
        frames, fps, width, height = self._probe(source)
        start, end = (
            max(0.0, part.start or 0.0),
            min(part.end if part.end is not None else np.inf, frames / fps),
        )
        if start <= 0.5 / fps and end >= frames / fps - 1.0 / fps:  # the whole file, give or take a frame
            return source
        clip = self.folder / f"{Path(source).stem}__{round(start * 1000)}-{round(end * 1000)}ms.mp4"
        if not clip.is_file():
            self._trim(source, start, end, fps, width, height, clip)
            self.written += 1
        return str(clip.resolve())

    def _probe(self, path: str) -> tuple[int, float, int, int]:
        if path not in self._info:
            import decord  # imported here: only video spans need a decoder

            try:
                reader = decord.VideoReader(path, ctx=decord.cpu(0))
                height, width = reader[0].shape[:2]
                self._info[path] = (len(reader), float(reader.get_avg_fps()), width, height)
            except (decord.DECORDError, RuntimeError) as err:
                raise DecodeError(
                    path, str(err).splitlines()[0] if str(err) else type(err).__name__
                ) from None
        return self._info[path]

    def _trim(
        self, path: str, start: float, end: float, fps: float, width: int, height: int, clip: Path
    ) -> None:
        import decord

        from core.video_io import write_mp4

        rate = self.fps or fps
        scale = min(1.0, self.max_side / max(width, height))
        size = (max(2, int(width * scale) // 2 * 2), max(2, int(height * scale) // 2 * 2))
        # Two frames at least: Qwen's temporal patch is 2, and ms-swift (qwen-vl-utils) fails on a one-frame
        # clip, then silently trains on a random other row instead.
        count = max(2, round((end - start) * rate))
        # Frame i shows the source at the middle of its 1/rate-long slot, so the clip lasts end - start.
        times = start + (np.arange(count) + 0.5) * (end - start) / count
        try:
            reader = decord.VideoReader(path, ctx=decord.cpu(0), width=size[0], height=size[1])
            indices = np.minimum(len(reader) - 1, (times * fps).astype(int)).tolist()
            frames = reader.get_batch(indices).asnumpy()
        except decord.DECORDError as err:
            raise DecodeError(path, str(err).splitlines()[0]) from None
        write_mp4(clip, frames, count / (end - start) if end > start else rate)


def conversation(sample: Sample, clips: ClipWriter, system: str | None) -> dict[str, Any]:
    """One exported row: ``messages`` with placeholders, and the ``videos`` / ``images`` they stand for.

    Raises:
        DataError: the sample cannot be exported as is (the message says why).
        DecodeError: one of its videos cannot be read.
    """
    _check_shape(sample)
    messages = [{"role": "system", "content": system}] if system else []
    media: dict[str, list[str]] = {"video": [], "image": []}
    for turn in sample.turns:
        content = ""
        for part in turn.parts:
            if part.type == "text":
                content += part.text or ""
                continue
            path = clips.path_for(part) if part.type == "video" else str(Path(part.path).resolve())
            media[part.type].append(path)
            content += PLACEHOLDERS[part.type]
        messages.append({"role": turn.role, "content": content})
    return {"id": sample.id, "messages": messages, "videos": media["video"], "images": media["image"]}


def _check_shape(sample: Sample) -> None:
    roles = [t.role for t in sample.turns]
    if not roles or roles != ["user", "assistant"] * (len(roles) // 2) or len(roles) % 2:
        raise DataError(sample.id, f"turns must alternate user, assistant, ...; got {roles}")
    losses = [i for i, t in enumerate(sample.turns) if t.loss]
    if losses != [len(roles) - 1]:
        raise DataError(sample.id, f"only the final assistant turn may carry loss; loss on turns {losses}")
    for turn in sample.turns:
        for part in turn.parts:
            if part.type == "text" and any(p in (part.text or "") for p in PLACEHOLDERS.values()):
                raise DataError(sample.id, "text already contains a <video>/<image> placeholder")


def export_samples(samples: Iterable[Sample], cfg: ExportBuild) -> ExportResult:
    """Write ``samples`` in ``cfg.format`` under ``cfg.out`` (``cfg.dataset`` is not read).

    Returns:
        What was written and what was left out.

    Raises:
        ConfigError: an unknown format.
        DataError: no sample could be exported.
    """
    return export_conversations(((sample, {}) for sample in samples), cfg)


def export_conversations(
    items: Iterable[tuple[Sample, dict[str, Any]]], cfg: ExportBuild, *, pairs: bool = False
) -> ExportResult:
    """Write each ``(sample, extra)`` under ``cfg.out`` in ``cfg.format``: the sample as a conversation
    (:func:`conversation`), ``extra``'s fields beside it. With ``pairs``, the samples end with the chosen
    reaction and each ``extra`` holds the ``rejected`` one: the files are the tool's preference data.

    A sample that cannot be exported is left out and listed in ``export_info.json`` with the reason.

    Raises:
        ConfigError: an unknown format.
        DataError: nothing could be exported.
    """
    if cfg.format not in EXPORT_FORMATS:
        raise ConfigError(f"format must be one of {EXPORT_FORMATS}, got {cfg.format!r}")
    fmt, out_dir = str(cfg.format), Path(cfg.out)
    name = cfg.name or out_dir.resolve().name
    clips = ClipWriter(out_dir / "clips", cfg.clip_fps, cfg.clip_max_side)
    system = SYSTEM_PROMPTS[cfg.family] if cfg.system == FAMILY_SYSTEM else cfg.system
    rows, skipped = [], []
    for sample, extra in items:
        try:
            rows.append({**conversation(sample, clips, system), **extra})
        except (DataError, DecodeError) as err:
            skipped.append((sample.id, str(err)))
    if not rows:
        unit = "pair" if pairs else "sample"
        raise DataError(str(out_dir), f"no {unit} could be exported ({len(skipped)} skipped)")
    if fmt == "llamafactory":  # it resolves relative paths against dataset_dir: the export can move
        rows = [_inside_relative(row, out_dir) for row in rows]
    write = _write_llamafactory if fmt == "llamafactory" else _write_swift
    result = ExportResult(write(rows, out_dir, name, pairs), len(rows), skipped, clips.written)
    _write_info(out_dir, cfg, name, result, rows, pairs)
    return result


def _inside_relative(row: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """``row`` with the media inside ``out_dir`` (its clips) named relative to it; the rest stay absolute,
    so moving the export folder breaks neither."""
    root = out_dir.resolve()

    def named(path: str) -> str:
        return str(Path(path).relative_to(root)) if Path(path).is_relative_to(root) else path

    return {**row, "videos": [named(p) for p in row["videos"]], "images": [named(p) for p in row["images"]]}


def _used_media(rows: list[dict[str, Any]]) -> list[str]:
    """The media lists any row uses: a video-only dataset gets no empty ``images`` column."""
    return [kind for kind in ("videos", "images") if any(row[kind] for row in rows)]


def _write_llamafactory(rows: list[dict[str, Any]], out_dir: Path, name: str, pairs: bool) -> Path:
    """``<name>.json`` and its ``dataset_info.json`` entry (sharegpt; with ``pairs``, ``ranking: true``:
    ``messages`` up to the reaction, then ``chosen`` and ``rejected`` messages)."""
    path = out_dir / f"{name}.json"
    write_json_atomic(path, [_llamafactory_pair(row) for row in rows] if pairs else rows, indent=1)
    columns = {"messages": "messages", **({"chosen": "chosen", "rejected": "rejected"} if pairs else {})}
    columns.update({kind: kind for kind in _used_media(rows)})
    entry: dict[str, Any] = {
        "file_name": path.name,
        "formatting": "sharegpt",
        **({"ranking": True} if pairs else {}),
        "columns": columns,
        "tags": {
            "role_tag": "role",
            "content_tag": "content",
            "user_tag": "user",
            "assistant_tag": "assistant",
            "system_tag": "system",
        },
    }
    info_path = out_dir / "dataset_info.json"
    info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.is_file() else {}
    info[name] = entry
    write_json_atomic(info_path, info, indent=2)
    return path


def _llamafactory_pair(row: dict[str, Any]) -> dict[str, Any]:
    *prompt, chosen = row["messages"]
    rejected = {"role": "assistant", "content": row["rejected"]}
    record = {"id": row["id"], "messages": prompt, "chosen": chosen, "rejected": rejected}
    return {**record, "error": row["error"], "videos": row["videos"], "images": row["images"]}


def _write_swift(rows: list[dict[str, Any]], out_dir: Path, name: str, pairs: bool) -> Path:
    """``<name>.jsonl`` of ``{"messages", "videos", "images"}``; with ``pairs``, the messages end with the
    chosen reaction and ``rejected_response`` holds the rejected one."""
    path = out_dir / f"{name}.jsonl"
    used = _used_media(rows)
    write_jsonl_atomic(path, (_swift_record(row, used, pairs) for row in rows))
    return path


def _swift_record(row: dict[str, Any], used: list[str], pairs: bool) -> dict[str, Any]:
    rejected = {"rejected_response": row["rejected"]} if pairs else {}
    return {"id": row["id"], "messages": row["messages"], **rejected, **{kind: row[kind] for kind in used}}


def _how_to_train(fmt: str, out_dir: Path, name: str, path: Path, pairs: bool, family: str) -> str:
    """The settings README.md gives for training on the export (the template where one was checked)."""
    template = TOOL_TEMPLATES[fmt].get(family)
    if fmt == "llamafactory":
        stage = "stage: dpo" if pairs else "mask_history: true  # loss on the last turn only"
        lines = [f"dataset_dir: {out_dir.resolve()}  # this folder: its path now, if it has moved"]
        lines += [f"dataset: {name}", *([f"template: {template}"] if template else []), stage]
        return "\n".join(lines)
    flag = f" --template {template}" if template else ""
    if pairs:
        return f"swift rlhf --rlhf_type dpo --dataset {path.resolve()}{flag}"
    return f"--dataset {path.resolve()}{flag} --loss_scale last_round  # loss on the last turn only"


def template_note(fmt: str, family: str) -> str:
    """The README sentence on the tool's chat template for ``family`` (:data:`TOOL_TEMPLATES`)."""
    template = TOOL_TEMPLATES[fmt].get(family)
    if template is None:
        return (
            f"No template of this tool was checked against the {family} prompt: use the one for the "
            "checkpoint's own chat format and compare a row it renders with ours."
        )
    note = f"Template `{template}`: it renders the {family} prompt this export was written for as ours."
    return " ".join([note, *([_TOOL_CAVEATS[fmt, family]] if (fmt, family) in _TOOL_CAVEATS else [])])


def _write_info(
    out_dir: Path, cfg: ExportBuild, name: str, result: ExportResult, rows: list[dict[str, Any]], pairs: bool
) -> None:
    fmt = str(cfg.format)
    info = {
        "format": fmt,
        "name": name,
        "kind": "preference" if pairs else "samples",
        "file": str(result.path),
        "rows": result.rows,
        "videos": sum(len(r["videos"]) for r in rows),
        "images": sum(len(r["images"]) for r in rows),
        "clips_written": result.clips,
        "skipped": [{"id": i, "reason": r} for i, r in result.skipped],
    }
    write_json_atomic(out_dir / EXPORT_INFO_FILE, info, indent=2)
    title, unit = (f"{fmt}, preference pairs", "pairs") if pairs else (fmt, "conversations")
    readme = (
        f"# {name} ({title})\n\n{result.rows} {unit}, {info['videos']} videos, {info['images']} images; "
        f"{len(result.skipped)} left out (see {EXPORT_INFO_FILE}).\n\n"
        "Video spans that are not a whole file are trimmed clips under clips/ (at least 2 frames each).\n"
        f"{_PATHS[fmt]}\n\n"
        f"```\n{_how_to_train(fmt, out_dir, name, result.path, pairs, str(cfg.family))}\n```\n\n"
        f"{template_note(fmt, str(cfg.family))}\n\n"
        f"{media_settings(fmt, cfg.media, cfg.clip_fps)}\n"
    )
    write_text_atomic(out_dir / "README.md", readme)


_PATHS = {
    "llamafactory": "Clip paths are relative to this folder (LLaMA-Factory resolves them against "
    "dataset_dir), so the folder can be moved: then set dataset_dir to its new path. Whole-file media keep "
    "their absolute paths.",
    # ms-swift joins ROOT_IMAGE_DIR before a path, and joining before an absolute path leaves it as it is:
    # after a move the clips are not found and, unless --strict, training swaps those rows for others.
    "swift": "Media paths are absolute (ms-swift resolves a relative path against the working directory), "
    "so after moving this folder export it again; ROOT_IMAGE_DIR does not help, as ms-swift prefixes it "
    "to relative paths only.",
}


def media_settings(fmt: str, media: MediaSpec, clip_fps: float | None) -> str:
    """The README section giving the tool's media settings closest to our ``media`` (the frames our own
    training takes per span), and what they cannot reproduce."""
    pixels = (media.min_pixels, media.max_pixels, media.image_min_pixels, media.image_max_pixels)
    frames = media.num_frames or media.max_frames
    fps = clip_fps or 2.0
    if fmt == "llamafactory":
        settings = (
            f"video_min_pixels: {pixels[0]}\nvideo_max_pixels: {pixels[1]}\nimage_min_pixels: {pixels[2]}\n"
            f"image_max_pixels: {pixels[3]}\nvideo_fps: {fps:g}\nvideo_maxlen: {frames}"
        )
    else:
        settings = (
            f"VIDEO_MIN_PIXELS={pixels[0]} VIDEO_MAX_PIXELS={pixels[1]} MIN_PIXELS={pixels[2]} "
            f"MAX_PIXELS={pixels[3]} FPS={fps:g} FPS_MAX_FRAMES={frames} FPS_MIN_FRAMES={media.min_frames}"
        )
    return (
        "## Media settings\n\n"
        f"The tool's defaults sample other frames than our training does. Closest to our media spec "
        f"({frames} frames per span, {pixels[0]}-{pixels[1]} px per frame, prompt images "
        f"{pixels[2]}-{pixels[3]} px):\n\n```\n{settings}\n```\n\n"
        "Not reproduced: the tools sample each clip at one frame rate, capped at the frame count, so a "
        "short span gets fewer frames than our fixed count; and an interruption span, which our sampler "
        "takes at the question span's frame rate (follow-on sampling), gets the tool's own rate."
    )


def saved_dataset(path: str | Path):
    """The HF dataset saved at ``path`` (``datasets.save_to_disk``).

    Raises:
        DataError: there is none.
    """
    import datasets  # imported here: heavy

    try:
        return datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as err:
        raise DataError(str(path), f"not a saved HF dataset: {err}") from None


def read_rows(cfg: ExportBuild):
    """The HF dataset ``cfg.dataset`` names: Sample rows a builder saved (``<out>/hf``), or preference pairs.

    Raises:
        DataError: it is not such a dataset.
    """
    import datasets  # imported here: heavy

    rows = saved_dataset(cfg.dataset)
    if not isinstance(rows, datasets.Dataset) or "messages" not in rows.column_names:
        raise DataError(str(cfg.dataset), "expected a dataset of Sample rows (with a 'messages' column)")
    return rows


def is_pairs(rows) -> bool:
    """Whether saved rows are preference pairs (``data_builders.preferences``), not plain samples."""
    return "rejected" in rows.column_names


def export_dataset(cfg: ExportBuild) -> ExportResult:
    """:func:`export_samples` for ``cfg.dataset``, an HF dataset of samples saved by a builder (``<out>/hf``).

    Raises:
        ConfigError: an unknown format.
        DataError: ``cfg.dataset`` is not such a dataset (preference pairs go through
            ``data_builders.preferences.export_pair_dataset``), or none of its samples could be exported.
    """
    rows = read_rows(cfg)
    if is_pairs(rows):  # exported as samples, the rejected reactions would be dropped without a word
        raise DataError(
            str(cfg.dataset), "preference pairs: export them with builder=export (export_pair_dataset)"
        )
    return export_samples((Sample.from_row(row) for row in rows), cfg)
