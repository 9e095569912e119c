"""Scaler parts that talk to Redis, against a real redis-server started here.

Covers observation (XINFO GROUPS incl. NULL lag, heartbeats), the leader lock with
fencing, the controller's decisions, and the ``ticketry-scaler`` process itself.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import ensure_groups
from ticketry.events import RenderRequest
from ticketry.ids import new_id, ticket_ids
from ticketry_scaler import observe
from ticketry_scaler.backends.dryrun import DryRunBackend
from ticketry_scaler.controller import Controller
from ticketry_scaler.leader import Leader
from ticketry_scaler.policy import PolicyConfig

from tests.helpers import eventually

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    data = tmp_path_factory.mktemp("scaler-redis")
    proc = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "redis did not start"
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
async def redis(redis_server: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server)
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()


async def _until(cond: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    """:func:`tests.helpers.eventually` on ``cond`` (a bound on a hang, far above need)."""
    await eventually(cond, getattr(cond, "__name__", "condition"), timeout, interval_s=0.1)


async def _refreshed(redis: Redis, key: str, times: int, timeout: float = 60.0) -> None:
    """Wait until ``key``'s TTL has gone back up ``times`` times: each is one
    refresh by its owner (a heartbeat, a scaler tick renewing its lock). A TTL
    only ever falls otherwise, so this never counts more than happened."""
    deadline = time.monotonic() + timeout
    seen, last = 0, await redis.pttl(key)
    while seen < times:
        assert time.monotonic() < deadline, f"{key} refreshed {seen} times, not {times}"
        await asyncio.sleep(0.02)
        now = await redis.pttl(key)
        seen, last = seen + (now > last), now


# -- observe -------------------------------------------------------------------------


async def test_backlogs_of_missing_streams_are_empty(redis: Redis) -> None:
    lanes = await observe.backlogs(redis)
    assert [(lane.stream, lane.lag, lane.pending) for lane in lanes] == [
        (streams.RENDER_VIP, 0, 0),
        (streams.RENDER_STD, 0, 0),
    ]


async def test_backlog_without_group_is_all_lag(redis: Redis) -> None:
    for i in range(3):
        await redis.xadd(streams.RENDER_STD, {"n": i})
    (lane,) = await observe.backlogs(redis, [streams.RENDER_STD])
    assert (lane.lag, lane.pending) == (3, 0)


async def test_backlog_lag_and_pending(redis: Redis) -> None:
    await ensure_groups(redis)
    for i in range(10):
        await redis.xadd(streams.RENDER_STD, {"n": i})
    await redis.xadd(streams.RENDER_VIP, {"n": 0})
    await redis.xreadgroup(streams.RENDERERS_GROUP, "c1", {streams.RENDER_STD: ">"}, count=4)
    vip, std = await observe.backlogs(redis)
    assert (vip.lag, vip.pending) == (1, 0)
    assert (std.lag, std.pending, std.undelivered) == (6, 4, None)


async def test_null_lag_is_counted_past_the_group_position(redis: Redis) -> None:
    await ensure_groups(redis)
    ids = [await redis.xadd(streams.RENDER_STD, {"n": i}) for i in range(10)]
    await redis.xreadgroup(streams.RENDERERS_GROUP, "c1", {streams.RENDER_STD: ">"}, count=4)
    # Given an entry deleted after the group's position, Redis reports lag as NULL.
    await redis.xdel(streams.RENDER_STD, ids[7])
    (std,) = await observe.backlogs(redis, [streams.RENDER_STD])
    assert std.lag is None
    assert (std.undelivered, std.pending) == (5, 4)
    (capped,) = await observe.backlogs(redis, [streams.RENDER_STD], scan_cap=2)
    assert capped.undelivered == 2


async def test_heartbeats_are_read_and_expire(redis: Redis) -> None:
    for name, rate in (("h-r0", "4.5"), ("h-r1", "0")):
        key = streams.renderer_heartbeat(name)
        fields = {"pid": 10, "host": "h", "consumer": name, "rate": rate, "rendered": 7}
        await redis.hset(key, mapping={**fields, "started": 1.5})  # type: ignore[dict-item]
        await redis.expire(key, 60)  # a live one: refreshed long before this
    await redis.set("ticketry:renderers-not-a-heartbeat", 1)
    beats = await observe.heartbeats(redis)
    assert [(b.consumer, b.rate, b.rendered, b.pid) for b in beats] == [
        ("h-r0", 4.5, 7, 10),
        ("h-r1", 0.0, 7, 10),
    ]
    # When one stops refreshing (dead), its key runs out: then it is gone from the
    # count, and the other is still read
    await redis.pexpire(streams.renderer_heartbeat("h-r1"), 200)
    await _until(lambda: _consumers_are(redis, ["h-r0"]), timeout=30)


async def _consumers_are(redis: Redis, names: list[str]) -> bool:
    return [b.consumer for b in await observe.heartbeats(redis)] == names


# -- a real renderer's heartbeat rate ---------------------------------------------------


def _render_requests(n: int) -> list[RenderRequest]:
    order_id, event_id = new_id("or"), new_id("ev")
    common: dict[str, Any] = {
        "order_id": order_id, "event_id": event_id, "event_name": "Rate check", "venue": "Hall",
        "starts_at": datetime(2027, 6, 1, 19, 30, tzinfo=UTC), "holder_name": "Ada Lovelace",
        "tier": "standard", "price": Decimal("10.00"), "currency": "EUR", "total": n,
    }  # fmt: skip
    tids = ticket_ids(order_id, n)
    return [RenderRequest(ticket_id=tid, code=f"TK1.k1.{tid}.sig", **common) for tid in tids]


async def _beat(redis: Redis, name: str) -> observe.Heartbeat | None:
    return next((b for b in await observe.heartbeats(redis) if b.consumer == name), None)


async def test_renderer_heartbeat_rate_is_capacity_not_wall_clock(
    redis_server: str, redis: Redis, tmp_path: Path
) -> None:
    await ensure_groups(redis)
    env = {
        **os.environ,
        "TICKETRY_REDIS_URL": redis_server,
        "TICKETRY_DEV_MODE": "1",
        "TICKETRY_RENDERER_NAME": "rate-r0",
        "TICKETRY_STORAGE_DIR": str(tmp_path / "tickets"),
        "TICKETRY_LOG_LEVEL": "WARNING",
    }
    proc = await asyncio.create_subprocess_exec(str(Path(sys.executable).parent / "ticketry-renderer"), env=env)
    try:
        await _until(lambda: _has_beat(redis, "rate-r0"), timeout=60)
        # Given a burst of requests, rendered as fast as the renderer can …
        n = 600
        async with redis.pipeline(transaction=False) as pipe:
            for req in _render_requests(n):
                pipe.xadd(streams.RENDER_STD, req.to_fields())  # type: ignore[arg-type]
            await pipe.execute()
        t0 = time.monotonic()
        await _until(lambda: _backlog_is_empty(redis), timeout=120)
        burst_s = time.monotonic() - t0
        # … when it has then been idle for five heartbeats,
        await _refreshed(redis, streams.renderer_heartbeat("rate-r0"), times=5)
        beat = await _beat(redis, "rate-r0")
        assert beat is not None and beat.rendered == n
        # then it still reports its capacity: at least the burst's own rate (busy
        # time ≤ the burst's wall time), here with a factor 2 of slack for the EWMA
        # over a first, template-building heartbeat. The wall-clock EWMA it
        # replaced had decayed to ≤ 0.7⁵ ≈ 17 % of that by now.
        assert beat.rate >= 0.5 * n / burst_s, (beat, burst_s)
        assert beat.busy == 0.0, "idle for the last second"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0


async def _has_beat(redis: Redis, name: str) -> bool:
    return await _beat(redis, name) is not None


async def _backlog_is_empty(redis: Redis) -> bool:
    return all(lane.lag == 0 and lane.pending == 0 for lane in await observe.backlogs(redis))


# -- leader --------------------------------------------------------------------------


async def test_one_leader_fencing_token_grows_on_takeover(redis: Redis) -> None:
    # (a TTL far above two ticks back to back: the renewal keeps it)
    a = Leader(redis, "a", ttl_s=2.0)
    b = Leader(redis, "b", ttl_s=2.0)
    assert await a.tick() and not await b.tick()
    token_a = a.token
    assert await a.tick() and a.token == token_a, "renewal keeps the token"
    # When a stops renewing (paused or dead), its lock runs out, and b takes over
    # with a larger token (b ticking meanwhile changes nothing)
    assert 0 < await redis.pttl(streams.SCALER_LEADER) <= 2000
    await _until(b.tick, timeout=30)
    assert b.token is not None and token_a is not None and b.token > token_a
    # The paused ex-leader finds out on its next tick and cannot record meanwhile.
    assert await a.record(streams.SCALER_DECISIONS, {"reason": "stale"}, maxlen=10) is None
    assert not a.is_leader and not await a.tick()
    assert await redis.xlen(streams.SCALER_DECISIONS) == 0
    assert await b.record(streams.SCALER_DECISIONS, {"reason": "ok"}, maxlen=10) is not None
    rows: Any = await redis.xrange(streams.SCALER_DECISIONS)
    ((_, fields),) = rows
    assert fields == {b"reason": b"ok", b"token": str(b.token).encode()}


async def test_release_hands_over_at_once(redis: Redis) -> None:
    a, b = Leader(redis, "a"), Leader(redis, "b")
    assert await a.tick()
    await a.release()
    assert await b.tick()
    await a.release()  # not the holder: no effect
    assert await redis.get(streams.SCALER_LEADER) == f"b|{b.token}".encode()


# -- controller ------------------------------------------------------------------------

CFG = PolicyConfig(minimum=1, maximum=4, target_drain_s=30, default_rate=5.0, down_window_s=60, cooldown_s=15)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def test_controller_scales_up_records_and_comes_back(redis: Redis) -> None:
    await ensure_groups(redis)
    clock = FakeClock()
    backend = DryRunBackend(initial=1)
    ctl = Controller(redis, backend, Leader(redis, "one"), CFG, clock=clock)
    # Given 3,000 undelivered requests, when the leader ticks, it goes to max at once.
    async with redis.pipeline(transaction=False) as pipe:
        for i in range(3000):
            pipe.xadd(streams.RENDER_STD, {"n": i})
        await pipe.execute()
    obs = await ctl.tick()
    assert obs is not None and obs.leading and obs.decision is not None
    assert (obs.decision.current, obs.decision.replicas) == (1, 4)
    assert (await backend.status()).target == 4
    rows: Any = await redis.xrange(streams.SCALER_DECISIONS)
    ((_, d),) = rows
    fields = {k.decode(): v.decode() for k, v in d.items()}
    assert {k: fields[k] for k in ("lag", "pending", "from", "to", "running", "rate")} == {
        "lag": "3000",
        "pending": "0",
        "from": "1",
        "to": "4",
        "running": "1",
        "rate": "5.0",
    }
    assert fields["reason"].startswith("scale-up") and "capped at max 4" in fields["reason"]
    assert float(fields["ts"]) > 0 and int(fields["token"]) >= 1
    # When the backlog is gone, it holds through the down-window, then returns to min.
    await redis.delete(streams.RENDER_STD)
    await ensure_groups(redis)
    clock.t += 30
    obs = await ctl.tick()
    assert obs is not None and obs.decision is not None and not obs.decision.changed
    clock.t += 31
    obs = await ctl.tick()
    assert obs is not None and obs.decision is not None
    assert (obs.decision.current, obs.decision.replicas) == (4, 1)
    assert (await backend.status()).target == 1
    assert await redis.xlen(streams.SCALER_DECISIONS) == 2


async def test_standbys_do_not_act(redis: Redis) -> None:
    await ensure_groups(redis)
    for i in range(600):
        await redis.xadd(streams.RENDER_STD, {"n": i})
    leader_backend, standby_backend = DryRunBackend(1), DryRunBackend(1)
    leader = Controller(redis, leader_backend, Leader(redis, "l"), CFG)
    standby = Controller(redis, standby_backend, Leader(redis, "s"), CFG, standby_replicas=1)
    first, second = await leader.tick(), await standby.tick()
    assert first is not None and first.leading
    assert second is not None and not second.leading and second.decision is None
    assert (await leader_backend.status()).target == 4
    assert (await standby_backend.status()).target == 1
    assert await redis.xlen(streams.SCALER_DECISIONS) == 1


# -- the ticketry-scaler process -------------------------------------------------------

# The renderer's contract: named by TICKETRY_RENDERER_NAME, a heartbeat hash refreshed
# every second with a TTL (rate = its capacity in tickets per busy second), drains
# and exits 0 on SIGTERM. This one "renders" the standard lane at 100 entries/s
# (10 ms each, then XACK), so the backlog is really drained by the processes.
HEARTBEATING_RENDERER = """
import os, signal, socket, sys, time
import redis
from ticketry import streams
out, name = sys.argv[1], os.environ["TICKETRY_RENDERER_NAME"]
r = redis.Redis.from_url(os.environ["TICKETRY_REDIS_URL"])
stop = False
def term(signum, frame):
    global stop
    stop = True
