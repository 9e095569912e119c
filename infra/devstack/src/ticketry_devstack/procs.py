"""Start, watch and stop the local stack's processes (Redis, FerretDB, services).

Used by ``just up`` and by the test suite, so both run the same real servers the
same way. No Docker: each part is a plain child process on loopback.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis
from ticketry import streams

REPO = Path(__file__).resolve().parents[4]
BIN = REPO / ".bin"


# Ports for our servers come from below the kernel's ephemeral range: a port
# the kernel handed out with bind(0) can be taken as the local port of any
# outgoing connection before our server binds it (EADDRINUSE, seen under
# concurrent suites); one below the range is only ever taken by a listener.
PORTS_FROM = 20_000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now, outside the ephemeral range."""
    rng = random.SystemRandom()
    top = _ephemeral_start()
    for _ in range(200):
        port = rng.randrange(PORTS_FROM, top) if top > PORTS_FROM else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            chosen: int = s.getsockname()[1]
            return chosen
    raise RuntimeError("no free port on 127.0.0.1")


def wait_port(
    port: int, timeout_s: float = 30.0, proc: subprocess.Popen[bytes] | None = None, host: str = "127.0.0.1"
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {host}:{port}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout_s}s")


def renderers_live(redis_url: str) -> int:
    """Renderers with a heartbeat in Redis (each key expires soon after its
    renderer dies: ``streams.HEARTBEAT_TTL_S``)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        return sum(1 for _ in client.scan_iter(match=streams.renderer_heartbeat("*"), count=500))
    finally:
        client.close()


@dataclass
class Proc:
    """One child process with its log file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.popen = subprocess.Popen(
            self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.popen is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, sig)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL the whole process group."""
        if self.popen is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            return self.popen.wait(5)

    def kill(self) -> None:
        if self.popen is not None and self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)


def tool(name: str) -> str:
    """A console script of the workspace venv (or PATH)."""
    venv = Path(sys.executable).parent / name
    if venv.exists():
        return str(venv)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found; run `uv sync` (infra/bootstrap.sh)")
    return found


def redis_proc(
    data_dir: Path,
    port: int,
    *,
    fsync: str = "everysec",
    bind: tuple[str, ...] = ("127.0.0.1",),
    extra: Sequence[str] = (),
) -> Proc:
    """Redis with AOF on (``appendfsync`` = ``fsync``), data under ``data_dir``,
    listening on ``bind`` only (loopback-range addresses; see the multi-host test);
    ``extra`` arguments last (``--replicaof host port`` for a replica)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        shutil.which("redis-server") or "/usr/bin/redis-server",
        "--port", str(port), "--bind", *bind, "--protected-mode", "no",
        "--dir", str(data_dir), "--appendonly", "yes", "--appendfsync", fsync,
        "--save", "", "--daemonize", "no", "--logfile", "",
        # Never evict: streams and pending lists are the source of truth.
        "--maxmemory-policy", "noeviction",
        *extra,
    ]  # fmt: skip
    return Proc("redis", argv, dict(os.environ), data_dir / "redis.log")


def ferretdb_proc(data_dir: Path, port: int, host: str = "127.0.0.1") -> Proc:
    binary = BIN / "ferretdb"
    if not binary.exists():
        raise FileNotFoundError(f"{binary} missing; run infra/bootstrap.sh")
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [str(binary), "-listen", f"{host}:{port}", "-dir", str(data_dir)]
    return Proc("ferretdb", argv, dict(os.environ), data_dir / "ferretdb.log")


# The dev/test S3 server's root credentials (loopback only, like the dev JWT secret).
S3_ACCESS_KEY = "ticketry-dev"
S3_SECRET_KEY = "ticketry-dev-s3-secret"  # noqa: S105 - a dev credential, loopback only


def s3_proc(data_dir: Path, port: int, *, bind: tuple[str, ...] = ("127.0.0.1",)) -> Proc:
    """An S3-compatible server (versitygw, posix backend: one directory per
    bucket under ``data_dir/objects``) on ``port`` of each address in ``bind``,
    with root credentials :data:`S3_ACCESS_KEY` / :data:`S3_SECRET_KEY`
    (passed in its environment, not on its command line)."""
    binary = BIN / "versitygw"
    if not binary.exists():
        raise FileNotFoundError(f"{binary} missing; run infra/bootstrap.sh")
    (data_dir / "objects").mkdir(parents=True, exist_ok=True)
    argv = [str(binary), *(a for host in bind for a in ("--port", f"{host}:{port}")), "--quiet",
            "posix", str(data_dir / "objects")]  # fmt: skip
    env = {**os.environ, "ROOT_ACCESS_KEY_ID": S3_ACCESS_KEY, "ROOT_SECRET_ACCESS_KEY": S3_SECRET_KEY}
    return Proc("s3", argv, env, data_dir / "s3.log")


