"""``just up --ha``: the several-host topology on one machine.

Three "hosts" (network namespaces on one bridge, :mod:`ticketry_devstack.hosts`):

* ``a``: Redis primary, Sentinel, api, notifier, scaler with its renderers;
* ``b``: Redis replica, Sentinel, api, notifier, scaler with its renderers;
* ``c``: Sentinel, a second Redis replica, HAProxy (the load balancer), FerretDB
  (the store), versitygw (the S3 object store: PDFs are shared by both hosts'
  renderers and apis).

Why a second replica: the api answers an order only once a replica has it
(``TICKETRY_REDIS_MIN_REPLICAS=1``). With one replica, losing the primary
promotes it and leaves no replica at all, so every order is refused (503) until
the old primary is back (measured: 503s for the whole minute after the kill);
with two, the promoted one still has one.

Replication and failover are Redis's own (``--replicaof``, ``redis-sentinel``,
quorum 2 of 3). Every service is given the sentinels, the master name and,
for a service that does not ask the sentinels, the primary's URL. Each host
has its own address, so every server listens on its usual port there
(:data:`PORTS`); the root namespace reaches every address.

For tests (the chaos round): :func:`start_ha` returns a :class:`HaStack` with
its :attr:`HaStack.hosts` (``cut``, ``restore``, ``kill_all``), its processes by
``(host, name)`` (:attr:`HaStack.procs`), the load balancer's and stats page's
URLs and the settings each service got (:meth:`HaStack.host_env`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from ticketry_devstack.env import up_env
from ticketry_devstack.haproxy import LbSettings, haproxy_binary, haproxy_proc, stats_csv
from ticketry_devstack.hosts import Host, Lan, can_make_hosts, free_subnet, netns_exists, netns_pids
from ticketry_devstack.procs import (
    Proc,
    ferretdb_proc,
    mailpit_proc,
    redis_proc,
    renderers_live,
    s3_env,
    s3_proc,
    tool,
    wait_port,
)
from ticketry_devstack.walletca import dev_wallet_env

# Every server's port on its own host's address.
PORTS: Mapping[str, int] = {
    "redis": 6379, "sentinel": 26379, "api": 8000, "notifier": 8001,
    "mongo": 27017, "s3": 9000, "lb": 8080, "stats": 8404, "smtp": 1025, "mail": 8025,
}  # fmt: skip
MASTER = "ticketry"
QUORUM = 2
# Sentinel's failover clock: a primary unanswered this long is down for a
# sentinel (then, with the quorum, the replica is promoted). Short enough for
# the first order within 15 s of losing the primary; long enough not to fail
# over on a busy minute of a 2-core machine.
DOWN_AFTER_MS = 3000
FAILOVER_TIMEOUT_MS = 10_000
NS_PREFIX = "tkha"
_NS = re.compile(rf"^{NS_PREFIX}-(\d+)-(\d+)-[abc]$")


def sentinel_proc(host: Host, data_dir: Path, primary: str, *, master: str = MASTER) -> Proc:
    """``redis-sentinel`` on ``host`` watching ``primary`` (its address;
    port :data:`PORTS` ``redis``) as ``master``; its config (Sentinel rewrites
    it) under ``data_dir``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    conf = data_dir / "sentinel.conf"
    conf.write_text(
        f'port {PORTS["sentinel"]}\nbind {host.address}\nprotected-mode no\ndaemonize no\nlogfile ""\n'
        f"dir {data_dir}\n"
        f"sentinel monitor {master} {primary} {PORTS['redis']} {QUORUM}\n"
        f"sentinel down-after-milliseconds {master} {DOWN_AFTER_MS}\n"
        f"sentinel failover-timeout {master} {FAILOVER_TIMEOUT_MS}\n"
        f"sentinel parallel-syncs {master} 1\n"
    )
    binary = shutil.which("redis-sentinel") or "/usr/bin/redis-sentinel"
    return Proc("sentinel", host.argv([binary, str(conf)]), dict(os.environ), data_dir / "sentinel.log")


def in_host(host: Host, proc: Proc) -> Proc:
    """``proc`` run inside ``host``."""
    proc.argv = host.argv(proc.argv)
    return proc


