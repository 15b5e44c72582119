"""A model server started for a block and stopped after it (a served evaluation's ``eval.server.command``,
GRPO's rollout server ``stage.grpo.server.command``) on a free port.

The command is a template (``{model}``: the weights directory, ``{port}``), run in its own process group so
that stopping it stops whatever it spawned (vLLM's engine processes). Its output goes to a log file, which
a failed start quotes. The server is ready when ``GET /health`` answers 200 (vLLM, SGLang and
``transformers serve`` all have it). On Linux the server is also sent SIGTERM if its launcher dies
without stopping it (a training killed outright).
"""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.errors import UserError

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
_LOG_TAIL = 2000  # characters of the server's log quoted when it fails to start
_STOP_GRACE_S = 15.0


class ServerError(UserError, RuntimeError):
    """The server did not start, or died: the message quotes its log."""


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def launched_server(
    command: str, model: str | Path, log: Path, startup_timeout_s: float, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Run ``command`` for ``model`` until the block ends (``env``: variables it needs beyond this
    process's); yields the server's ``/v1`` base URL.

    Raises:
        ServerError: the process exited, or /health did not answer within ``startup_timeout_s``.
    """
    port = free_port()
    # Plain replacement, not str.format: a command may hold JSON braces (vLLM's --media-io-kwargs).
    argv = shlex.split(command.replace("{model}", shlex.quote(str(model))).replace("{port}", str(port)))
    log.parent.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), **(env or {})}
    with open(log, "ab") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
            preexec_fn=_die_with_launcher,
        )
    try:
        _wait_healthy(process, f"http://127.0.0.1:{port}", log, startup_timeout_s)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop(process)


def _die_with_launcher() -> None:
    """In the server's process, before it starts: on Linux, be sent SIGTERM when the launcher dies. Its own
    session spares it the launcher's signals, so a training killed with SIGKILL (an out-of-memory kill, a
    preempted job) would otherwise leave the server and its accelerator memory behind. Nothing is imported
    here (the child of a threaded parent must not take locks): ``_PRCTL`` is resolved at import."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _wait_healthy(process: subprocess.Popen, root: str, log: Path, timeout_s: float) -> None:
    local = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: never via a proxy
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerError(f"the model server exited with code {process.returncode}:\n{_tail(log)}")
        try:
            with local.open(f"{root}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise ServerError(f"the model server gave no /health within {timeout_s:.0f} s:\n{_tail(log)}")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM the server's process group; SIGKILL it if it has not exited after a grace period."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:  # it exited between the poll and the signal
        pass


def _tail(log: Path) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return text[-_LOG_TAIL:]
