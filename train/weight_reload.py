"""Hand a running vLLM server new weights without restarting it (``stage.grpo.weight_sync=reload``).

vLLM's RL endpoints, served when it runs with ``VLLM_SERVER_DEV_MODE=1`` (as a launched server is): the
engine is paused (requests in flight finish, new ones wait), its workers re-read every weight from the
directory named (``reload_weights``; the vision tower's included, the encoder caches emptied), its prefix
cache is emptied (else a prompt's keys and values computed by the old weights are reused: measured, not
assumed), and it resumes. Only weights are re-read: the architecture, tokenizer and generation defaults stay
those the server started with, and the name requests give the model stays the one it started under.

What it costs against a restart: ``bench/bench_served_rollouts.py --reload`` (docs/results, 2026-12-03).
The directory must be readable by the server: the same machine, or a file system both see.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from models.server_process import ServerError

DEV_MODE = {"VLLM_SERVER_DEV_MODE": "1"}  # the environment vLLM needs to serve the endpoints below


def reload_weights(base_url: str, weights: Path, timeout_s: float) -> None:
    """Make the vLLM server at ``base_url`` (its ``/v1`` URL) serve the weights in ``weights``.

    Raises:
        ServerError: an endpoint refused or failed, naming it and what the server said. A failed reload
            leaves the server paused: its weights may be half replaced, and resumed it would answer with
            them (or die on the next request, as vLLM does after a reload that found no files).
    """
    root = base_url.rstrip("/").removesuffix("/v1")
    _post(root, "/pause?mode=wait", None, timeout_s)
    target = {"method": "reload_weights", "kwargs": {"weights_path": str(Path(weights).resolve())}}
    _post(root, "/collective_rpc", target, timeout_s)
    if _post(root, "/reset_prefix_cache", None, timeout_s).get("success") is False:
        raise ServerError(f"{root}/reset_prefix_cache: the server kept its prefix cache after the reload")
    _post(root, "/resume", None, timeout_s)


def _post(root: str, path: str, body: dict | None, timeout_s: float) -> dict:
    data = json.dumps(body).encode() if body is not None else b""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(root + path, data=data, headers=headers, method="POST")
    try:  # reached as the chat requests to the same server are (core.text_models)
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            payload = response.read()
    except urllib.error.HTTPError as err:  # before URLError, of which it is a subclass
        hint = " (is it vLLM, started with VLLM_SERVER_DEV_MODE=1?)" if err.code == 404 else ""
        said = err.read().decode(errors="replace")[:2000]
        raise ServerError(f"{root}{path} answered {err.code}{hint}: {said}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
        raise ServerError(f"{root}{path}: no answer ({err})") from None
    return json.loads(payload) if payload.strip() else {}
