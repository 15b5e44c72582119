"""The demo's HTTP server: the page, and a small JSON API over one video, one drawing, one live session.

Standard library only (``http.server``): the page is a canvas and a few buttons (``page.html``), the answer
streams as server-sent events. It serves one user at a time on the loopback address by default.

    GET  /                      the page
    GET  /api/state             the video loaded (its frames' times), the drawing
    POST /api/video?name=F      a video file's bytes: load it
    GET  /api/frame/N.jpg       frame N
    POST /api/draw              {"frame", "tool": box|arrow|circle|scribble, "box": [x0, y0, x1, y1],
                                 "colour"}
    POST /api/clear             remove the drawing
    POST /api/ask               {"question", "options": [...]}: the answer starts streaming
    GET  /api/events?since=K    the exchange's events from the K-th on (text/event-stream)
    POST /api/interrupt         {"kind": cancel|false_alarm|correction, "words"}
    POST /api/save              {"format": ovi|v2p, "reference", "answer", "dimension"}
"""

from __future__ import annotations

import base64
import json
import threading
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from core.errors import UserError
from core.formats.v2p import render_question
from demo.saving import save_ovi, save_v2p
from demo.session import LiveSession, Question
from demo.video import TOOLS, Drawing, Video, encode

PAGE = Path(__file__).with_name("page.html")
MAX_UPLOAD_BYTES = 512 * 1024 * 1024


class DemoState:
    """What the page works on: the video, the drawing, the session and the current exchange's events."""

    def __init__(self, session: LiveSession, out_dir: Path, max_frames: int, tokens_per_second: float):
        self.session, self.out_dir = session, out_dir
        self.max_frames, self.tokens_per_second = max_frames, tokens_per_second
        self.video: Video | None = None
        self.drawing: Drawing | None = None
        self.prompt_frame: Path | None = None
        self.events: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        self.worker: threading.Thread | None = None
        self.running = False  # an exchange is under way (answering, waiting for an interruption, reacting)
        self.streaming = False  # tokens are being generated: no new question until they stop

    # -- the video and the drawing --------------------------------------------------------------------

    def load_video(self, path: Path) -> dict:
        self.video, self.drawing, self.prompt_frame = Video(path, self.max_frames), None, None
        return self.state()

    def state(self) -> dict:
        drawing = None
        if self.drawing:
            drawing = {
                "frame": self.drawing.frame,
                "shape": self.drawing.shape,
                "box": list(self.drawing.box),
            }
        return {"video": self.video.info() if self.video else None, "drawing": drawing, "tools": list(TOOLS)}

    def draw(self, request: dict) -> dict:
        video = self._video()
        tool = request.get("tool")
        if tool not in TOOLS:
            raise UserError(f"tool {tool!r} not in {list(TOOLS)}")
        box = request.get("box")
        if not (isinstance(box, list) and len(box) == 4 and all(isinstance(v, int | float) for v in box)):
            raise UserError("box: expected [x0, y0, x1, y1] in frame pixels")
        x0, y0, x1, y1 = box
        box = (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))  # a drag may go any way
        drawing = Drawing(int(request.get("frame", 0)), TOOLS[tool], box, request.get("colour", "red"))
        drawn = video.draw(drawing)
        # A file per drawing: a saved item copies it, and a later drawing must not change one saved before.
        folder = self.out_dir / "prompts"
        folder.mkdir(parents=True, exist_ok=True)
        self.prompt_frame = folder / f"{video.path.stem}_{len(list(folder.glob('*.png'))):04d}.png"
        self.prompt_frame.write_bytes(encode(drawn, "PNG"))
        self.drawing = drawing
        return {**self.state(), "image": base64.b64encode(encode(drawn)).decode("ascii")}

    def clear(self) -> dict:
        self.drawing, self.prompt_frame = None, None
        return self.state()

    def _video(self) -> Video:
        if self.video is None:
            raise UserError("no video loaded: load one first")
        return self.video

    # -- the exchange ---------------------------------------------------------------------------------

    def ask(self, request: dict) -> dict:
        video = self._video()
        if self.streaming:
            raise UserError("the answer is still streaming: interrupt it, or wait for it to end")
        text = str(request.get("question", "")).strip()
        if not text:
            raise UserError("question: empty")
        options = [str(o).strip() for o in request.get("options") or [] if str(o).strip()]
        if options:
            if not 2 <= len(options) <= 4:
                raise UserError(f"options: give 2 to 4, got {len(options)}")
            text = render_question(text, options)  # worded as a V2P-Bench question, so it saves as one
        prompt = str(self.prompt_frame) if self.prompt_frame else None
        question = Question(str(video.path), video.duration, text, prompt)
        self.session.stop_waiting()  # a finished answer still waiting for an interruption: let it go
        if self.worker is not None:
            self.worker.join(timeout=30)
        with self.changed:
            self.events, self.streaming, self.running = [], True, True
        self.worker = threading.Thread(target=self._run, args=(question,), daemon=True)
        self.worker.start()
        return {"asked": text}

    def _run(self, question: Question) -> None:
        try:
            self.session.run(question, self._emit)
        except Exception as err:  # noqa: BLE001 - shown on the page: the server keeps serving
            self._emit({"event": "error", "error": f"{type(err).__name__}: {err}"})
        finally:
            with self.changed:
                self.streaming = self.running = False
                self.changed.notify_all()

    def _emit(self, event: dict[str, Any]) -> None:
        with self.changed:
            if event["event"] in ("answered", "cut", "done"):
                self.streaming = event["event"] == "cut"  # the reaction streams after a cut
            self.events.append(event)
            self.changed.notify_all()

    def interrupt(self, request: dict) -> dict:
        try:
            interruption = self.session.interrupt(str(request.get("kind")), request.get("words"))
        except ValueError as err:
            raise UserError(str(err)) from None
        return {"kind": interruption.kind.value, "words": interruption.words}

    def save(self, request: dict) -> dict:
        exchange = self.session.exchange
        if exchange is None:
            raise UserError("nothing to save: ask first")
        if request.get("format") == "ovi":
            saved = save_ovi(exchange, self.out_dir, self.tokens_per_second, request.get("reference"))
        elif request.get("format") == "v2p":
            dimension = int(request.get("dimension") or 1)
            saved = save_v2p(exchange, self.drawing, self.out_dir, str(request.get("answer", "")), dimension)
        else:
            raise UserError(f"format {request.get('format')!r}: expected ovi or v2p")
        return saved.reply()


