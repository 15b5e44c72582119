"""A scripted OpenAI-compatible ``/chat/completions`` server for tests, on a free port of 127.0.0.1.

Each test decides the replies: ``ChatServer(respond)`` calls ``respond(handler, body)`` for every POST
(``handler`` has the request's ``path`` and ``headers``, ``body`` is the parsed JSON) and sends back the
``(status, payload bytes)`` it returns. It keeps ``record(handler, body)`` of every request in ``requests``
(by default its path, headers and body), and counts the requests answered at once (``most_in_flight``).
``endpoint_settings`` gives the text-model settings that point a client at a server.

It is for what a real server cannot be made to do on cue: 429/5xx sequences, timeouts, dropped connections,
malformed bodies, chosen replies, request contents and keys (redaction), exact request counts. Success
paths run against a real server: tests/real_server.py (``transformers serve``), tests/test_real_server.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from core.text_models import EndpointConfig

Respond = Callable[[BaseHTTPRequestHandler, dict], tuple[int, bytes]]
Record = Callable[[BaseHTTPRequestHandler, dict], object]


def completion(content: str) -> bytes:
    """A chat completion whose one choice says ``content``."""
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


def error_body(message: str) -> bytes:
    return json.dumps({"error": {"message": message}}).encode()


def request_record(handler: BaseHTTPRequestHandler, body: dict) -> dict:
    """What a server keeps of a request by default: its path, headers and body."""
    return {"path": handler.path, "headers": dict(handler.headers), "body": body}


def endpoint_settings(base_url: str | None, model: str | None = "m", **endpoint) -> dict:
    """Text-model settings (``TextModelConfig``, ``JudgeConfig``, ``QuestionConfig`` …) naming the endpoint
    at ``base_url`` (``endpoint``: more :class:`EndpointConfig` fields)."""
    return {"backend": "endpoint", "model": model, "endpoint": EndpointConfig(base_url=base_url, **endpoint)}


class ChatServer(ThreadingHTTPServer):
    """Serves in a daemon thread from construction until ``stop``; ``lock`` guards the test's own state.

    Attributes:
        requests: ``record(handler, body)`` of every request, in arrival order.
        delay_s: how long each reply waits before ``respond`` is asked for it.
        most_in_flight: the most requests answered at once so far (a test may reset it).
    """

    daemon_threads = True

    def __init__(self, respond: Respond, record: Record = request_record):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.respond, self.record = respond, record
        self.requests: list = []
        self.delay_s = 0.0
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        self.url = f"http://127.0.0.1:{self.server_port}/v1"
        poll = {"poll_interval": 0.05}
        self._thread = threading.Thread(target=self.serve_forever, kwargs=poll, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=2)

    def answer(self, handler: BaseHTTPRequestHandler, body: dict) -> tuple[int, bytes]:
        """Record the request, wait ``delay_s``, then reply what ``respond`` says, counting it in flight."""
        with self.lock:
            self.requests.append(self.record(handler, body))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay_s)
            return self.respond(handler, body)
        finally:
            with self.lock:
                self.in_flight -= 1


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.loads(raw) if raw else {}  # vLLM's control endpoints take none
        code, payload = self.server.answer(self, body)
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left

    def log_message(self, *args) -> None:
        pass
