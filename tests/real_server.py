"""A real OpenAI-compatible server for tests: ``transformers serve`` on a checkpoint directory, started and
stopped by the project's own launcher (``models.server_process``, which served evaluation uses too).

``with serve(checkpoint, name=...) as server:`` gives ``server.base_url`` (``http://127.0.0.1:<port>/v1``)
and ``server.model`` (the served name to put in requests). Needs the ``serving`` extra of transformers
(``pip install -e .[dev]``): :func:`missing_serving_modules` says what is absent.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from models.server_process import ServerError, launched_server

SERVING_MODULES = ("fastapi", "uvicorn", "openai")
__all__ = ["SERVING_MODULES", "Served", "ServerError", "missing_serving_modules", "serve"]


def missing_serving_modules() -> list[str]:
    """The modules ``transformers serve`` needs that are not installed."""
    return [name for name in SERVING_MODULES if importlib.util.find_spec(name) is None]


@dataclass(frozen=True)
class Served:
    """A running server: where to send requests and the model name they must carry."""

    base_url: str
    model: str


@contextmanager
def serve(
    checkpoint: str | Path,
    *,
    name: str = "model",
    device: str = "cpu",
    extra_args: Sequence[str] = (),
    ready_timeout_s: float = 120.0,
) -> Iterator[Served]:
    """Serve ``checkpoint`` until the block ends, under a path ending in ``name`` (the served name is the
    path as the server was given it).

    Raises:
        ServerError: the server exited, or was not healthy within ``ready_timeout_s``; with its log's end.
    """
    with tempfile.TemporaryDirectory(prefix="serve-") as workdir:
        model = Path(workdir) / name
        model.symlink_to(Path(checkpoint).resolve(), target_is_directory=True)
        command = f"{shlex.quote(sys.executable)} -m transformers.cli.transformers serve {{model}} "
        command += f"--device {device} --host 127.0.0.1 --port {{port}} {shlex.join(extra_args)}"
        log = Path(workdir) / "server.log"
        with launched_server(command, model, log, ready_timeout_s) as base_url:
            yield Served(base_url, str(model))