def mailpit_proc(data_dir: Path, smtp_port: int, ui_port: int, host: str = "127.0.0.1") -> Proc | None:
    """mailpit (infra/bootstrap.sh builds it): an SMTP server on ``host:smtp_port``
    and its web inbox on ``host:ui_port``, keeping mail in ``data_dir``; None
    when it is not built."""
    binary = BIN / "mailpit"
    if not binary.exists():
        return None
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        str(binary), "--smtp", f"{host}:{smtp_port}", "--listen", f"{host}:{ui_port}",
        "--database", str(data_dir / "mailpit.db"), "--smtp-auth-accept-any", "--smtp-auth-allow-insecure",
    ]  # fmt: skip
    return Proc("mailpit", argv, dict(os.environ), data_dir / "mailpit.log")


def s3_env(endpoint_url: str, bucket: str = "ticketry-pdfs") -> dict[str, str]:
    """The settings that point a service at the dev S3 server."""
    return {
        "TICKETRY_STORAGE_BACKEND": "s3", "TICKETRY_S3_ENDPOINT_URL": endpoint_url, "TICKETRY_S3_BUCKET": bucket,
        "TICKETRY_S3_ACCESS_KEY_ID": S3_ACCESS_KEY, "TICKETRY_S3_SECRET_ACCESS_KEY": S3_SECRET_KEY,
    }  # fmt: skip


