#!/usr/bin/env python3
"""The partition test's push destination (run in the `cl` namespace): answers every POST to
/hook with 204 and records it, one JSON line per POST in --out: t (received), webhook_id, the
CloudEvent's id, run, seq and type. Python 3 standard library only."""

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True, help="HOST:PORT")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    lock = threading.Lock()
    out = open(a.out, "a", buffering=1)

    class Hook(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
            record = {"t": time.time(), "webhook_id": self.headers.get("webhook-id"), "path": self.path}
            try:
                event = json.loads(raw)
                data = event.get("data") or {}
                record.update({"id": event.get("id"), "type": event.get("type"),
                               "run": str(data.get("run")), "seq": data.get("seq")})
            except ValueError:
                record["unparsed"] = raw[:200].decode("utf-8", "replace")
            with lock:
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    host, port = a.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Hook)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
