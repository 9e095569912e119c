"""What unit tests share: a real redis-server of their own, one per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ticketry_devstack.procs import free_port, redis_proc, wait_port


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server started for this module (AOF on, as in production), stopped after it."""
    port = free_port()
    proc = redis_proc(tmp_path_factory.mktemp("unit-redis"), port).start()
    try:
        wait_port(port, 60, proc.popen)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.stop()
