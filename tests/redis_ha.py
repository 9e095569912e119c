"""A real Redis primary, one replica and three Sentinels on loopback, for the
tests that kill the primary (and the later whole-topology chaos tests).

Everything is the Debian binaries: ``redis-server`` twice (the second one
``--replicaof`` the first) and ``redis-sentinel`` three times, each on a free
port, under one temporary folder, quorum 2, ``down-after-milliseconds``
:data:`DOWN_AFTER_MS`: a primary killed with SIGKILL is replaced by its
replica within a few seconds, by Redis's own failover.

Use::

    with redis_ha(tmp_path) as ha:               # started, replica in sync
        env = ha.env()                           # TICKETRY_REDIS_URL/_SENTINELS/_SENTINEL_MASTER
        old = await ha.kill_primary()            # SIGKILL; which node it was
        new = await ha.wait_promoted(old)        # the sentinels agree on another primary
        ha.restart(old)                          # same config and data
        await ha.wait_replica_of(old, new)       # it came back as the new primary's replica

Nodes are numbered 0 (the first primary) and 1 (its replica); which one is
primary now is :meth:`RedisHA.primary_node`. Every wait is for an event,
with a deadline that only bounds a hang.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis
import redis.asyncio
from ticketry_devstack.procs import Proc, free_port, redis_proc, wait_port

from tests.helpers import eventually

MASTER = "ticketry"
QUORUM = 2
# A primary silent this long is subjectively down for a sentinel; with the
# quorum agreeing, objectively down, and the failover starts.
DOWN_AFTER_MS = 1000
# Bounds one failover attempt (and the wait before a sentinel retries one).
FAILOVER_TIMEOUT_MS = 5000


def _sentinel_conf(port: int, primary_port: int, data: Path) -> str:
    return "\n".join([
        f"port {port}", "bind 127.0.0.1", "protected-mode no", f"dir {data}", "daemonize no", 'logfile ""',
        f"sentinel monitor {MASTER} 127.0.0.1 {primary_port} {QUORUM}",
        f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}",
        f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}",
        f"sentinel parallel-syncs {MASTER} 1",
        "",
    ])  # fmt: skip


@dataclass
class RedisHA:
    """The running set; see the module docstring."""

    root: Path
    node_ports: list[int] = field(default_factory=list)
    nodes: list[Proc] = field(default_factory=list)
    sentinel_ports: list[int] = field(default_factory=list)
    sentinels: list[Proc] = field(default_factory=list)

    # -- start and stop --------------------------------------------------------

    def start(self) -> RedisHA:
        self.node_ports = [free_port(), free_port()]
        for n, port in enumerate(self.node_ports):
            proc = redis_proc(self.root / f"redis-{n}", port)
            proc.name = f"redis-{n}"
            if n > 0:
                proc.argv += ["--replicaof", "127.0.0.1", str(self.node_ports[0])]
            self.nodes.append(proc.start())
            wait_port(port, proc=proc.popen)
        binary = shutil.which("redis-sentinel")
        if binary is None:
            raise FileNotFoundError("redis-sentinel missing; run infra/bootstrap.sh")
        for n in range(3):
            port = free_port()
            data = self.root / f"sentinel-{n}"
            data.mkdir(parents=True, exist_ok=True)
            conf = data / "sentinel.conf"  # rewritten by the sentinel itself (what it learns)
            conf.write_text(_sentinel_conf(port, self.node_ports[0], data))
            proc = Proc(f"sentinel-{n}", [binary, str(conf)], dict(os.environ), data / "sentinel.log").start()
            self.sentinel_ports.append(port)
            self.sentinels.append(proc)
            wait_port(port, proc=proc.popen)
        self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Wait until the replica is in sync and every sentinel knows it and
        the two other sentinels (before that, a killed primary could not be
        replaced: a sentinel learns replicas from the primary's INFO and peers
        from their hellos)."""
        deadline = time.monotonic() + timeout_s
        while not self._ready():
            assert time.monotonic() < deadline, f"redis set not ready after {timeout_s}s; see {self.root}"
            time.sleep(0.1)

    def _ready(self) -> bool:
        try:
            primaries = set()
            for port in self.sentinel_ports:
                with redis.Redis(port=port, socket_timeout=2, decode_responses=True) as sentinel:
                    state = sentinel.sentinel_master(MASTER)
                if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < 2 or state["is_sdown"]:
                    return False
                primaries.add(int(state["port"]))
            if len(primaries) != 1:
                return False
            (replica_port,) = set(self.node_ports) - primaries
            with redis.Redis(port=replica_port, socket_timeout=2, decode_responses=True) as replica:
                info = replica.info("replication")
            return info.get("master_link_status") == "up" and int(info["master_port"]) in primaries
        except (redis.RedisError, ValueError):
            return False

    def stop(self) -> None:
        for proc in (*self.sentinels, *self.nodes):
            proc.stop()

    def restart(self, node: int) -> None:
        """Start ``node`` again, same command line and data (a restarted old
        primary comes up as a primary; the sentinels turn it into a replica)."""
        proc = self.nodes[node]
        assert not proc.alive(), f"redis-{node} is running"
        proc.start()
        wait_port(self.node_ports[node], proc=proc.popen)

    # -- what services are given ------------------------------------------------

    @property
    def sentinels_setting(self) -> str:
        """``TICKETRY_REDIS_SENTINELS``."""
        return ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)

    def env(self, db: int = 0) -> dict[str, str]:
        """The settings that point a service at this set through Sentinel (the
        URL's host is not used: only its database)."""
        return {
            "TICKETRY_REDIS_URL": f"redis://127.0.0.1:{self.node_ports[0]}/{db}",
            "TICKETRY_REDIS_SENTINELS": self.sentinels_setting,
            "TICKETRY_REDIS_SENTINEL_MASTER": MASTER,
        }

    def node_url(self, node: int, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.node_ports[node]}/{db}"

    # -- what the set says --------------------------------------------------------

    async def _ask(self, port: int, *command: str | int) -> object:
        client = redis.asyncio.Redis(port=port, socket_timeout=2, socket_connect_timeout=2, retry_on_error=[])
        try:
            return await client.execute_command(*command)
        finally:
            await client.aclose()

    async def named_primaries(self) -> list[int | None]:
        """The primary's port as each sentinel names it (None: no answer)."""
        named: list[int | None] = []
        for port in self.sentinel_ports:
            try:
                addr = await self._ask(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            except redis.RedisError:
                named.append(None)
                continue
            named.append(int(addr[1]) if isinstance(addr, list | tuple) and addr else None)
        return named

    async def role(self, node: int) -> list[object] | None:
        """``ROLE`` of ``node`` (None: it does not answer)."""
        try:
            reply = await self._ask(self.node_ports[node], "ROLE")
        except redis.RedisError:
            return None
        return list(reply) if isinstance(reply, list | tuple) else None

    async def primary_node(self) -> int:
        """The node every live sentinel names primary (and which says so itself)."""
        named = {p for p in await self.named_primaries() if p is not None}
        assert len(named) == 1, f"sentinels disagree or none answers: {named}"
        node = self.node_ports.index(named.pop())
        role = await self.role(node)
        assert role is not None and role[0] == b"master", f"redis-{node} is named primary but says {role}"
        return node

    # -- failures ---------------------------------------------------------------

    async def kill_primary(self) -> int:
        """SIGKILL the current primary; the node it was."""
        node = await self.primary_node()
        self.kill(node)
        return node

    def kill(self, node: int) -> None:
        proc = self.nodes[node]
        assert proc.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait(10)

    async def wait_promoted(self, old: int, timeout_s: float = 120.0) -> int:
        """Wait until every live sentinel names a node other than ``old``
        primary and that node says it is one; that node."""

        async def promoted() -> tuple[int] | None:
            named = {p for p in await self.named_primaries() if p is not None}
            if len(named) != 1 or (port := next(iter(named))) == self.node_ports[old]:
                return None
            node = self.node_ports.index(port)
            role = await self.role(node)
            return (node,) if role is not None and role[0] == b"master" else None

        (node,) = await eventually(promoted, f"a replica of redis-{old} promoted", timeout_s)
        return node

    async def wait_replica_of(self, node: int, primary: int, timeout_s: float = 120.0) -> None:
        """Wait until ``node`` replicates ``primary`` with its link up."""

        async def following() -> bool:
            role = await self.role(node)
            return (
                role is not None
                and role[0] == b"slave"
                and int(str(role[2])) == self.node_ports[primary]
                and role[3] == b"connected"
            )

        await eventually(following, f"redis-{node} a replica of redis-{primary}", timeout_s)


@contextlib.contextmanager
def redis_ha(root: Path) -> Iterator[RedisHA]:
    """A started :class:`RedisHA` under ``root`` (its replica in sync), stopped after."""
    root.mkdir(parents=True, exist_ok=True)
    ha = RedisHA(root)
    try:
        ha.start()
        yield ha
    finally:
        ha.stop()
