"""A scripted OpenAI-compatible ``/chat/completions`` server for tests, on a free port of 127.0.0.1.

Each test decides the replies: ``ChatServer(respond)`` calls ``respond(handler, body)`` for every POST
(``handler`` has the request's ``path`` and ``headers``, ``body`` is the parsed JSON) and sends back the
``(status, payload bytes)`` it returns.

It is for what a real server cannot be made to do on cue: 429/5xx sequences, timeouts, dropped connections,
malformed bodies, chosen replies, request contents and keys (redaction), exact request counts. Success
paths run against a real server: tests/real_server.py (``transformers serve``), tests/test_real_server.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Respond = Callable[[BaseHTTPRequestHandler, dict], tuple[int, bytes]]


def completion(content: str) -> bytes:
    """A chat completion whose one choice says ``content``."""
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


def error_body(message: str) -> bytes:
    return json.dumps({"error": {"message": message}}).encode()


class ChatServer(ThreadingHTTPServer):
    """Serves in a daemon thread from construction until ``stop``; ``lock`` guards the test's own state."""

    daemon_threads = True

    def __init__(self, respond: Respond):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.respond = respond
        self.lock = threading.Lock()
        self.url = f"http://127.0.0.1:{self.server_port}/v1"
        poll = {"poll_interval": 0.05}
        self._thread = threading.Thread(target=self.serve_forever, kwargs=poll, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=2)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        code, payload = self.server.respond(self, body)
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
