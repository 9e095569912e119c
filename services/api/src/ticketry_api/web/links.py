"""An order's ``status_page_url``: ``<api public url>/o/<order id>#t=<order link>``,
and a waiting-room place's: ``<api public url>/q/<queue id>#t=<place link>``.

The order link (``ticketry.auth.issue_order_link``) lets whoever holds the URL
read that one order as its buyer, with no login, until it expires (72 h by
default, never under 24 h): its page, its PDFs and its progress socket, and
nothing else. It travels in the URL's fragment, which browsers never send to a
server, so it reaches no access log, proxy or ``Referer``; the page reads it,
clears it from the address bar and keeps it in the tab's session storage.
A place's link reads that one place (its page and its queue socket) the same way.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from ticketry.auth import issue_order_link, issue_queue_link

ORDER_PAGE_PREFIX = "/o/"
QUEUE_PAGE_PREFIX = "/q/"
DAY_S = 86_400


class LinkSettings(BaseSettings):
    """``TICKETRY_API_PUBLIC_URL``: where buyers reach this api (scheme, host,
    port; e.g. ``https://tickets.example.com``); by default the api's own
    ``http://<host>:<port>``. ``TICKETRY_ORDER_LINK_TTL_S``: how long a
    status page link works (at least a day: docs/contract.md promises 24 h)."""

    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    api_public_url: str | None = Field(
        default=None, pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="as the api's: the base of status page and waiting-room links (none: http://<host>:<port>)",
    )  # fmt: skip
    api_host: str = Field(default="127.0.0.1", description="as the api's: the links' host when no public URL is set")
    api_port: int = Field(
        default=8000, ge=1, le=65535, description="as the api's: the links' port when no public URL is set"
    )
    order_link_ttl_s: int = Field(
        default=3 * DAY_S, ge=DAY_S + 3600, le=90 * DAY_S,
        description="how long a status page or waiting-room link works (over a day: the contract promises 24 h)",
    )  # fmt: skip

    def public_url(self) -> str:
        if self.api_public_url:
            return self.api_public_url.rstrip("/")
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "::", "") else self.api_host  # noqa: S104
        return f"http://{host}:{self.api_port}"


def status_page_url(s: LinkSettings, order_id: str, buyer: str, *, secret: str) -> str:
    """The buyer's page of ``order_id``, with a fresh order link for ``buyer``."""
    token = issue_order_link(order_id, buyer, secret=secret, ttl_s=s.order_link_ttl_s)
    return f"{s.public_url()}{ORDER_PAGE_PREFIX}{order_id}#t={token}"


def queue_page_url(s: LinkSettings, queue_id: str, buyer: str, *, secret: str) -> str:
    """The buyer's page of a waiting-room place, with a fresh link for ``buyer``."""
    token = issue_queue_link(queue_id, buyer, secret=secret, ttl_s=s.order_link_ttl_s)
    return f"{s.public_url()}{QUEUE_PAGE_PREFIX}{queue_id}#t={token}"