@dataclass
class HaStack:
    """The running topology: hosts, processes, addresses."""

    data_dir: Path
    env: dict[str, str]  # settings every service gets (before its host's own)
    lan: Lan | None = None
    hosts: dict[str, Host] = field(default_factory=dict)
    procs: dict[tuple[str, str], Proc] = field(default_factory=dict)
    lb_port: int = PORTS["lb"]  # TICKETRY_DEV_LB_PORT, as for `just up`

    def addr(self, host: str, what: str) -> str:
        """``address:port`` of ``what`` (a key of :data:`PORTS`) on ``host``."""
        port = self.lb_port if what == "lb" else PORTS[what]
        return f"{self.hosts[host].address}:{port}"

    @property
    def lb_url(self) -> str:
        return f"http://{self.addr('c', 'lb')}"

    @property
    def stats_url(self) -> str:
        return f"http://{self.addr('c', 'stats')}/"

    @property
    def sentinels(self) -> str:
        return ",".join(self.addr(h, "sentinel") for h in "abc")

    @property
    def primary_url(self) -> str:
        """Redis on host a, the primary at start (after a failover: ask the sentinels)."""
        return f"redis://{self.addr('a', 'redis')}/0"

    def host_env(self, host: str) -> dict[str, str]:
        """The settings of ``host``'s services: the stack's, and where they listen."""
        address = self.hosts[host].address
        return {
            **self.env,
            "TICKETRY_API_HOST": address, "TICKETRY_API_PORT": str(PORTS["api"]),
            "TICKETRY_NOTIFIER_HOST": address, "TICKETRY_NOTIFIER_PORT": str(PORTS["notifier"]),
        }  # fmt: skip

    def start(self, host: str, proc: Proc, port: int | None = None, timeout_s: float = 60) -> Proc:
        """Start ``proc`` inside ``host`` (as ``(host, proc.name)``); wait for ``port``."""
        in_host(self.hosts[host], proc)
        self.procs[(host, proc.name)] = proc.start()
        if port is not None:
            wait_port(port, timeout_s, proc.popen, host=self.hosts[host].address)
        return proc

    def service(self, host: str, name: str) -> Proc:
        # One api process per host, as before TICKETRY_API_WORKERS, unless the stack asks for more.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TICKETRY_API_WORKERS": "1", **self.host_env(host)}
        return Proc(name, [tool(f"ticketry-{name}")], env, self.data_dir / host / "logs" / f"{name}.log")

    def current_primary(self) -> str | None:
        """``address:port`` of the primary as the first answering sentinel names it."""
        for h in "abc":
            host, port = self.addr(h, "sentinel").split(":")
            client = redis.Redis(host=host, port=int(port), socket_timeout=2, socket_connect_timeout=2)
            try:
                named = client.execute_command("SENTINEL", "get-master-addr-by-name", MASTER)  # type: ignore[no-untyped-call]
            except redis.RedisError:
                continue
            finally:
                client.close()
            if named:
                return f"{named[0].decode()}:{int(named[1])}"
        return None

    def restart_redis(self, host: str) -> Proc:
        """Start ``host``'s Redis again (after a kill) as a replica of the
        primary the sentinels name now: the old primary rejoining."""
        primary = self.current_primary()
        if primary is None:
            raise RuntimeError("no sentinel names a primary")
        address, port = primary.rsplit(":", 1)
        bind = (self.hosts[host].address,)
        proc = redis_proc(
            self.data_dir / host / "redis", PORTS["redis"], bind=bind, extra=("--replicaof", address, port)
        )
        return self.start(host, proc, PORTS["redis"])

    def stop(self) -> None:
        """The load balancer and services first (gracefully), then the stores,
        then the hosts themselves (anything left in them is killed)."""
        order = ("haproxy", "scaler", "api", "notifier", "sentinel", "redis", "ferretdb", "s3")
        for name in order:
            for (_, n), proc in list(self.procs.items()):
                if n == name:
                    proc.stop()
        for proc in self.procs.values():
            proc.stop()
        if self.lan is not None:
            self.lan.destroy()