class Handler(BaseHTTPRequestHandler):
    state: DemoState  # set on the class the server makes (make_server)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the events are the log
        pass

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path in ("/", "/index.html"):
            self._send(200, PAGE.read_bytes(), "text/html; charset=utf-8")
        elif url.path == "/api/state":
            self._json(self.state.state())
        elif url.path.startswith("/api/frame/") and url.path.endswith(".jpg"):
            self._answer(lambda: self._send(200, encode(self._frame(url.path)), "image/jpeg"))
        elif url.path == "/api/events":
            try:
                since = int(parse_qs(url.query).get("since", ["0"])[0])
                # A reconnecting EventSource says what it has seen: send only what came after.
                since = max(since, int(self.headers.get("Last-Event-ID") or 0))
            except ValueError:
                self._json({"error": "since: expected a number of events"}, 400)
                return
            self._events(since)
        else:
            self._json({"error": f"no such page: {url.path}"}, 404)

    def do_POST(self) -> None:
        url = urlparse(self.path)
        routes = {
            "/api/draw": self.state.draw,
            "/api/ask": self.state.ask,
            "/api/interrupt": self.state.interrupt,
            "/api/save": self.state.save,
            "/api/clear": lambda _: self.state.clear(),
        }
        if url.path == "/api/video":
            self._answer(lambda: self._json(self._upload(parse_qs(url.query).get("name", ["video.mp4"])[0])))
        elif url.path in routes:
            self._answer(lambda: self._json(routes[url.path](self._body())))
        else:
            self._json({"error": f"no such action: {url.path}"}, 404)

    # -- helpers --------------------------------------------------------------------------------------

    def _frame(self, path: str):
        return self.state._video().frame(int(path.removeprefix("/api/frame/").removesuffix(".jpg")))

    def _upload(self, name: str) -> dict:
        size = int(self.headers.get("Content-Length") or 0)
        if not 0 < size <= MAX_UPLOAD_BYTES:
            raise UserError(f"video upload: {size} bytes (1 byte to {MAX_UPLOAD_BYTES} accepted)")
        folder = self.state.out_dir / "videos"
        folder.mkdir(parents=True, exist_ok=True)
        name = Path(name).name  # the name only: never a path the client chose
        if name in ("", ".", ".."):
            raise UserError(f"video upload: {name!r} is not a file name")
        target = folder / name
        target.write_bytes(self.rfile.read(size))
        return self.state.load_video(target)

    def _body(self) -> dict:
        size = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(size) or b"{}")
        except json.JSONDecodeError as err:
            raise UserError(f"request body: not JSON ({err})") from None
        if not isinstance(body, dict):
            raise UserError("request body: expected a JSON object")
        return body

    def _answer(self, work) -> None:
        try:
            work()
        except (UserError, ValueError) as err:
            self._json({"error": str(err)}, 400)

    def _events(self, since: int) -> None:
        """Stream the exchange's events from ``since`` on until it is done (server-sent events)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        state, sent = self.state, since
        while True:
            with state.changed:
                state.changed.wait_for(partial(_new_or_over, state, sent), timeout=15)
                new, running = state.events[sent:], state.running
            for event in new:
                self.wfile.write(f"id: {sent + 1}\ndata: {json.dumps(event)}\n\n".encode())
                sent += 1
            if not new:
                self.wfile.write(b": still here\n\n")  # a closed page shows here as a broken pipe
            self.wfile.flush()
            if (new and new[-1]["event"] in ("done", "error")) or (not running and not new):
                return

    def _json(self, value: Any, status: int = 200) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _new_or_over(state: DemoState, seen: int) -> bool:
    """Whether an events stream that has sent ``seen`` events has more to send, or nothing to wait for."""
    return len(state.events) > seen or not state.running


def make_server(state: DemoState, host: str, port: int) -> ThreadingHTTPServer:
    """The server (not started: ``serve_forever``); ``port`` 0 takes a free one (``server_address``)."""
    handler = type("DemoHandler", (Handler,), {"state": state})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server
