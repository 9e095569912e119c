"""An identity provider's JWKS endpoint on loopback whose answer a test can hold."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


class SlowIdp:
    """A JWKS endpoint on loopback. After :meth:`hold`, its next answer waits
    until :meth:`release` (or a minute, so a broken test cannot hang)."""

    def __init__(self) -> None:
        self.body = b'{"keys": []}'
        self.status = 200
        self.fetches = 0
        self.held = 0
        self._hold_next = False
        self._gate = threading.Event()
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                idp.fetches += 1
                if idp._hold_next:
                    idp._hold_next = False
                    idp.held += 1
                    idp._gate.wait(60)
                self.send_response(idp.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(idp.body)))
                self.end_headers()
                self.wfile.write(idp.body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def publish(self, *keys: tuple[str, rsa.RSAPrivateKey]) -> None:
        jwks = [
            {**json.loads(RSAAlgorithm.to_jwk(k.public_key())), "kid": kid, "alg": "RS256", "use": "sig"}
            for kid, k in keys
        ]
        self.body = json.dumps({"keys": jwks}).encode()

    def hold(self) -> None:
        self._gate.clear()
        self._hold_next = True

    def release(self) -> None:
        self._gate.set()

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