def clean_stale() -> list[str]:
    """Remove the hosts (and bridges) of ``--ha`` stacks whose process is gone
    (killed with SIGKILL, say): their namespace names carry its pid."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    removed = []
    for word in out.split():
        m = _NS.match(word)
        if m is None or Path(f"/proc/{m.group(1)}").exists():
            continue
        for pid in netns_pids(word):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        subprocess.run(["ip", "netns", "del", word], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", f"tkt{m.group(2)}br"], capture_output=True, check=False)
        removed.append(word)
    return removed


def ha_env(stack: HaStack, environ: Mapping[str, str]) -> dict[str, str]:
    """What every service of the topology gets: ``just up``'s settings (the
    caller's ``TICKETRY_*`` win over its defaults), then the topology's own
    addresses, which are not the caller's to choose."""
    c = stack.hosts["c"].address
    lb = stack.lb_url
    defaults = {
        "TICKETRY_REDIS_MIN_REPLICAS": "1",
        "TICKETRY_KEYS_DIR": str(stack.data_dir / "keys"),
        "TICKETRY_STORAGE_DIR": str(stack.data_dir / "tickets"),
        # mailpit on c, as `just up` runs it (start_ha drops this when it is not built).
        "TICKETRY_SMTP_URL": f"smtp://{stack.addr('c', 'smtp')}",
    }
    # Throw-away wallet credentials as for `just up`, unless the caller names its own (all of them).
    if not any(k.startswith("TICKETRY_WALLET_") for k in environ):
        defaults |= dev_wallet_env(stack.data_dir / "wallet")
    return {
        **defaults,
        **up_env(environ),
        "TICKETRY_REDIS_URL": stack.primary_url,
        "TICKETRY_REDIS_SENTINELS": stack.sentinels,
        "TICKETRY_REDIS_SENTINEL_MASTER": MASTER,
        "TICKETRY_MONGO_URL": f"mongodb://{stack.addr('c', 'mongo')}/ticketry",
        **s3_env(f"http://{stack.addr('c', 's3')}", environ.get("TICKETRY_S3_BUCKET", "ticketry-pdfs")),
        "TICKETRY_API_PUBLIC_URL": lb,
        "TICKETRY_NOTIFIER_PUBLIC_URL": "ws://" + lb.removeprefix("http://"),
        # The apis take the client's address from X-Forwarded-For of the load balancer only.
        "FORWARDED_ALLOW_IPS": f"127.0.0.1,{c}",
    }


def wait_for(what: str, ok: Callable[[], bool], timeout_s: float, cancelled: Callable[[], bool]) -> bool:
    """Poll ``ok`` until true (True), ``cancelled`` (False) or ``timeout_s`` (TimeoutError)."""
    deadline = time.monotonic() + timeout_s
    while not cancelled():
        with contextlib.suppress(Exception):
            if ok():
                return True
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout_s:g}s")
        time.sleep(0.1)
    return False


