"""The scripted model: a loopback server speaking the Anthropic Messages API, for Claude Code.

`POST /v1/messages` answers with the turn the current script chooses, streamed as the API
streams it (`stream: true`: server-sent events `message_start`, then per block
`content_block_start`, `content_block_delta` — `text_delta` for text, `input_json_delta` for a
tool call's input, in pieces — and `content_block_stop`, then `message_delta` with the
`stop_reason` and `message_stop`), or as one JSON message when the request does not stream.
`POST /v1/messages/count_tokens` answers a rough count. Any other path is recorded and answered
404 with the API's error shape, so whatever the host calls is visible in the record.

Every request is recorded (`Model.requests`, and one JSON line per request in `record_path`
when given): method, path, the header names with the API version and beta headers, and the
parsed JSON body.

A script is `fn(request_body: dict) -> Turn | None`, set per scenario (`Model.script`); None
means the default turn (text "ok", `end_turn`). Requests that are not the session's main loop
(no `tools` in the body: the host's side queries) always get the default turn and are not shown
to the script.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

MODEL_NAME = "claude-scripted-1"


@dataclasses.dataclass
class ToolCall:
    name: str
    input: dict[str, Any]


@dataclasses.dataclass
class Turn:
    """One assistant message: text and tool calls, in order."""

    blocks: list[str | ToolCall]

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(isinstance(b, ToolCall) for b in self.blocks) else "end_turn"


def text(t: str) -> Turn:
    return Turn([t])


def call(name: str, **input: Any) -> Turn:
    return Turn([ToolCall(name, input)])


Script = Callable[[dict], "Turn | None"]


def _blocks(turn: Turn) -> list[dict]:
    out = []
    for b in turn.blocks:
        if isinstance(b, ToolCall):
            out.append({"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": b.name, "input": b.input})
        else:
            out.append({"type": "text", "text": b})
    return out


def _message(blocks: list[dict], stop_reason: str, input_tokens: int) -> dict:
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": MODEL_NAME,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }


def _pieces(s: str, n: int = 3) -> list[str]:
    """`s` in up to `n` pieces (the API streams text and tool input in fragments)."""
    size = max(1, -(-len(s) // n))
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


def sse_events(blocks: list[dict], stop_reason: str, input_tokens: int) -> list[tuple[str, dict]]:
    """The (event, data) pairs of a streamed answer, as the Messages API sends them."""
    start = _message([], None, input_tokens)  # type: ignore[arg-type]
    start["usage"]["output_tokens"] = 1
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": start}), ("ping", {"type": "ping"})]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}))
            for p in _pieces(b["text"]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": p}}))
        else:
            head = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": head}))
            for p in _pieces(json.dumps(b["input"])):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": p}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": {"output_tokens": 10}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class Model:
    """The scripted model on 127.0.0.1 (a free port unless given); a context manager."""

    def __init__(self, record_path: str | None = None, port: int = 0) -> None:
        self.script: Script | None = None
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._record = open(record_path, "a", encoding="utf-8") if record_path else None
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                model._handle(self, None)

            def do_HEAD(self) -> None:
                model._handle(self, None)

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = {"_unparsed": raw[:2000].decode(errors="replace")}
                model._handle(self, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "Model":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._record:
            self._record.close()

    # --- the record ------------------------------------------------------------------------

    def main_requests(self) -> list[dict]:
        """The bodies of the recorded `POST /v1/messages` of the session's main loop."""
        with self._lock:
            return [r["body"] for r in self.requests if r["path"].startswith("/v1/messages") and r["main"]]

    def _record_request(self, handler: BaseHTTPRequestHandler, body: Any, main: bool) -> None:
        entry = {
            "seq": next(self._seq),
            "method": handler.command,
            "path": handler.path,
            "headers": sorted(k.lower() for k in handler.headers.keys()),
            "anthropic_version": handler.headers.get("anthropic-version"),
            "anthropic_beta": handler.headers.get("anthropic-beta"),
            "main": main,
            "body": body,
        }
        with self._lock:
            self.requests.append(entry)
            if self._record:
                self._record.write(json.dumps(entry) + "\n")
                self._record.flush()

    # --- answers ---------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, body: Any) -> None:
        path = h.path.split("?", 1)[0]
        if h.command == "POST" and path == "/v1/messages" and isinstance(body, dict):
            main = bool(body.get("tools"))
            self._record_request(h, body, main)
            turn = None
            if main and self.script is not None:
                try:
                    turn = self.script(body)
                except Exception as e:  # noqa: BLE001 - a broken script answers an API error the test sees
                    self._json(h, 500, {"type": "error", "error": {"type": "api_error", "message": f"script failed: {e!r}"}})
                    return
            turn = turn or text("ok")
            blocks = _blocks(turn)
            tokens = max(1, len(json.dumps(body)) // 4)
            if body.get("stream"):
                self._sse(h, sse_events(blocks, turn.stop_reason, tokens))
            else:
                self._json(h, 200, _message(blocks, turn.stop_reason, tokens))
            return
        self._record_request(h, body, False)
        if h.command == "POST" and path == "/v1/messages/count_tokens":
            self._json(h, 200, {"input_tokens": max(1, len(json.dumps(body)) // 4)})
            return
        self._json(h, 404, {"type": "error", "error": {"type": "not_found_error", "message": f"no {h.command} {path} here"}})

    @staticmethod
    def _json(h: BaseHTTPRequestHandler, status: int, doc: dict) -> None:
        raw = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(raw)

    @staticmethod
    def _sse(h: BaseHTTPRequestHandler, events: list[tuple[str, dict]]) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        h.end_headers()
        for name, data in events:
            chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            h.wfile.flush()
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
