"""What every ``ticketryctl`` command shares: settings, connections, output."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, NoReturn, TypeVar

import orjson
import typer
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pymongo import AsyncMongoClient
from redis.asyncio import Redis
from rich.console import Console
from ticketry.db import connect_mongo, connect_redis
from ticketry.redis_ha import DEFAULT_MASTER, PrimaryNotFound, RedisTarget, find_primary, parse_sentinels
from ticketry.settings import load_settings

from ticketry_api.adapters.replicas import replicated
from ticketry_api.core.problem import Problem

T = TypeVar("T")

# soft_wrap: a line is never broken for a terminal width (scripts grep the output);
# tables written to a pipe or file get room for full stream and consumer names.
console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 200)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON on stdout).")]
STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


class CtlSettings(BaseSettings):
    """The environment ``ticketryctl`` reads (the stack's own ``TICKETRY_*``).
    Unlike the services it needs no JWT secret: most commands talk to Redis
    and the store directly."""

    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    redis_url: str = Field(default="redis://127.0.0.1:6379/0", description="as the services': the stack's Redis")
    redis_sentinels: str = Field(
        default="", description="as the services': the Sentinels that name the Redis primary (empty: the URL's Redis)"
    )
    redis_sentinel_master: str = Field(default=DEFAULT_MASTER, min_length=1, description="as the services'")
    mongo_url: str = Field(
        default="mongodb://127.0.0.1:27017/ticketry", description="as the services': the stack's store"
    )
    api_host: str = Field(default="127.0.0.1", description="the api's host, when TICKETRY_API_URL is not set")
    api_port: int = Field(default=8000, ge=1, le=65535, description="the api's port, when TICKETRY_API_URL is not set")
    api_url: str | None = Field(
        default=None, description="where the api is, when not at TICKETRY_API_HOST:TICKETRY_API_PORT (a deployed stack)"
    )
    dev_mode: bool = Field(default=False, description="as the services': `tokens mint` and `--as` mint tokens")
    jwt_secret: SecretStr | None = Field(
        default=None, description="the stack's HS secret, to mint dev tokens with; none: the public dev secret"
    )
    token: SecretStr | None = Field(
        default=None,
        description="a bearer token for the commands that go through the api (`events create`, `orders place`)",
    )
    # As the api's (adapters/replicas.py): a re-drive or delete waits for this many replicas.
    redis_min_replicas: int = Field(
        default=0, ge=0, le=16, json_schema_extra={"unit": "replicas"},
        description="Redis replicas (0 to 16; 0: do not wait) that must acknowledge a re-drive or delete",
    )  # fmt: skip
    redis_replica_wait_ms: int = Field(
        default=500, ge=1, le=5000, description="Milliseconds (1 to 5,000) to wait for those replicas"
    )

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinel_addresses(cls, value: str) -> str:
        parse_sentinels(value)
        return value

    @property
    def redis_target(self) -> RedisTarget:
        return RedisTarget(self.redis_url, parse_sentinels(self.redis_sentinels), self.redis_sentinel_master)

    @property
    def api_base(self) -> str:
        return (self.api_url or f"http://{self.api_host}:{self.api_port}").rstrip("/")


def settings() -> CtlSettings:
    return load_settings(CtlSettings)


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro_fn()

    return asyncio.run(main())


@asynccontextmanager
async def redis_client() -> AsyncIterator[Redis]:
    target = settings().redis_target
    if target.via_sentinel:
        try:  # a wrong Sentinel setting: one line, not a traceback
            await find_primary(target)
        except PrimaryNotFound as exc:
            raise fail(str(exc)) from None
    redis = connect_redis(target)
    try:
        yield redis
    finally:
        await redis.aclose()


@asynccontextmanager
async def mongo_client(url: str | None = None) -> AsyncIterator[AsyncMongoClient[dict[str, object]]]:
    """A client with beanie initialised on the database of ``url`` (default: the stack's)."""
    client = await connect_mongo(url or settings().mongo_url, pool_size=4)
    try:
        yield client
    finally:
        await client.close()


def print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` on stderr; the exit to raise."""
    err.print(f"[red]{message}[/red]")
    return typer.Exit(code)


def check_ids(ids: list[str]) -> None:
    """Stream entry ids only (``1700000000000-0``): Redis refuses anything else loudly."""
    if bad := [i for i in ids if not STREAM_ID.match(i)]:
        raise fail(f"not a stream entry id: {', '.join(bad)}")


IdsArg = Annotated[list[str] | None, typer.Argument(metavar="ID...", help="dead-letter ids", show_default=False)]
AllOpt = Annotated[bool, typer.Option("--all", help="every dead letter")]
YesOpt = Annotated[bool, typer.Option("--yes", help="confirm --all")]


def print_dead_letters(
    listing: Callable[[Redis], Awaitable[list[dict[str, Any]]]], line: Callable[[dict[str, Any]], str], json: bool
) -> None:
    """Every dead letter ``listing`` finds: as JSON, or one ``line`` each and their count."""

    async def go() -> list[dict[str, Any]]:
        async with redis_client() as redis:
            return await listing(redis)

    items = run(go)
    if json:
        print_json(items)
        return
    for it in items:
        console.print(line(it), markup=False)
    console.print(f"{len(items)} dead letter(s)")


def act_on_dead_letters(
    ids: list[str] | None,
    every: bool,
    listing: Callable[[Redis], Awaitable[list[dict[str, Any]]]],
    action: Callable[[Redis, list[str]], Awaitable[dict[str, str]]],
    nothing: str,
    done: Callable[[str], bool],
) -> NoReturn:
    """``action`` on the dead letters ``ids`` (or, with ``every``, on all that
    ``listing`` finds); print each one's outcome and exit 1 unless each is
    ``done``."""
    if every and ids:
        raise fail("give IDs or --all, not both")

    async def go() -> dict[str, str]:
        async with redis_client() as redis:
            chosen = [d["id"] for d in await listing(redis)] if every else list(ids or [])
            check_ids(chosen)
            if not chosen:
                raise fail(nothing)
            outcomes = await action(redis, chosen)
            try:  # said done only once a replica has it (a failover would undo it)
                await replicated(redis, settings())
            except Problem as exc:
                unsure.append(exc.detail)
            return outcomes

    unsure: list[str] = []
    outcomes = run(go)
    for dead_id, outcome in outcomes.items():
        console.print(f"{dead_id}: {outcome}", markup=False)
    if unsure:
        # Re-running is safe: a dead letter already moved is "not found", one the new primary still holds moves.
        raise fail(f"not confirmed by a replica, run it again: {unsure[0]}", code=1)
    raise typer.Exit(0 if all(done(o) for o in outcomes.values()) else 1)
