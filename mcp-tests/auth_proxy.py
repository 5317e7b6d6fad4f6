"""A loopback HTTP proxy that adds `Authorization: Bearer TOKEN` to every request (stdlib only).

The MCP conformance suite sends no headers of its own choosing, and crewbus's `/mcp` refuses a
request without an agent's token. The proxy forwards each request to the upstream server with
its method, path, headers and body unchanged — `Host` and `Origin` included, so the suite's
DNS-rebinding scenario reaches crewbus's own check — adds the bearer (replacing any
Authorization the client sent), and streams the answer back as it arrives (an SSE stream is
relayed event by event). One request per connection (`Connection: close`).

Use: `with AuthProxy("http://127.0.0.1:PORT", token) as proxy: proxy.url`; or run
`python auth_proxy.py UPSTREAM_URL` with the token in `MCP_PROXY_TOKEN`: it prints
`{"listening": URL}` and serves until killed. The token is never printed or logged.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import sys
import threading
import urllib.parse

# Hop-by-hop headers (RFC 9110 §7.6.1) are the proxy's own business, never forwarded.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}


def _read_body(handler: http.server.BaseHTTPRequestHandler) -> bytes:
    if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
        chunks = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def _handler(upstream: urllib.parse.SplitResult, token: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
            pass  # quiet: the suite's own report says what happened

        def _forward(self) -> None:
            body = _read_body(self)
            conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=None)
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    lower = name.lower()
                    if lower in HOP_BY_HOP or lower in ("authorization", "content-length"):
                        continue
                    conn.putheader(name, value)
                conn.putheader("Authorization", f"Bearer {token}")
                if body or self.command in ("POST", "PUT", "PATCH"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body or None)
                resp = conn.getresponse()
                self.send_response_only(resp.status, resp.reason)
                for name, value in resp.getheaders():
                    if name.lower() not in HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client went away mid-stream
            finally:
                conn.close()

        do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = do_HEAD = _forward

    return Handler


class AuthProxy:
    """The proxy on a free port of 127.0.0.1, serving on a background thread until closed."""

    def __init__(self, upstream_url: str, token: str) -> None:
        upstream = urllib.parse.urlsplit(upstream_url)
        if upstream.scheme != "http" or upstream.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the upstream must be a loopback http:// URL")
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, token))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT` (no path)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> AuthProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


if __name__ == "__main__":
    token = os.environ.get("MCP_PROXY_TOKEN")
    if len(sys.argv) != 2 or not token:
        sys.exit("usage: MCP_PROXY_TOKEN=TOKEN python auth_proxy.py http://127.0.0.1:PORT")
    with AuthProxy(sys.argv[1], token) as proxy:
        print(json.dumps({"listening": proxy.url}), flush=True)
        threading.Event().wait()
