"""A tiny HTTP server on 127.0.0.1 for the smoke checks of the harness (smoke.py): pages shaped
like the console's (a `<main>`, an `<h1>`, the Console nav, a form with `_csrf`), served with the
console's strict Content-Security-Policy, plus pages that must make the harness's detectors fire.

    /clean          a page that passes every check; its script (/static/live.js) opens
                    /events and appends each event's data as text to `ol#messages`
    /inline         the same CSP, with an inline <script> calling alert(): must not run
    /no-csp         no CSP header; /static/unsafe.js puts hostile bodies in with innerHTML:
                    the detectors must see the dialog and the injected elements
    /inaccessible   axe-core must find serious or critical violations here
    /events         text/event-stream: one `data:` line per `publish(text)`

Stopped by `close()`; every wait it does is bounded.
"""

from __future__ import annotations

import html
import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import HOSTILE_BODIES

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

HOSTILE = list(HOSTILE_BODIES)

CSS = """
body { font-family: sans-serif; margin: 0; color: #1b1b1b; background: #fff; }
nav { background: #12355b; padding: .5rem 1rem; }
nav a { color: #fff; margin-right: 1rem; }
main { padding: 1rem; }
.body { white-space: pre-wrap; font-family: monospace; }
"""

LIVE_JS = """
const list = document.getElementById('messages');
const es = new EventSource('/events');
es.onmessage = (e) => {
  const li = document.createElement('li');
  li.className = 'message';
  const body = document.createElement('span');
  body.className = 'body';
  body.textContent = e.data;
  li.appendChild(body);
  list.appendChild(li);
};
"""

UNSAFE_JS = """
const list = document.getElementById('messages');
for (const b of JSON.parse(document.getElementById('bodies').textContent)) {
  const li = document.createElement('li');
  li.innerHTML = b;            // the bug the console must not have
  list.appendChild(li);
}
"""


def _frame(title: str, inner: str, head: str = "") -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<link rel="stylesheet" href="/static/stub.css">{head}</head>
<body>
<nav aria-label="Console"><a href="/clean">Overview</a><a href="/clean">Push</a><a href="/clean">Storage</a></nav>
<main>
<h1>{html.escape(title)}</h1>
{inner}
<form id="sign-out" method="post" action="/sign-out"><input type="hidden" name="_csrf" value="{"0" * 64}"><button type="submit">Sign out</button></form>
</main>
</body></html>"""


def _messages(bodies: list[str]) -> str:
    items = "".join(f'<li class="message"><span class="body">{html.escape(b)}</span></li>' for b in bodies)
    return f'<ol id="messages">{items}</ol>'


class Stub:
    def __init__(self) -> None:
        self._events: list[queue.Queue[str]] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, ctype: str, body: str, csp: bool = True) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                if csp:
                    self.send_header("Content-Security-Policy", CSP)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?")[0]
                if path == "/clean":
                    self._send(200, "text/html; charset=utf-8", _frame("Conversation", _messages(HOSTILE) + '<script src="/static/live.js" defer></script>'))
                elif path == "/inline":
                    self._send(200, "text/html; charset=utf-8", _frame("Inline", _messages([]) + "<script>alert('inline ran')</script>"))
                elif path == "/no-csp":
                    bodies = json.dumps(HOSTILE).replace("<", "\\u003c")
                    inner = _messages([]) + f'<script type="application/json" id="bodies">{bodies}</script><script src="/static/unsafe.js" defer></script>'
                    self._send(200, "text/html; charset=utf-8", _frame("No CSP", inner), csp=False)
                elif path == "/inaccessible":
                    inner = '<img src="/static/none.png"><button></button><input type="text"><p class="low">low contrast</p>'
                    # No lang, no title, no labels: axe must complain.
                    page = f"<!doctype html><html><head><link rel='stylesheet' href='/static/stub.css'></head><body>{inner}</body></html>"
                    self._send(200, "text/html; charset=utf-8", page)
                elif path == "/static/stub.css":
                    self._send(200, "text/css", CSS)
                elif path == "/static/live.js":
                    self._send(200, "text/javascript", LIVE_JS)
                elif path == "/static/unsafe.js":
                    self._send(200, "text/javascript", UNSAFE_JS)
                elif path == "/static/none.png":
                    # 1x1 transparent PNG.
                    self.send_response(200)
                    png = bytes.fromhex(
                        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
                    )
                    self.send_header("Content-Type", "image/png")
                    self.send_header("Content-Length", str(len(png)))
                    self.end_headers()
                    self.wfile.write(png)
                elif path == "/events":
                    self._stream()
                else:
                    self._send(404, "text/plain", "not found", csp=False)

            def _stream(self) -> None:
                q: queue.Queue[str] = queue.Queue()
                with stub._lock:
                    stub._events.append(q)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(b": open\n\n")
                self.wfile.flush()
                try:
                    while not stub._closed.is_set():
                        try:
                            text = q.get(timeout=0.2)
                        except queue.Empty:
                            continue
                        self.wfile.write(f"data: {text}\n\n".encode())
                        self.wfile.flush()
                except OSError:
                    pass
                finally:
                    with stub._lock:
                        stub._events.remove(q)
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()

    def subscribers(self) -> int:
        with self._lock:
            return len(self._events)

    def publish(self, text: str) -> None:
        with self._lock:
            for q in self._events:
                q.put(text)

    def close(self) -> None:
        self._closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "Stub":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

