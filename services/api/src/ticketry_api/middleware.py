"""Pure-ASGI middleware: body size cap and security headers."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ticketry_api.errors import problem_response


class BodyLimit:
    """Refuse request bodies above ``max_bytes`` with 413 (declared or streamed)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await problem_response(413, "request body too large")(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return msg

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await problem_response(413, "request body too large")(scope, receive, send)


class _TooLarge(Exception):
    pass


_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """Deliberate defaults: no sniffing, no framing, no caching of buyers' data."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        docs = scope.get("path", "") in ("/docs", "/redoc")

        async def with_headers(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                present = {k.lower() for k, _ in msg.get("headers", [])}
                extra = [(k, v) for k, v in _HEADERS if k not in present]
                if docs:  # Swagger UI needs its own scripts and styles
                    extra = [(k, v) for k, v in extra if k != b"content-security-policy"]
                msg["headers"] = [*msg.get("headers", []), *extra]
            await send(msg)

        await self.app(scope, receive, with_headers)
