"""Decoding in a child process, so that a decode that hangs can be killed.

A hung decode (a stalled network file system, a decoder stuck on a bad file) cannot be stopped in a
thread, and each hung thread keeps its memory and a core for the rest of the run. A process can be
killed. So every process that decodes (the trainer, the evaluator, each DataLoader worker) starts one
long-lived child on its first decode, hands it one span at a time over a socket, and waits for the frames
at most ``spec.timeout_s``. Past that it kills the child, the hung decode with it; the next decode starts
a new child. A child that crashes (a segfault in the codec) costs the one video, not the run.

The child is a fresh interpreter (``python -m core.decode_worker``), not a fork: the trainer and
its DataLoader workers run torch's thread pools, and a forked child inherits their locks in whatever
state other threads held them. (multiprocessing's "spawn" is safe too, but re-imports the parent's main
module, the Hydra entry point or a benchmark script, in the child.) The child dies with its parent: the
kernel kills it when the parent dies (PR_SET_PDEATHSIG, Linux), and an idle child also exits when its
socket to the parent closes.

Frames travel as raw bytes after a small pickled header and are read straight into the array the caller
gets: one copy through the kernel, well under a millisecond for an 8-frame 112x112 clip.

    python -m core.decode_worker FD PARENT_PID   # what the parent runs; not for people
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np

from core.decoding import MediaSpec, decode_clip
from core.errors import DecodeError

_LENGTH = struct.Struct("!Q")
STARTUP_TIMEOUT_S = 120.0  # a fresh interpreter importing numpy, PIL and decord on a busy machine
REAP_TIMEOUT_S = 5.0  # a process in uninterruptible I/O dies only once the I/O returns: don't wait on it


class Worker:
    """One decoding child process and this process's end of the socket to it."""

    def __init__(self) -> None:
        parent_end, child_end = socket.socketpair()
        fd = child_end.fileno()
        command = [sys.executable, "-m", "core.decode_worker", str(fd), str(os.getpid())]
        self.process = subprocess.Popen(command, pass_fds=[fd], stdin=subprocess.DEVNULL)
        child_end.close()
        self.socket = parent_end
        try:
            _receive(self.socket, time.monotonic() + STARTUP_TIMEOUT_S)  # "ready": its imports are done
        except (OSError, EOFError) as exc:
            self.kill()
            raise RuntimeError(
                f"the decode worker process did not start (exit code {self.process.returncode}): {exc!r}"
            ) from exc

    @property
    def pid(self) -> int:
        return self.process.pid

    def decode(self, path: str, start: float, end: float, spec: MediaSpec) -> tuple:
        """``(frames, fps, indices, span_frames)`` of the span, as ``core.decoding.decode_clip`` returns them.

        Raises:
            DecodeError: the decoder raised (its type and first line, as an in-process decode reports).
            TimeoutError: no answer within ``spec.timeout_s`` (the child is still busy: kill it).
            EOFError, OSError: the child died.
        """
        deadline = time.monotonic() + spec.timeout_s
        _send(self.socket, (path, start, end, spec))
        reply = _receive(self.socket, deadline)
        if reply[0] == "error":
            raise DecodeError(path, reply[1])
        _, shape, fps, indices, span_frames = reply
        frames = np.empty(shape, np.uint8)
        _receive_into(self.socket, memoryview(frames).cast("B"), deadline)
        return frames, fps, indices, span_frames

    def kill(self) -> None:
        """Kill the child and reap it (unless it cannot die yet: the subprocess module reaps it later)."""
        self.socket.close()
        self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=REAP_TIMEOUT_S)


_lock = threading.Lock()
_worker: Worker | None = None


def worker() -> Worker:
    """This process's decoding child, started (or restarted, after a kill or a crash) when needed."""
    global _worker
    if _worker is None or _worker.process.poll() is not None:
        if _worker is not None:
            _worker.kill()  # it died idle (for one, with the thread that started it): reap it
        _worker = Worker()
    return _worker


def decode(path: str, start: float, end: float, spec: MediaSpec) -> tuple:
    """Decode a span in this process's child: ``(frames, fps, indices, span_frames)``.

    Raises:
        DecodeError: the decoder failed, crashed, or took longer than ``spec.timeout_s`` (then the child
            is killed, and the next call starts a new one).
    """
    global _worker
    with _lock:  # one child per process serves one span at a time
        child = worker()
        try:
            return child.decode(path, start, end, spec)
        except TimeoutError:
            reason = f"decoding took longer than {spec.timeout_s} s"
        except (EOFError, OSError):
            with contextlib.suppress(subprocess.TimeoutExpired):  # its socket closes before it can be reaped
                child.process.wait(timeout=REAP_TIMEOUT_S)
            reason = f"the decoder process died ({_describe_exit(child.process.returncode)})"
        child.kill()
        _worker = None
        raise DecodeError(path, reason)


def _forget_the_parents_worker() -> None:
    """In a forked child (a DataLoader worker) the worker is the parent's: leave it be, start our own."""
    global _worker, _lock
    if _worker is not None:
        _worker.socket.close()  # this process's copy of the descriptor; the parent's stays open
    _worker, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_worker)


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


# ---------------------------------------------------------------------------------------------------
# Messages: an 8-byte length, then a pickle.


def _send(sock: socket.socket, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LENGTH.pack(len(data)))
    sock.sendall(data)


def _receive(sock: socket.socket, deadline: float | None):
    header = bytearray(_LENGTH.size)
    _receive_into(sock, memoryview(header), deadline)
    data = bytearray(_LENGTH.unpack(header)[0])
    _receive_into(sock, memoryview(data), deadline)
    return pickle.loads(data)


def _receive_into(sock: socket.socket, buffer: memoryview, deadline: float | None) -> None:
    """Fill ``buffer`` from the socket by ``deadline`` (time.monotonic; None: wait as long as it takes).

    Raises:
        TimeoutError: the deadline passed. EOFError: the other end closed the socket.
    """
    received = 0
    while received < len(buffer):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
        count = sock.recv_into(buffer[received:])
        if count == 0:
            raise EOFError("the other end closed the socket")
        received += count


# ---------------------------------------------------------------------------------------------------
# The child.


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(0)


def _serve(sock: socket.socket) -> None:
    """Decode spans until the parent closes the socket."""
    _send(sock, "ready")
    while True:
        try:
            path, start, end, spec = _receive(sock, deadline=None)
        except EOFError:
            return
        try:
            clip = decode_clip(path, start, end, spec)
        except Exception as exc:  # decoders raise library-specific types; the parent reports one
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            _send(sock, ("error", f"{type(exc).__name__}: {first_line}"))
            continue
        frames = np.ascontiguousarray(clip.frames, dtype=np.uint8)
        _send(sock, ("clip", frames.shape, clip.fps, clip.indices, clip.span_frames))
        sock.sendall(memoryview(frames).cast("B"))


def main(argv: list[str]) -> None:
    fd, parent_pid = int(argv[0]), int(argv[1])
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; we die with it
    with socket.socket(fileno=fd) as sock:
        _serve(sock)


if __name__ == "__main__":
    main(sys.argv[1:])
