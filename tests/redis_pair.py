"""A real Redis primary and one real replica (``--replicaof``) on free loopback
ports, for tests of what waits for a replica (no Sentinel: nothing fails over).

``with redis_pair(root) as pair:`` gives the primary's URL once the replica is
in sync; ``pair.frozen()`` stops the replica (SIGSTOP: its link stays open, it
acknowledges nothing, as a stalled machine) and resumes it on leaving.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
from ticketry_devstack.procs import Proc, free_port, redis_proc, wait_port

# A bound on a hang (a replica syncs an empty primary in well under a second).
SYNC_TIMEOUT_S = 60.0


@dataclass
class RedisPair:
    primary: Proc
    replica: Proc
    primary_port: int
    replica_port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.primary_port}/0"

    def in_sync(self) -> bool:
        """The primary sees its replica online and caught up with its offset."""
        client = redis.Redis(port=self.primary_port, socket_timeout=5)
        try:
            info = client.info("replication")
        finally:
            client.close()
        replica = info.get("slave0")
        return (
            isinstance(replica, dict)
            and replica.get("state") == "online"
            and int(replica.get("offset", -1)) == int(info["master_repl_offset"])
        )

    def wait_in_sync(self, timeout_s: float = SYNC_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.in_sync():
            assert time.monotonic() < deadline, "the replica never caught up with the primary"
            time.sleep(0.05)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The replica stopped (SIGSTOP) inside the block, resumed (SIGCONT) after."""
        self.replica.signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.replica.signal(signal.SIGCONT)


@contextlib.contextmanager
def redis_pair(root: Path) -> Iterator[RedisPair]:
    """A primary and its replica under ``root``, stopped on leaving."""
    pport, rport = free_port(), free_port()
    primary = redis_proc(root / "primary", pport).start()
    replica: Proc | None = None
    try:
        wait_port(pport, proc=primary.popen)
        base = redis_proc(root / "replica", rport)
        replica = Proc(
            "redis-replica", [*base.argv, "--replicaof", "127.0.0.1", str(pport)], base.env, base.log_path
        ).start()
        wait_port(rport, proc=replica.popen)
        pair = RedisPair(primary, replica, pport, rport)
        pair.wait_in_sync()
        yield pair
    finally:
        if replica is not None:
            replica.signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            replica.stop()
        primary.stop()
