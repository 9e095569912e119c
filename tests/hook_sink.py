"""A webhook receiver for the tests, run as its own process (inside a network
namespace, where the test process cannot listen):
``python -m tests.hook_sink <log> <address:port> [<address:port> …]``.

It listens on every address given and answers each POST 200 and closes the
connection (HTTP/1.0), so every delivery opens a new one. Each request is
appended to ``<log>`` as one JSON line: the address it reached, its path and
its ``webhook-id`` header."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_LOCK = threading.Lock()


def serve(log: Path, listen: list[str]) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            line = {"to": self.server.server_address[0], "path": self.path, "id": self.headers.get("webhook-id")}
            with _LOCK, log.open("a") as fh:
                fh.write(json.dumps(line) + "\n")
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    servers = []
    for where in listen:
        host, port = where.rsplit(":", 1)
        servers.append(ThreadingHTTPServer((host, int(port)), Handler))
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("listening", flush=True)
    servers[0].serve_forever()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2:])