def _replica_in_sync(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        info = client.info("replication")
        replicas = [info.get(f"slave{i}", {}) for i in range(int(info.get("connected_slaves", 0)))]
        return info.get("role") == "master" and sum(1 for r in replicas if r.get("state") == "online") >= 2
    finally:
        client.close()


def _sentinels_agree(stack: HaStack, primary: str) -> bool:
    for h in "abc":
        host, port = stack.addr(h, "sentinel").split(":")
        client = redis.Redis(host=host, port=int(port), socket_timeout=2, socket_connect_timeout=2)
        try:
            named = client.execute_command("SENTINEL", "get-master-addr-by-name", MASTER)  # type: ignore[no-untyped-call]
            known = client.execute_command("SENTINEL", "sentinels", MASTER)  # type: ignore[no-untyped-call]
        finally:
            client.close()
        if not named or named[0].decode() != primary or len(known) < 2:
            return False
    return True


def _lb_ready(stack: HaStack) -> bool:
    """Both apis and both notifiers UP in HAProxy's eyes."""
    rows = stats_csv(httpx.get(stack.stats_url + ";csv", timeout=5).text)
    up = {r["svname"] for r in rows if r["status"] == "UP"}
    return {"api-0", "api-1", "notifier-0", "notifier-1"} <= up


def whole(stack: HaStack) -> bool:
    """The set is whole again (after a failover and the old primary's
    restart): the primary the sentinels name has both replicas online, every
    sentinel names it, and HAProxy sees every api and notifier ready."""
    primary = stack.current_primary()
    if primary is None or not _replica_in_sync(f"redis://{primary}/0"):
        return False
    return _sentinels_agree(stack, primary.rsplit(":", 1)[0]) and _lb_ready(stack)


def start_ha(
    data_dir: Path,
    environ: Mapping[str, str],
    *,
    renderers: int | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    log: Callable[[str], None] = lambda _: None,
) -> HaStack:
    """Make the hosts and start everything; returns once the load balancer
    sees every api and notifier ready and (unless the floor is 0) each
    scaler has a renderer live (``renderers`` overrides that count). On
    failure or ``cancelled`` everything started is stopped again and the
    error raised (``InterruptedError`` when cancelled)."""
    why = can_make_hosts()
    if why is not None:
        raise RuntimeError(f"--ha {why}")
    if haproxy_binary() is None:
        raise RuntimeError("--ha needs haproxy (infra/bootstrap.sh installs it)")
    clean_stale()
    stack = HaStack(data_dir, env={}, lb_port=int(environ.get("TICKETRY_DEV_LB_PORT", PORTS["lb"])))
    try:
        # Two topologies started at once (parallel test workers) must not pick one subnet:
        # the pick and the bridge that claims it happen under one machine-wide lock.
        with open(Path(tempfile.gettempdir()) / "ticketry-subnets.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            subnet = free_subnet()
            stack.lan = Lan(subnet).create()
        for h in "abc":
            stack.hosts[h] = stack.lan.host(f"{NS_PREFIX}-{os.getpid()}-{subnet}-{h}")
        stack.env = ha_env(stack, environ)
        a, b, c = (stack.hosts[h] for h in "abc")
        log(f"hosts a {a.address}, b {b.address}, c {c.address} (bridge {stack.lan.bridge}); starting …")

        # The stores on c, Redis on a (primary) and b (its replica), a sentinel on each.
        stack.start("c", ferretdb_proc(data_dir / "c" / "ferretdb", PORTS["mongo"], c.address), PORTS["mongo"])
        s3 = s3_proc(data_dir / "c" / "s3", PORTS["s3"], bind=(c.address,))
        stack.start("c", s3, PORTS["s3"])
        if not environ.get("TICKETRY_SMTP_URL"):
            mailpit = mailpit_proc(data_dir / "c" / "mail", PORTS["smtp"], PORTS["mail"], host=c.address)
            if mailpit is None:
                log("no mailpit built (infra/bootstrap.sh builds it): tickets are not mailed")
                stack.env.pop("TICKETRY_SMTP_URL")
            else:
                stack.start("c", mailpit, PORTS["smtp"])
        stack.start("a", redis_proc(data_dir / "a" / "redis", PORTS["redis"], bind=(a.address,)), PORTS["redis"])
        follow = ("--replicaof", a.address, str(PORTS["redis"]))
        for h in "bc":
            replica = redis_proc(data_dir / h / "redis", PORTS["redis"], bind=(stack.hosts[h].address,), extra=follow)
            stack.start(h, replica, PORTS["redis"])
        for h in "abc":
            stack.start(h, sentinel_proc(stack.hosts[h], data_dir / h / "sentinel", a.address), PORTS["sentinel"])
        if not wait_for("the replicas in sync", lambda: _replica_in_sync(stack.primary_url), 60, cancelled):
            raise InterruptedError
        if not wait_for("the sentinels agreeing", lambda: _sentinels_agree(stack, a.address), 60, cancelled):
            raise InterruptedError

        # The apis (a first: it makes the signing keys the others read), notifiers, load balancer.
        for h in "ab":
            stack.start(h, stack.service(h, "api"), PORTS["api"], 90)
        for h in "ab":
            stack.start(h, stack.service(h, "notifier"), PORTS["notifier"], 90)
        lb_port = stack.lb_port
        cfg = LbSettings(
            port=lb_port, host=c.address, apis=[stack.addr(h, "api") for h in "ab"],
            notifiers=[stack.addr(h, "notifier") for h in "ab"], stats_port=PORTS["stats"], stats_host=c.address,
        )  # fmt: skip
        stack.start("c", haproxy_proc(data_dir / "c" / "haproxy", cfg), lb_port)
        if not wait_for("apis and notifiers ready behind the load balancer", lambda: _lb_ready(stack), 90, cancelled):
            raise InterruptedError

        # A scaler with its renderers on a and b.
        for h in "ab":
            stack.start(h, stack.service(h, "scaler"))
        floor = int(stack.env.get("TICKETRY_RENDERERS_MIN", "1") or 1)
        want = 2 * min(floor, 1) if renderers is None else renderers
        if want > 0:
            log(f"waiting for {want} renderers …")

            def live() -> bool:
                for h in "ab":
                    proc = stack.procs[(h, "scaler")]
                    if not proc.alive():
                        raise RuntimeError(f"scaler on {h} exited; see {proc.log_path}")
                return renderers_live(stack.primary_url) >= want

            deadline = time.monotonic() + 240
            while not live():
                if cancelled():
                    raise InterruptedError
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no {want} live renderers after 240s; see {data_dir}/*/logs")
                time.sleep(0.1)
    except BaseException:
        stack.stop()
        raise
    return stack


def gone(stack: HaStack) -> list[str]:
    """What of ``stack`` is still there after :meth:`HaStack.stop` (empty: nothing)."""
    left = [f"{h}/{n} pid {p.pid}" for (h, n), p in stack.procs.items() if p.alive()]
    left += [f"namespace {host.ns}" for host in stack.hosts.values() if netns_exists(host.ns)]
    if stack.lan is not None and Path(f"/sys/class/net/{stack.lan.bridge}").exists():
        left.append(f"bridge {stack.lan.bridge}")
    return left
