"""Processes a test started, seen through Linux's /proc: whether one is gone, its tree, killing its groups."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def gone(pid: int) -> bool:
    """Whether a process has exited (a zombie left for an absent reaper has: it holds no memory or CPU)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_until_gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether the process exits within ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (Linux), parents first."""
    children = []
    with contextlib.suppress(FileNotFoundError):  # a process that just exited
        for task in Path(f"/proc/{pid}/task").iterdir():
            children += [int(c) for c in (task / "children").read_text().split()]
    return [pid, *(p for c in children for p in process_tree(c))]


def kill_process_groups(pids: list[int]) -> None:
    """SIGKILL the process group of each process. torchrun starts each rank in a session of its own, so
    killing the launcher's group alone would leave the ranks training on (as orphans)."""
    groups = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    assert os.getpgrp() not in groups
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
