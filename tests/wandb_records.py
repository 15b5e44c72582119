"""Read the history of an offline W&B run file (``run-*.wandb``) so tests check what W&B received.

The file is a 7-byte W&B header followed by LevelDB-style log records (32 KiB blocks; each chunk has a
4-byte checksum, 2-byte length and 1-byte type: 1 full, 2 first, 3 middle, 4 last) holding protobuf
``Record`` messages.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

_BLOCK, _HEADER = 32768, 7


def _payloads(data: bytes):
    pos, pending = _HEADER, b""
    while pos + _HEADER <= len(data):
        room = _BLOCK - pos % _BLOCK
        if room < _HEADER:  # block trailer too small for a chunk header: skip to the next block
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            yield pending


def history(run_file: str | Path) -> list[dict]:
    """Every ``log`` call of the run as a dict of key → value, with ``_step``."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows = []
    for payload in _payloads(Path(run_file).read_bytes()):
        record = pb.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            )
    return rows
