"""Text models behind one protocol: an OpenAI-compatible endpoint, or a local Hugging Face model.

The LLM judge of OVIBench, the QC blind filter and question generation all ask a text model; each holds a
:class:`TextModelConfig` (``judge``, ``builder.qc.blind``, ``builder.questions``) with the same keys, and
:func:`make_text_model` builds the model it names. The endpoint client uses the standard library only; the
local model imports torch and transformers on first use.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.choice import Choice
from core.errors import ConfigError, UserError

_MAX_BACKOFF_S = 60.0
_ERROR_SNIPPET = 300  # characters of an error body kept in a message


class TextBackend(Choice):
    """Where a text model runs."""

    none = "none"  # no model (the judge leaves open items unscored; questions come from templates)
    endpoint = "endpoint"  # an OpenAI-compatible /chat/completions server (vLLM, SGLang, a hosted API)
    local = "local"  # a Hugging Face model in this process (a causal LM, or a VLM given text only)


@dataclass
class EndpointConfig:
    """An OpenAI-compatible ``/chat/completions`` server. The API key is read at request time from the
    environment variable ``api_key_env`` names: it is never part of a config, a log or W&B."""

    base_url: str | None = None  # e.g. http://localhost:8000/v1
    api_key_env: str = "OPENAI_API_KEY"  # unset or empty in the environment: no Authorization header
    timeout_s: float = 60.0  # per request
    max_retries: int = 3  # after the first try; timeouts, connection errors, HTTP 429 and 5xx only
    backoff_s: float = 1.0  # the first retry waits this long, doubling after (at most 60 s)
    workers: int = 1  # requests in flight at once


@dataclass
class TextModelConfig:
    """Which text model answers, and how it decodes."""

    backend: TextBackend = TextBackend.none
    model: str | None = (
        None  # endpoint: the served model name (pin a version); local: a directory or hub name
    )
    temperature: float = 0.0  # 0: greedy
    max_tokens: int = 256  # reply length limit
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)


@dataclass
class Reply:
    """A server's reply: its text, and why it ended (``stop``: the model ended its turn; ``length``: the
    token limit); the sampled tokens' ids and log-probabilities where the server returned them as ids
    (vLLM's ``logprobs`` with ``return_tokens_as_token_ids``), else None."""

    content: str
    finish_reason: str | None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


class TextModelError(UserError, RuntimeError):
    """The text model could not answer: endpoint down or wrong, a reply of the wrong shape, a model that
    does not load or runs out of memory."""


class TextModel(Protocol):
    """A text-only model: the reply to one prompt. ``seed`` varies sampled rounds reproducibly."""

    identity: str  # the model and its decoding settings: recorded with every answer, part of cache keys

    def answer(self, prompt: str, *, seed: int | None) -> str: ...


def make_text_model(
    cfg: TextModelConfig, key: str, *, sleep: Callable[[float], None] = time.sleep
) -> EndpointTextModel | LocalTextModel | None:
    """The model ``cfg`` names, or None for ``backend: none``.

    Args:
        cfg: the settings.
        key: where ``cfg`` sits in the config (``judge``, ``builder.qc.blind`` …), named in errors.
        sleep: the retry backoff's sleep (tests replace it).

    Raises:
        ConfigError: a setting the backend needs is missing or malformed.
    """
    try:
        backend = TextBackend(cfg.backend)  # a config built in code may name it as a string
    except ValueError:
        known = ", ".join(TextBackend)
        raise ConfigError(f"{key}.backend must be one of {known}, got {cfg.backend!r}") from None
    if backend is TextBackend.none:
        return None
    if not cfg.model:
        raise ConfigError(f"{key}.backend={backend} needs {key}.model (a served name or a model directory)")
    if backend is TextBackend.local:
        return LocalTextModel(cfg.model, temperature=cfg.temperature, max_tokens=cfg.max_tokens)
    if not cfg.endpoint.base_url:
        raise ConfigError(
            f"{key}.backend=endpoint needs {key}.endpoint.base_url, e.g. http://localhost:8000/v1"
        )
    return EndpointTextModel(cfg, sleep=sleep, setting=f"{key}.endpoint.base_url")


class EndpointTextModel:
    """An OpenAI-compatible ``/chat/completions`` endpoint, standard library only.

    Timeouts, connection errors and HTTP 429/5xx are retried ``max_retries`` times with backoff
    ``backoff_s * 2**k`` (at most 60 s); other HTTP errors fail at once.

    Args:
        cfg: the model's settings (``cfg.endpoint`` the server's).
        sleep: the sleep function (tests replace it).
        setting: the config key of ``base_url``, named when it is malformed.
    """

    def __init__(
        self,
        cfg: TextModelConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        setting: str = "endpoint.base_url",
    ):
        server = cfg.endpoint
        if not server.base_url or not server.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"{setting} must start with http:// or https://, got {server.base_url!r}")
        if server.max_retries < 0:
            raise ConfigError(f"{setting}: max_retries must be >= 0, got {server.max_retries}")
        self.url = server.base_url.rstrip("/") + "/chat/completions"
        self.model, self.server = cfg.model, server
        self.temperature, self.max_tokens = cfg.temperature, cfg.max_tokens
        self._sleep = sleep
        self.identity = f"endpoint:{cfg.model}|temperature={cfg.temperature}|max_tokens={cfg.max_tokens}"
        self.n_requests = 0  # HTTP requests sent, retries included

    def answer(self, prompt: str, *, seed: int | None) -> str:
        return self.chat([{"role": "user", "content": prompt}], seed=seed)

    def chat(self, messages: list[dict[str, Any]], *, seed: int | None) -> str:
        """The reply to a list of chat messages (content may hold ``image_url`` parts).

        Raises:
            TextModelError: every try failed, or a non-retryable HTTP error or reply.
        """
        return self.reply(messages, seed=seed).content

    def reply(
        self,
        messages: list[dict[str, Any]],
        *,
        seed: int | None,
        max_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Reply:
        """The reply to chat messages, with why it ended; ``max_tokens`` overrides the model's limit for this
        request and ``extra`` adds fields to the request body (a server's own extensions).

        Raises:
            TextModelError: every try failed, or a non-retryable HTTP error or reply.
        """
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens if max_tokens is None else max_tokens,
            **(extra or {}),
        }
        if seed is not None:  # not every server takes one
            body["seed"] = seed
        data, last = json.dumps(body).encode(), ""
        for attempt in range(self.server.max_retries + 1):
            if attempt:
                self._sleep(min(_MAX_BACKOFF_S, self.server.backoff_s * 2 ** (attempt - 1)))
            try:
                return self._post(data)
            except _Retry as err:
                last = str(err)
        raise TextModelError(f"{self.url}: {self.server.max_retries + 1} tries failed; last: {last}")

    def _post(self, data: bytes) -> Reply:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.server.api_key_env, "") if self.server.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        self.n_requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.server.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:  # before URLError, of which it is a subclass
            message = f"HTTP {err.code}: {_error_body(err, key)}"
            if err.code == 429 or err.code >= 500:
                raise _Retry(message) from err
            raise TextModelError(f"{self.url}: {message}") from err
        except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as err:
            raise _Retry(f"{type(err).__name__}: {err}") from err
        try:
            choice = json.loads(raw)["choices"][0]
            content = choice["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as err:
            # A body of the wrong shape means a wrong endpoint or server, which a retry will not fix.
            snippet = raw[:_ERROR_SNIPPET].decode(errors="replace")
            raise TextModelError(f"{self.url}: unexpected response body: {snippet!r}") from err
        content = content if isinstance(content, str) else ""
        return Reply(content, choice.get("finish_reason"), *_sampled_tokens(choice))


def _sampled_tokens(choice: dict) -> tuple[list[int] | None, list[float] | None]:
    """The ids and log-probabilities of a reply's tokens, when the server gave each token as
    ``token_id:<id>`` (anything else: None, None)."""
    entries = (choice.get("logprobs") or {}).get("content")
    if not isinstance(entries, list):
        return None, None
    tokens = [str(e.get("token", "")) if isinstance(e, dict) else "" for e in entries]
    if not all(t.startswith("token_id:") and t[9:].isdigit() for t in tokens):
        return None, None
    return [int(t[9:]) for t in tokens], [float(e["logprob"]) for e in entries]


def _error_body(err: urllib.error.HTTPError, key: str) -> str:
    """The start of an error response's body, with the API key blanked out if a server echoes it."""
    try:
        text = err.read().decode(errors="replace")[:_ERROR_SNIPPET]
    except Exception:  # the body of an error response is a courtesy; never let it mask the error
        return ""
    return text.replace(key, "***") if key else text


class _Retry(Exception):
    """A failure worth another try."""


class LocalTextModel:
    """A local Hugging Face model answering from text only: a causal LM, or a VLM given no images.

    Loaded on first use (weights in their saved dtype). With ``temperature`` 0 decoding is greedy;
    otherwise it samples, seeded by ``seed``, so a rerun gives the same answers.
    """

    def __init__(
        self, path: str, *, temperature: float = 0.0, max_tokens: int = 256, device: str | None = None
    ):
        self.path, self.temperature, self.max_tokens, self.device = path, temperature, max_tokens, device
        self.identity = f"local:{path}|temperature={temperature}|max_tokens={max_tokens}"
        self._model = self._tokenizer = None

    def _load(self) -> None:
        import torch
        import transformers as tf

        try:
            self._tokenizer = tf.AutoTokenizer.from_pretrained(self.path)
        except (OSError, ValueError) as err:
            raise TextModelError(f"cannot load a tokenizer from {self.path}: {err}") from err
        try:
            model = tf.AutoModelForCausalLM.from_pretrained(self.path, dtype="auto")
        except ValueError:  # a VLM config (Qwen2.5-VL ...) has no causal-LM mapping: use it text-only
            model = tf.AutoModelForImageTextToText.from_pretrained(self.path, dtype="auto")
        except OSError as err:
            raise TextModelError(f"cannot load a model from {self.path}: {err}") from err
        self.device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._model = model.to(self.device).eval()

    def answer(self, prompt: str, *, seed: int | None) -> str:
        import torch

        if self._model is None:
            self._load()
        tok = self._tokenizer
        if getattr(tok, "chat_template", None):  # a base model without a template gets the bare prompt
            text = tok.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        else:
            text = prompt + "\n"
        inputs = tok(text, return_tensors="pt", add_special_tokens=False).to(self.device)
        kwargs: dict[str, Any] = {"do_sample": False, "max_new_tokens": self.max_tokens}
        if self.temperature > 0:
            torch.manual_seed(seed or 0)
            kwargs.update(do_sample=True, temperature=self.temperature)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        try:
            with torch.no_grad():
                out = self._model.generate(**inputs, pad_token_id=pad, **kwargs)
        except torch.cuda.OutOfMemoryError as err:
            raise TextModelError(f"local text model {self.path}: out of GPU memory") from err
        return tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
