"""Text models behind one small interface: an OpenAI-compatible endpoint and a local Hugging Face model.

Shared by the QC blind filter (:mod:`data_builders.qc`) and question generation
(:mod:`data_builders.questions`). The endpoint client uses the standard library only; the local model
imports torch and transformers on first use.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol

from data_builders.errors import SettingError

_MAX_BACKOFF_S = 60.0
_ERROR_SNIPPET = 300  # characters of an error body kept in a message


class TextModelError(SettingError):
    """The text model could not answer (endpoint down, bad reply, missing model).

    A :class:`SettingError` so the command line reports it in one line: the fix is in the QC settings.
    """


class TextModel(Protocol):
    """A text-only model: the reply to one prompt. ``seed`` varies sampled rounds reproducibly."""

    identity: str

    def answer(self, prompt: str, *, seed: int) -> str: ...


class EndpointTextModel:
    """An OpenAI-compatible ``/chat/completions`` endpoint (vLLM, SGLang, hosted APIs), standard library only.

    Timeouts, connection errors and HTTP 429/5xx are retried ``max_retries`` times with backoff
    ``backoff_s * 2**k`` (at most 60 s); other HTTP errors fail at once. The builders' QC and question
    generation and the evaluation's LLM judge all use this one client.

    Args:
        base_url: e.g. ``http://localhost:8000/v1``.
        model: the served model name.
        api_key_env: environment variable with the key; unset or empty: no Authorization header.
        temperature, max_tokens, timeout_s, max_retries, backoff_s: request settings.
        sleep: the sleep function (tests replace it).
        setting: the config key of ``base_url``, named when it is malformed.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 16,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        setting: str = "qc.base_url",
    ):
        if not base_url.startswith(("http://", "https://")):
            raise SettingError(f"{setting} must start with http:// or https://, got {base_url!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key_env = model, api_key_env
        self.temperature, self.max_tokens = temperature, max_tokens
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max(0, max_retries), backoff_s
        self._sleep = sleep
        self.identity = f"endpoint:{model}|temperature={temperature}"
        self.n_requests = 0  # HTTP requests sent, retries included

    def answer(self, prompt: str, *, seed: int | None) -> str:
        return self.chat([{"role": "user", "content": prompt}], seed=seed)

    def chat(self, messages: list[dict[str, Any]], *, seed: int | None) -> str:
        """The reply to a list of chat messages (content may hold ``image_url`` parts).

        Raises:
            TextModelError: every try failed, or a non-retryable HTTP error or reply.
        """
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if seed is not None:  # not every server takes one
            body["seed"] = seed
        data, last = json.dumps(body).encode(), ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._sleep(min(_MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1)))
            try:
                return self._post(data)
            except _Retry as err:
                last = str(err)
        raise TextModelError(f"{self.url}: {self.max_retries + 1} tries failed; last: {last}")

    def _post(self, data: bytes) -> str:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        self.n_requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:  # before URLError, of which it is a subclass
            message = f"HTTP {err.code}: {_error_body(err, key)}"
            if err.code == 429 or err.code >= 500:
                raise _Retry(message) from err
            raise TextModelError(f"{self.url}: {message}") from err
        except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as err:
            raise _Retry(f"{type(err).__name__}: {err}") from err
        try:
            content = json.loads(raw)["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as err:
            # A body of the wrong shape means a wrong endpoint or server, which a retry will not fix.
            snippet = raw[:_ERROR_SNIPPET].decode(errors="replace")
            raise TextModelError(f"{self.url}: unexpected response body: {snippet!r}") from err
        return content if isinstance(content, str) else ""


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

    Loaded on first use. With ``temperature`` 0 decoding is greedy; otherwise it samples, seeded by
    the round, so a rerun gives the same answers.
    """

    def __init__(
        self, path: str, *, temperature: float = 0.0, max_new_tokens: int = 16, device: str | None = None
    ):
        self.path, self.temperature, self.max_new_tokens, self.device = (
            path,
            temperature,
            max_new_tokens,
            device,
        )
        self.identity = f"local:{path}|temperature={temperature}"
        self._model = self._tokenizer = None

    def _load(self) -> None:
        import torch
        import transformers as tf

        try:
            self._tokenizer = tf.AutoTokenizer.from_pretrained(self.path)
        except (OSError, ValueError) as err:
            raise TextModelError(f"cannot load a tokenizer from {self.path}: {err}") from err
        try:
            model = tf.AutoModelForCausalLM.from_pretrained(self.path)
        except ValueError:  # a VLM config (Qwen2.5-VL ...) has no causal-LM mapping: use it text-only
            model = tf.AutoModelForImageTextToText.from_pretrained(self.path)
        except OSError as err:
            raise TextModelError(f"cannot load a model from {self.path}: {err}") from err
        self.device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._model = model.to(self.device).eval()

    def answer(self, prompt: str, *, seed: int) -> str:
        import torch

        if self._model is None:
            self._load()
        tok = self._tokenizer
        if getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        else:
            text = prompt + "\n"
        inputs = tok(text, return_tensors="pt", add_special_tokens=False).to(self.device)
        sample = self.temperature > 0
        if sample:
            torch.manual_seed(seed)
        kwargs = {"do_sample": sample, "max_new_tokens": self.max_new_tokens}
        if sample:
            kwargs["temperature"] = self.temperature
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        with torch.no_grad():
            out = self._model.generate(**inputs, pad_token_id=pad, **kwargs)
        return tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
