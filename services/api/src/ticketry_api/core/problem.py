"""The domain's refusal: a :class:`Problem` names what went wrong in the words
of RFC 9457 (status, title, detail, a ``type`` a client tells apart). The
edge (``ticketry_api.http.errors``) answers it as problem+json."""

from __future__ import annotations

from typing import Any

PROBLEM_BASE = "https://ticketry.dev/problems/"


class Problem(Exception):
    """Raise from anywhere in a request to answer with problem+json. ``kind``
    names a problem a client tells apart (``type`` ends in ``/<kind>``)."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str = "",
        headers: dict[str, str] | None = None,
        *,
        kind: str = "",
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(title)
        self.status, self.title, self.detail, self.headers = status, title, detail, headers
        self.type = PROBLEM_BASE + kind if kind else "about:blank"
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        return {"type": self.type, "status": self.status, "title": self.title, "detail": self.detail, **self.extra}