@dataclass
class Stack:
    """The whole local stack under one data directory."""

    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)
    renderers: list[Proc] = field(default_factory=list)
    api_port: int = 0
    notifier_port: int = 0
    redis_port: int = 0
    mongo_port: int = 0
    mongo_host: str = "127.0.0.1"  # FerretDB listens on this one address
    redis_bind: tuple[str, ...] = ("127.0.0.1",)
    s3_port: int = 0
    s3_bind: tuple[str, ...] = ("127.0.0.1",)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def notifier_url(self) -> str:
        return f"ws://127.0.0.1:{self.notifier_port}"

    def start_infra(self, redis_url: str | None = None, mongo_url: str | None = None) -> None:
        if redis_url is None:
            self.redis_port = self.redis_port or free_port()
            p = self.procs["redis"] = redis_proc(self.data_dir / "redis", self.redis_port, bind=self.redis_bind).start()
            wait_port(self.redis_port, proc=p.popen)
            redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        if mongo_url is None:
            self.mongo_port = self.mongo_port or free_port()
            p = self.procs["ferretdb"] = ferretdb_proc(self.data_dir / "ferretdb", self.mongo_port, self.mongo_host)
            p.start()
            wait_port(self.mongo_port, proc=p.popen, host=self.mongo_host)
            mongo_url = f"mongodb://{self.mongo_host}:{self.mongo_port}/ticketry"
        if self.env.get("TICKETRY_STORAGE_BACKEND") == "s3" and "TICKETRY_S3_ENDPOINT_URL" not in self.env:
            # S3 asked for and none named: our own server (s3_proc), like Redis and FerretDB.
            self.s3_port = self.s3_port or free_port()
            p = self.procs["s3"] = s3_proc(self.data_dir / "s3", self.s3_port, bind=self.s3_bind).start()
            wait_port(self.s3_port, proc=p.popen)
            self.env.update(
                s3_env(f"http://127.0.0.1:{self.s3_port}", self.env.get("TICKETRY_S3_BUCKET", "ticketry-pdfs"))
            )
        self.env.setdefault("TICKETRY_REDIS_URL", redis_url)
        self.env.setdefault("TICKETRY_MONGO_URL", mongo_url)
        self.env.setdefault("TICKETRY_STORAGE_DIR", str(self.data_dir / "tickets"))
        self.env.setdefault("TICKETRY_KEYS_DIR", str(self.data_dir / "keys"))
        self.api_port = self.api_port or free_port()
        self.notifier_port = self.notifier_port or free_port()
        self.env["TICKETRY_API_PORT"] = str(self.api_port)
        self.env["TICKETRY_NOTIFIER_PORT"] = str(self.notifier_port)
        self.env.setdefault("TICKETRY_NOTIFIER_PUBLIC_URL", self.notifier_url)

    def service_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {**os.environ, **self.env, **(extra or {})}
        env.setdefault("PYTHONUNBUFFERED", "1")
        # One api process (the tests' load and their api kills count on it) unless asked for more.
        env.setdefault("TICKETRY_API_WORKERS", "1")
        return env

    def start_service(self, name: str, extra: Mapping[str, str] | None = None) -> Proc:
        proc = Proc(name, [tool(f"ticketry-{name}")], self.service_env(extra), self.data_dir / "logs" / f"{name}.log")
        self.procs[name] = proc.start()
        return proc

    def start_api(self, extra: Mapping[str, str] | None = None) -> Proc:
        proc = self.start_service("api", extra)
        wait_port(self.api_port, 60, proc.popen)
        return proc

    def start_notifier(self, extra: Mapping[str, str] | None = None) -> Proc:
        proc = self.start_service("notifier", extra)
        wait_port(self.notifier_port, 60, proc.popen)
        return proc

    def wait_renderers(
        self,
        n: int = 1,
        timeout_s: float = 180.0,
        *,
        starter: Proc | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Wait until ``n`` renderers have a heartbeat (``just up`` says "up" only
        then). Raises if ``starter`` (the scaler) exits first or ``timeout_s``
        passes (a bound on a hang, far above a start); False if ``cancelled``."""
        deadline = time.monotonic() + timeout_s
        while not cancelled():
            if starter is not None and not starter.alive():
                code = starter.popen.returncode if starter.popen else "?"
                raise RuntimeError(f"{starter.name} exited ({code}) before a renderer was live; see {starter.log_path}")
            with contextlib.suppress(redis.RedisError):
                if renderers_live(self.env["TICKETRY_REDIS_URL"]) >= n:
                    return True
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {n} live renderer(s) after {timeout_s:g}s; see {self.data_dir / 'logs'}")
            time.sleep(0.05)
        return False

    def start_renderer(self, extra: Mapping[str, str] | None = None, *, netns: str | None = None) -> Proc:
        """One more renderer process; inside network namespace ``netns`` if given
        (a separate "host" for the multi-host test)."""
        n = len(self.renderers)
        name = f"renderer-{n}"
        host = netns or socket.gethostname()
        env = self.service_env({"TICKETRY_RENDERER_NAME": f"{host}-t{os.getpid()}-{n}", **(extra or {})})
        argv = [tool("ticketry-renderer")]
        if netns is not None:
            argv = ["ip", "netns", "exec", netns, *argv]
        proc = Proc(name, argv, env, self.data_dir / "logs" / f"{name}.log").start()
        self.renderers.append(proc)
        return proc

    def stop(self) -> None:
        """Stop the load balancer and the services first (graceful), then the stores."""
        if "haproxy" in self.procs:
            self.procs["haproxy"].stop()
        for r in self.renderers:
            r.signal(signal.SIGTERM)
        for name in ("scaler", "api", "notifier"):
            if name in self.procs:
                self.procs[name].stop()
        for r in self.renderers:
            r.stop()
        for name in ("ferretdb", "redis", "s3", "mailpit"):
            if name in self.procs:
                self.procs[name].stop()


def start_stack(
    root: Path,
    renderers: int = 2,
    extra_env: Mapping[str, str] | None = None,
    *,
    redis_url: str | None = None,
    mongo_url: str | None = None,
) -> Stack:
    """Infra (unless URLs are given) + api + notifier + ``renderers`` renderer
    processes under ``root``, in dev mode. The tests and the benchmarks use it."""
    stack = Stack(root, env={"TICKETRY_DEV_MODE": "1", "TICKETRY_LOG_LEVEL": "WARNING", **(extra_env or {})})
    try:
        stack.start_infra(redis_url, mongo_url)
        stack.start_api()
        stack.start_notifier()
        for _ in range(renderers):
            stack.start_renderer()
    except BaseException:
        stack.stop()
        raise
    return stack


@contextlib.contextmanager
def running(stack: Stack) -> Iterator[Stack]:
    try:
        yield stack
    finally:
        stack.stop()
