"""Security headers on every answer, and (opt-in) CORS."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"cache-control", b"no-store"),
]


class CorsSettings(BaseSettings):
    """``TICKETRY_CORS_ORIGINS``: comma-separated exact origins allowed to call the
    API from a browser. Empty (the default) means no CORS headers at all, so no
    other site's scripts can read responses. Tokens travel in the Authorization
    header, never cookies, so credentials are never allowed cross-origin."""

    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    cors_origins: Annotated[list[str], NoDecode] = Field(
        default=[],
        description="comma-separated exact origins (https://host[:port]) whose pages may call the api from a "
        "browser; empty: no CORS headers at all",
    )

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [o.strip().rstrip("/") for o in value.split(",") if o.strip()]
        return value

    @field_validator("cors_origins")
    @classmethod
    def _no_wildcard(cls, value: list[str]) -> list[str]:
        for origin in value:
            if origin == "*" or not origin.startswith(("https://", "http://")):
                raise ValueError(f"CORS origin {origin!r} must be an exact http(s) origin, not a wildcard")
        return value


class SecurityHeaders:
    """Deliberate defaults: no sniffing, no framing, no caching of buyers' data;
    CORS only for the origins configured (see :class:`CorsSettings`)."""

    def __init__(self, app: ASGIApp, cors_origins: list[str] | None = None) -> None:
        origins = CorsSettings().cors_origins if cors_origins is None else cors_origins
        if origins:
            app = CORSMiddleware(
                app,
                allow_origins=origins,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
                expose_headers=["Retry-After"],
                allow_credentials=False,
                max_age=600,
            )
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
