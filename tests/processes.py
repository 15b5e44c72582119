"""Processes a test started, seen through Linux's /proc: whether one is gone, its tree, killing its groups,
holding one where it holds no file lock."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def _state(pid: int) -> str:
    """The process's state letter (R running, S sleeping, T stopped, Z zombie...); X once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "X"
    return stat.rsplit(")", 1)[1].split()[0]


def gone(pid: int) -> bool:
    """Whether a process has exited (a zombie left for an absent reaper has: it holds no memory or CPU)."""
    return _state(pid) in ("Z", "X")


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


def holds_file_lock(pid: int) -> bool:
    """Whether ``pid`` holds a flock or POSIX lock on any file (Linux's /proc/locks; its fifth field is the
    holder's pid; blocked waiters are listed after "->" and do not count)."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" not in fields and len(fields) > 4 and fields[4] == str(pid):
            return True
    return False


def stop_outside_locks(pid: int, timeout_s: float = 60.0) -> None:
    """SIGSTOP ``pid`` at a moment it holds no file lock. A process stopped inside one (the training's
    metrics file, for instance) would block every other process that takes it until it is continued."""
    deadline = time.monotonic() + timeout_s
    while True:
        os.kill(pid, signal.SIGSTOP)
        while (state := _state(pid)) != "T":  # the stop lands asynchronously; the locks are read once it has
            assert state not in ("Z", "X"), f"process {pid} ended before it could be held"
            time.sleep(0.005)
        if not holds_file_lock(pid):
            return
        os.kill(pid, signal.SIGCONT)
        assert time.monotonic() < deadline, f"process {pid} held a file lock for {timeout_s:g} s"
        time.sleep(0.01)
