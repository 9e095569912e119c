"""API settings."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode
from ticketry.settings import ConfigurationError, ServingSettings, is_loopback_host


def shop_origin(raw: str) -> str:
    """``raw`` as an origin (``scheme://host[:port]``, lower case): https, or
    http on a loopback host; anything else (a path, user info) is refused."""
    u = urlsplit(raw.strip())
    if u.scheme not in ("https", "http") or not u.hostname or u.username or u.password or u.path not in ("", "/"):
        raise ValueError(f"not an origin (https://host[:port]): {raw!r}")
    if u.query or u.fragment or (u.scheme == "http" and not is_loopback_host(u.hostname)):
        raise ValueError(f"not an https origin: {raw!r}")
    default_port = {"https": 443, "http": 80}[u.scheme]
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return f"{u.scheme}://{host}" + (f":{u.port}" if u.port not in (None, default_port) else "")


class ApiSettings(ServingSettings):
    api_host: str = Field(
        default="127.0.0.1",
        description="the address the api listens on; beyond loopback it needs a JWT secret of its own and, "
        "outside dev mode, TICKETRY_API_PUBLIC_URL and TICKETRY_NOTIFIER_PUBLIC_URL",
    )
    api_port: int = Field(default=8000, ge=1, le=65535, description="the port the api listens on")
    api_workers: int = Field(
        default=0, ge=0, le=64, json_schema_extra={"unit": "processes"},
        description="api processes serving the one port (each runs the projector, sweeps and senders, as the "
        "HA topology's api hosts do); 0: one per core this process may run on",
    )  # fmt: skip
    notifier_public_url: str = Field(
        default="ws://127.0.0.1:8001",
        description="where buyers' browsers reach the notifier (ws:// or wss://); orders' progress_url is built on it",
    )
    outbox_grace_s: float = Field(
        default=10.0, gt=0,
        description="an accepted order not yet handed to the renderers after this long is handed over "
        "again by the outbox sweep",
    )  # fmt: skip
    outbox_interval_s: float = Field(default=5.0, gt=0, description="how often the outbox sweep runs")
    # The new event's first tickets are then stamped at once.
    design_wait_s: float = Field(
        default=3.0, ge=0,
        description="POST /v1/events answers once a live renderer has built the event's designs, waiting at most "
        "this long (at once when no renderer is live); 0: never wait",
    )  # fmt: skip
    projector_batch: int = Field(
        default=500, ge=1, le=100_000, json_schema_extra={"unit": "messages"},
        description="ticket messages the projector reads at once into the orders' read model",
    )  # fmt: skip
    run_projector: bool = Field(
        default=True,
        description="this api process runs a projector (ticket messages to the read model); the apps' projectors "
        "share the stream through one consumer group",
    )
    max_body_bytes: int = Field(
        default=2 * 1024 * 1024, ge=1024, le=1024**3,
        description="the largest request body accepted, else 413; room for one holder name per ticket of a big order",
    )  # fmt: skip
    # Every request body is read whole before the app sees the request
    # (middleware.BodyDeadline): one that has not fully arrived within this many
    # seconds of the request's start is answered 408 and its connection closed,
    # so a client trickling bytes holds nothing for long.
    body_read_timeout_s: float = Field(
        default=10.0, gt=0, le=300,
        description="Seconds (0 < s <= 300) within which a request's whole body must arrive, else 408",
    )  # fmt: skip
    # Request bodies one client address may have in transit at once; past it 429
    # with Retry-After. The address is the ASGI client host: behind a proxy,
    # uvicorn's proxy headers (FORWARDED_ALLOW_IPS) must name the proxy.
    max_slow_bodies_per_client: int = Field(
        default=16, ge=1, le=10_000, json_schema_extra={"unit": "requests"},
        description="Request bodies (1 to 10,000) one client address may be sending at once, else 429",
    )  # fmt: skip
    # Read here only to check it (web/links.py builds status_page_url from it).
    api_public_url: str | None = Field(
        default=None,
        description="where buyers reach this api (e.g. https://tickets.example.com): status page links are built "
        "on it; none: http://<api host>:<api port>",
    )
    # Backpressure on POST /v1/orders: past the orders in flight a request waits
    # in a queue while its expected wait is within order_queue_s, else 503.
    max_inflight_orders: int = Field(
        default=32, ge=1, le=100_000, json_schema_extra={"unit": "orders"},
        description="orders one api process works on at once; more wait in its queue",
    )  # fmt: skip
    max_queued_orders: int = Field(
        default=1000, ge=0, le=1_000_000, json_schema_extra={"unit": "orders"},
        description="orders that may wait for a slot; past it 503 with Retry-After at once (0: none wait)",
    )  # fmt: skip
    order_queue_s: float = Field(
        default=2.0, ge=0, description="the longest expected wait an order queues for; a longer one is answered 503"
    )
    # An order's holder names are checked against the ticket's fonts (shaped)
    # off the event loop, after the order counted against the buyer's rates:
    # at most this many distinct names per order (the same name on many tickets
    # is one), and within this many seconds, queueing for a checker included.
    max_distinct_names: int = Field(
        default=2000, ge=1, le=1_000_000, json_schema_extra={"unit": "names"},
        description="Distinct holder names (1 to 1,000,000) one order may carry, else 422",
    )  # fmt: skip
    max_reissues: int = Field(
        default=3, ge=0, le=100, json_schema_extra={"unit": "re-issues"},
        description="Re-issues (0 to 100) of one ticket to another holder, else 409 (0: no re-issue)",
    )  # fmt: skip
    name_check_budget_s: float = Field(
        default=5.0, gt=0, le=60,
        description="Seconds (0 < s <= 60) an order's names may take to check, else 503 with Retry-After",
    )  # fmt: skip
    # The api's Redis connections (a bounded pool; a caller waits up to
    # api_redis_wait_s for one instead of opening one per concurrent request).
    api_redis_pool: int = Field(
        default=128, ge=8, le=10_000, json_schema_extra={"unit": "connections"},
        description="Redis connections one api process keeps at most; a request waits for a free one",
    )  # fmt: skip
    api_redis_wait_s: float = Field(
        default=2.0, gt=0, description="how long a request waits for a free Redis connection before it fails"
    )
    # What an answer promises survives the primary's loss (adapters/replicas.py): a write
    # that would lose work is answered only once this many replicas acknowledged
    # it (Redis WAIT), else 503 with Retry-After. 0: no WAIT (one host).
    redis_min_replicas: int = Field(
        default=0, ge=0, le=16, json_schema_extra={"unit": "replicas"},
        description="Redis replicas (0 to 16; 0: do not wait) that must acknowledge an order's writes before 202",
    )  # fmt: skip
    redis_replica_wait_ms: int = Field(
        default=500, ge=1, le=5000,
        description="Milliseconds (1 to 5,000) to wait for those replicas (Redis WAIT timeout), else 503",
    )  # fmt: skip
    room_tick_s: float = Field(
        default=1.0, gt=0,
        description="how often the waiting rooms admit their next buyers (and this api reports its order rate)",
    )  # fmt: skip
    room_permission_ttl_s: float = Field(
        default=120.0, gt=0, description="how long a buyer admitted from a waiting room may place the order"
    )
    # A place holds ~500 bytes of Redis: 100,000 waiting are ~50 MB.
    room_max_queue: int = Field(
        default=100_000, ge=1, le=100_000_000, json_schema_extra={"unit": "places"},
        description="buyers that may wait in one event's room (admitted ones not counted); past it 503 \"queue full\"",
    )  # fmt: skip
    # "Download all" (web/joins.py): a join of a full part holds ~6 MB read
    # and up to as much written (~0.5 MB when its stamps share their template),
    # and PDFium joins one at a time per process. Past the
    # running and waiting joins below a download is answered 503 with
    # Retry-After before it reads anything; identical downloads share one join.
    max_concurrent_joins: int = Field(
        default=2, ge=1, le=64, json_schema_extra={"unit": "joins"},
        description="Joins of an order's PDFs (1 to 64) that read and join at once in one api process",
    )  # fmt: skip
    max_queued_joins: int = Field(
        default=4, ge=0, le=1000, json_schema_extra={"unit": "joins"},
        description="Joins (0 to 1,000) that may wait for a running slot, holding nothing yet; past it 503",
    )  # fmt: skip
    max_joins_per_order: int = Field(
        default=1, ge=1, le=64, json_schema_extra={"unit": "joins"},
        description="Running or waiting joins (1 to 64) of one order's parts, so one order cannot take every slot",
    )  # fmt: skip
    joined_pdf_cache_mb: int = Field(
        default=64, ge=0, le=4096,
        description="MiB (0 to 4,096; 0: none) of joined parts kept per api process for repeated downloads",
    )  # fmt: skip

    # A scan's nonce keeps its first answer for an offline scanner's re-upload
    # (service_layer/checkins.py) this long; a periodic sweep deletes older ones (FerretDB v1
    # has no TTL index). A week: a scanner offline through a multi-day festival
    # still uploads its queue days later and gets the answers it was given.
    checkin_nonce_ttl_s: int = Field(
        default=7 * 24 * 3600, ge=3600, le=90 * 24 * 3600,
        description="Seconds (1 h to 90 days) a check-in nonce keeps its first answer; older ones are deleted",
    )  # fmt: skip
    checkin_nonce_sweep_s: float = Field(
        default=3600.0, gt=0, le=86_400,
        description="Seconds (0 < s <= 86,400) between sweeps deleting expired check-in nonces",
    )  # fmt: skip
    ops_feed_interval_s: float = Field(
        default=1.5, ge=0.5, le=30,
        description="Seconds (0.5 to 30) between the snapshots of the operator's console feed "
        "(GET /v1/ops/feed): one shared poll of Redis per api process, however many consoles are open",
    )  # fmt: skip
    ops_history_interval_s: float = Field(
        default=10.0, ge=0.5, le=60,
        description="Seconds (0.5 to 60) between the samples of the console's throughput kept in Redis "
        "(ticketry:ops:throughput, one per interval whichever api takes it): the chart of the last 15 minutes",
    )  # fmt: skip
    ops_drain_target_s: float = Field(
        default=20.0, gt=0, le=3600,
        description="Seconds (0 < s <= 3,600) the render backlog should drain within at the renderers' "
        "capacity; the console marks a render group red past it (the scaler's TICKETRY_SCALER_TARGET_DRAIN_S)",
    )  # fmt: skip
    # GET /metrics: set, only with this bearer token (Prometheus' scrape config
    # `authorization`); unset, only to loopback peers. Behind a proxy on the
    # same host every client is a loopback peer unless the proxy sends
    # X-Forwarded-For (uvicorn trusts it from loopback): set a token there.
    metrics_token: SecretStr | None = Field(
        default=None, min_length=16,
        description="Bearer token (16+ characters) GET /metrics requires; unset: loopback peers only",
    )  # fmt: skip
    # The shop's origins a waiting-room page may send its buyer back to (the
    # r= of its link); any other return address is not shown as a link.
    shop_origins: Annotated[list[str], NoDecode] = Field(
        default=[],
        description="Comma-separated origins (https://host[:port]; http only on loopback) of the shops "
        "a waiting-room page may link back to; empty: none",
    )

    @field_validator("metrics_token", mode="before")
    @classmethod
    def _no_token(cls, raw: object) -> object:
        return None if raw == "" else raw  # compose's ${TICKETRY_METRICS_TOKEN:-}: unset

    @field_validator("shop_origins", mode="before")
    @classmethod
    def _origins(cls, raw: object) -> list[str]:
        items = [o.strip() for o in raw.split(",")] if isinstance(raw, str) else list(raw or [])  # type: ignore[call-overload]
        return [shop_origin(o) for o in items if o]

    @property
    def bind_host(self) -> str:
        return self.api_host

    @model_validator(mode="after")
    def _public_urls(self) -> ApiSettings:
        """Outside dev mode an api that listens beyond loopback serves buyers
        elsewhere: where they reach the api and the notifier must be said (the
        defaults point at 127.0.0.1). A value set explicitly is taken as meant,
        ``ws://localhost:8001`` for a single-host try-out included."""
        if self.dev_mode or is_loopback_host(self.api_host):
            return self
        if "notifier_public_url" not in self.model_fields_set:
            raise ConfigurationError(
                "set TICKETRY_NOTIFIER_PUBLIC_URL to where buyers reach the notifier (e.g. "
                f"wss://progress.example.com): the default {self.notifier_public_url} is this host's loopback"
            )
        if self.api_public_url is None:
            raise ConfigurationError(
                "set TICKETRY_API_PUBLIC_URL to where buyers reach this api (e.g. https://tickets.example.com): "
                "status page links would point at this host's loopback"
            )
        return self
