"""What unit tests share: a real redis-server of their own, one per test module,
and a client of it; the default ticket design and a code signer, for the
renderer's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis
from ticketry_devstack.procs import redis_proc
from ticketry_renderer.render import Design

from tests.helpers import serving
from tests.unit.test_render_fidelity import Signer


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server started for this module (AOF on, as in production), stopped after it."""
    data = tmp_path_factory.mktemp("unit-redis")
    with serving(lambda port: redis_proc(data, port)) as port:
        yield f"redis://127.0.0.1:{port}/0"


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    """A client of the module's redis-server, emptied before each test. A module
    that needs more (its consumer groups) overrides it, asking for this one."""
    client = Redis.from_url(redis_url)
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(scope="module")
def design() -> Design:
    """The default design, compiled once per module (its templates cached in it)."""
    return Design.default()


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer()
