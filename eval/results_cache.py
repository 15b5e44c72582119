"""Per-item evaluation results shared across runs, keyed by what the model *is*, not where it lies.

A result is reused when the same weights answer the same item under the same settings, whatever the
checkpoint's path or name: the watcher re-evaluating a checkpoint already evaluated inline, a run
directory moved, ``python -m eval`` on the same adapter twice, the same untuned baseline in two runs.

- Weights: a base checkpoint is identified by the hashes of its files (weights, config, tokenizer, chat
  template); a LoRA checkpoint by the base plus its adapter files; a full fine-tuning checkpoint by the
  base plus its weights and configs. File hashes are kept in a sidecar keyed by path, size and mtime, so a
  15 GB model is read once.
- Settings: everything else that changes a prediction: the record's ``setting`` digest (the benchmark and
  its version, its generation settings, the media spec, the family's chat format, the dtype; see
  ``eval.generation``) and the model's quantization.
- Items: each record carries a hash of its item (conversation, meta, and the identity of every media
  file), so a changed benchmark item is evaluated again.

Layout: ``<root>/<key>/<benchmark>.jsonl``, one result record per line, appended under a file lock
(several processes may evaluate at once); ``<root>/file_hashes.json`` is the sidecar.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from core.files import JsonlStore, write_json_atomic
from core.sample import Sample

_CHUNK = 1 << 24  # 16 MiB per read while hashing
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
# Keys of adapter_config.json that name where the base lay, not what the adapter computes.
_ADAPTER_PATH_KEYS = ("base_model_name_or_path", "revision")
# What of a full fine-tuning checkpoint changes predictions (its optimizer and trainer state do not).
_FULL_CONFIG_FILES = ("config.json", "generation_config.json")


@dataclass(frozen=True)
class Weights:
    """Which weights a model holds: a base checkpoint, and a saved training checkpoint applied on it.

    Attributes:
        base: the base checkpoint, a local directory or a name in the local hub cache.
        checkpoint: a training checkpoint directory (a LoRA adapter, or full weights); None: the base.
    """

    base: str
    checkpoint: Path | None = None


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


class FileHashes:
    """SHA-256 of files, remembered in a JSON sidecar by (real path, size, mtime)."""

    def __init__(self, sidecar: str | Path):
        self.sidecar = Path(sidecar)
        self.sidecar.parent.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(f"{self.sidecar}.lock")

    def sha256(self, file: str | Path) -> str:
        path = os.path.realpath(file)
        stat = os.stat(path)
        stamp = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        with self._lock:
            known = self._read().get(path)
        if known and {k: known[k] for k in stamp} == stamp:
            return known["sha256"]
        digest = _hash_file(path)  # outside the lock: another process may hash another file meanwhile
        with self._lock:
            table = self._read()
            table[path] = {**stamp, "sha256": digest}
            write_json_atomic(self.sidecar, table, indent=1, sort_keys=True)
        return digest

    def _read(self) -> dict[str, dict]:
        try:
            return json.loads(self.sidecar.read_text())
        except (OSError, ValueError):
            return {}


def _hash_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def base_fingerprint(name_or_path: str, hashes: FileHashes) -> str | None:
    """The hash of every file of a base checkpoint directory (or of its snapshot in the local hub cache);
    None when it cannot be found."""
    directory = Path(name_or_path)
    if not directory.is_dir():
        from huggingface_hub import snapshot_download

        try:
            directory = Path(snapshot_download(name_or_path, local_files_only=True))
        except Exception:  # not in the cache, or not a repo name: nothing to key results by
            return None
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.endswith(".lock"))
    return _digest({p.name: hashes.sha256(p) for p in files})


def checkpoint_fingerprint(base: str, checkpoint: Path, hashes: FileHashes) -> str:
    """The hash of a training checkpoint on its base: the adapter files of a LoRA checkpoint (the base's
    location left out of its config), or the weights and configs of a full one."""
    if (checkpoint / "adapter_config.json").exists():
        config = json.loads((checkpoint / "adapter_config.json").read_text())
        files = [checkpoint / name for name in ADAPTER_WEIGHTS if (checkpoint / name).exists()]
        parts = {"adapter_config": {k: v for k, v in config.items() if k not in _ADAPTER_PATH_KEYS}}
    else:
        files = sorted(p for p in checkpoint.iterdir() if _is_full_weights_file(p))
        parts = {}
    return _digest({"base": base, **parts, "files": {p.name: hashes.sha256(p) for p in files}})


def _is_full_weights_file(path: Path) -> bool:
    """Weights (``*.safetensors`` and their shard index) and the model's configs."""
    weights = path.suffix == ".safetensors" or path.name.endswith(".safetensors.index.json")
    return weights or path.name in _FULL_CONFIG_FILES


def item_fingerprint(sample: Sample) -> str:
    """The hash of an item as the model sees it: its conversation and meta, and each media file's path,
    size and mtime (a replaced video is a new item)."""
    media = {}
    for turn in sample.turns:
        for part in turn.parts:
            if part.path:
                stat = os.stat(part.path) if os.path.exists(part.path) else None
                media[part.path] = [stat.st_size, stat.st_mtime_ns] if stat else None
    return _digest({"row": sample.to_row(), "media": media})


class ResultsCache:
    """Scored per-item records by (weights, settings) key, shared by every run that points here."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.hashes = FileHashes(self.root / "file_hashes.json")

    def key(self, weights: Weights, settings: dict) -> str | None:
        """The key of results of ``weights`` under ``settings``; None when the weights cannot be
        identified (then nothing is reused or stored)."""
        base = base_fingerprint(weights.base, self.hashes)
        if base is None:
            return None
        model = checkpoint_fingerprint(base, weights.checkpoint, self.hashes) if weights.checkpoint else base
        return _digest({"weights": model, "settings": settings})

    def lookup(self, key: str, benchmark: str, items: dict[str, str]) -> dict[str, dict]:
        """Stored records of these items by id (``items``: id -> the item's fingerprint; only records of
        unchanged items count)."""
        found = {}
        for record in self._store(key, benchmark).lines():
            if items.get(record.get("id")) == record.get("item"):
                found[record["id"]] = record
        return found

    def store(self, key: str, benchmark: str, records: list[dict]) -> None:
        """Append records (each stamped with its item's fingerprint)."""
        self._store(key, benchmark).append(records)

    def _store(self, key: str, benchmark: str) -> JsonlStore:
        return JsonlStore(self.root / key / f"{benchmark}.jsonl", shared=True)