signal.signal(signal.SIGTERM, term)
started = time.time()
while not stop:
    key = streams.renderer_heartbeat(name)
    r.hset(key, mapping={"pid": os.getpid(), "host": socket.gethostname(), "consumer": name,
                         "rate": 100.0, "rendered": 0, "started": started})
    r.expire(key, streams.HEARTBEAT_TTL_S)
    try:
        got = r.xreadgroup(streams.RENDERERS_GROUP, name, {streams.RENDER_STD: ">"}, count=10, block=100)
    except redis.ResponseError:  # no group yet
        time.sleep(0.1)
        continue
    for _, entries in got or []:
        for entry_id, _ in entries:
            time.sleep(0.01)
            r.xack(streams.RENDER_STD, streams.RENDERERS_GROUP, entry_id)
# The mark first: a test that sees the heartbeat gone may look for it at once.
open(os.path.join(out, f"{name}.{os.getpid()}.term"), "w").close()
r.delete(streams.renderer_heartbeat(name))
"""


def _scaler_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "ticketry-scaler"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ticketry_scaler.main"]


@pytest.fixture
def scaler_env(redis_server: str, tmp_path: Path) -> tuple[dict[str, str], Path]:
    script = tmp_path / "renderer.py"
    script.write_text(HEARTBEATING_RENDERER)
    out = tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "TICKETRY_REDIS_URL": redis_server,
        "TICKETRY_DEV_MODE": "1",
        "TICKETRY_RENDERER_COMMAND": f"{sys.executable} {script} {out}",
        "TICKETRY_SCALER_METRICS_PORT": "0",
        "TICKETRY_SCALER_INTERVAL_S": "0.3",
        "TICKETRY_SCALER_DRAIN_TIMEOUT_S": "5",
        "TICKETRY_LOG_LEVEL": "WARNING",
    }
    return env, out


async def _live(redis: Redis) -> list[str]:
    return [b.consumer for b in await observe.heartbeats(redis)]


async def test_scaler_process_keeps_min_and_drains_on_sigterm(
    redis: Redis, scaler_env: tuple[dict[str, str], Path]
) -> None:
    env, out = scaler_env
    proc = await asyncio.create_subprocess_exec(
        *_scaler_cmd(), env={**env, "TICKETRY_RENDERERS_MIN": "2", "TICKETRY_RENDERERS_MAX": "4"}
    )
    try:
        # With min=2 and no backlog: exactly two renderers …
        await _until(lambda: _count_is(redis, 2))
        first = {b.consumer: b.pid for b in await observe.heartbeats(redis)}
        # … and when the scaler has ticked five more times (each renews its lock),
        # the same two: none added, none restarted, no decision taken
        await _refreshed(redis, streams.SCALER_LEADER, times=5)
        assert {b.consumer: b.pid for b in await observe.heartbeats(redis)} == first
        assert await redis.xlen(streams.SCALER_DECISIONS) == 0
        # It created the consumer groups at startup.
        for lane in streams.RENDER_LANES:
            groups = await redis.xinfo_groups(lane)
            assert [g["name"] for g in groups] == [streams.RENDERERS_GROUP.encode()]
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    # Both renderers were drained (SIGTERM → clean exit), none left behind.
    assert len(list(out.glob("*.term"))) == 2
    assert await _live(redis) == []


async def test_scaler_process_follows_the_backlog(redis: Redis, scaler_env: tuple[dict[str, str], Path]) -> None:
    env, _ = scaler_env
    await ensure_groups(redis)
    proc = await asyncio.create_subprocess_exec(
        *_scaler_cmd(),
        env={
            **env,
            "TICKETRY_RENDERERS_MIN": "1",
            "TICKETRY_RENDERERS_MAX": "3",
            # 1,000 entries at the renderers' 100/s need 5 to drain in 2 s: more than max.
            "TICKETRY_SCALER_TARGET_DRAIN_S": "2",
            "TICKETRY_SCALER_DOWN_WINDOW_S": "1",
            "TICKETRY_SCALER_COOLDOWN_S": "1",
            # The drain rule alone: no spare renderer above min.
            "TICKETRY_RENDERERS_SPARE": "0",
        },
    )
    try:
        await _until(lambda: _count_is(redis, 1))
        # Given a backlog that needs more than max at the measured rate, it goes to max
        # (added in one MULTI: a tick never sees part of it)
        async with redis.pipeline(transaction=True) as pipe:
            for i in range(1000):
                pipe.xadd(streams.RENDER_STD, {"n": i})
            await pipe.execute()
        await _until(lambda: _count_is(redis, 3))
        # When the renderers have drained it, it returns to min after the window and cooldown.
        await _until(lambda: _backlog_is_empty(redis), timeout=120)
        await _until(lambda: _count_is(redis, 1))
        (std,) = await observe.backlogs(redis, [streams.RENDER_STD])
        assert std.length == 1000, "drained by the renderers (read and acked), not deleted"
        decisions: Any = await redis.xrange(streams.SCALER_DECISIONS)
        steps = [(int(d[b"from"]), int(d[b"to"]), d[b"reason"].decode()) for _, d in decisions]
        # Then the decisions explain it: up to max at once, then only down, ending at min.
        assert steps[0][:2] == (1, 3) and steps[0][2].startswith("scale-up"), steps
        assert "at 100.00/s per renderer (measured)" in steps[0][2]
        assert all(to < frm and why.startswith("scale-down") for frm, to, why in steps[1:]), steps
        assert steps[-1][1] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0


async def _count_is(redis: Redis, n: int) -> bool:
    return len(await _live(redis)) == n


async def test_renderers_do_not_outlive_a_killed_scaler(redis: Redis, scaler_env: tuple[dict[str, str], Path]) -> None:
    env, out = scaler_env
    proc = await asyncio.create_subprocess_exec(
        *_scaler_cmd(), env={**env, "TICKETRY_RENDERERS_MIN": "2", "TICKETRY_RENDERERS_MAX": "2"}
    )
    try:
        await _until(lambda: _count_is(redis, 2))
    finally:
        # When the scaler dies without draining (SIGKILL), its renderers get SIGTERM.
        proc.kill()
        await proc.wait()
    await _until(lambda: _count_is(redis, 0))
    assert len(list(out.glob("*.term"))) == 2
