"""The local backend supervising real child processes (a stand-in renderer script)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from ticketry_scaler.backends.local import RENDERER_NAME_ENV, LocalBackend

# Follows the renderer's process contract: named by TICKETRY_RENDERER_NAME, drains and
# exits 0 on SIGTERM. FAKE_MODE=ignore-term ignores SIGTERM; crash exits 3 at once.
FAKE_RENDERER = """
import os, signal, sys, time
out, name, pid = sys.argv[1], os.environ["TICKETRY_RENDERER_NAME"], os.getpid()
mode = os.environ.get("FAKE_MODE", "ok")
open(os.path.join(out, f"{name}.{pid}.start"), "w").close()
if mode == "crash":
    sys.exit(3)
def term(signum, frame):
    open(os.path.join(out, f"{name}.{pid}.term"), "w").close()
    if mode != "ignore-term":
        sys.exit(0)
signal.signal(signal.SIGTERM, term)
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def fake(tmp_path: Path) -> tuple[list[str], Path]:
    script = tmp_path / "fake_renderer.py"
    script.write_text(FAKE_RENDERER)
    out = tmp_path / "out"
    out.mkdir()
    return [sys.executable, str(script), str(out)], out


def _backend(argv: list[str], mode: str = "ok", **kw: float) -> LocalBackend:
    opts: dict[str, float] = {
        "minimum": 1,
        "maximum": 4,
        "backoff_s": 0.1,
        "backoff_max_s": 1.0,
        "drain_timeout_s": 5.0,
        "poll_s": 0.05,
    }
    opts.update(kw)
    return LocalBackend(
        argv,
        instance="test-host",
        env={**os.environ, "FAKE_MODE": mode},
        minimum=int(opts.pop("minimum")),
        maximum=int(opts.pop("maximum")),
        **opts,
    )


def _marks(out: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in out.glob(f"*.{suffix}"))


async def _until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); read its state.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_start_runs_min_and_names_each_child(fake: tuple[list[str], Path]) -> None:
    assert RENDERER_NAME_ENV == "TICKETRY_RENDERER_NAME"  # the renderer's contract
    argv, out = fake
    backend = _backend(argv, minimum=2)
    await backend.start()
    try:
        await _until(lambda: len(_marks(out, "start")) == 2)
        status = await backend.status()
        assert (status.target, status.running) == (2, 2)
        assert status.consumers == {"test-host-r0", "test-host-r1"}
        assert {m.split(".")[0] for m in _marks(out, "start")} == status.consumers
    finally:
        await backend.aclose()
    # Every child was drained with SIGTERM (it wrote its mark) and is gone.
    assert len(_marks(out, "term")) == 2
    assert (await backend.status()).running == 0


async def test_crashed_child_is_restarted_under_its_name(fake: tuple[list[str], Path]) -> None:
    argv, out = fake
    backend = _backend(argv, minimum=1)
    await backend.start()
    try:
        await _until(lambda: len(_marks(out, "start")) == 1)
        first_pid = int(_marks(out, "start")[0].split(".")[1])
        # When the renderer is SIGKILLed, then a new one starts with the same consumer name.
        os.kill(first_pid, signal.SIGKILL)
        await _until(lambda: len(_marks(out, "start")) == 2)
        names = {m.split(".")[0] for m in _marks(out, "start")}
        assert names == {"test-host-r0"}
        await _until(lambda: backend.restarts == 1 and not _alive(first_pid))
        assert (await backend.status()).running == 1
    finally:
        await backend.aclose()


async def test_crash_loop_backs_off(fake: tuple[list[str], Path]) -> None:
    argv, out = fake
    backend = _backend(argv, "crash", minimum=1, backoff_s=0.2, backoff_max_s=10.0)
    await backend.start()
    try:
        await asyncio.sleep(2.0)
    finally:
        await backend.aclose()
    # Backoff 0.2, 0.4, 0.8 (sum 1.4 s) → about 4 starts in 2 s; no backoff would be ~40.
    starts = len(_marks(out, "start"))
    assert 2 <= starts <= 5, starts


async def test_scale_down_drains_highest_slots_and_never_below_min(
    fake: tuple[list[str], Path],
) -> None:
    argv, out = fake
    backend = _backend(argv, minimum=1, maximum=3)
    await backend.start()
    try:
        await backend.scale(10)  # capped at max
        await _until(lambda: len(_marks(out, "start")) == 3)
        assert (await backend.status()).target == 3
        await backend.scale(0)  # floored at min
        await _until(lambda: len(_marks(out, "term")) == 2)
        assert {m.split(".")[0] for m in _marks(out, "term")} == {"test-host-r1", "test-host-r2"}
        status = await backend.status()
        assert (status.target, status.running) == (1, 1)
        await _until(lambda: not backend._draining)  # drained children are not restarted
        await asyncio.sleep(0.3)
        assert len(_marks(out, "start")) == 3
    finally:
        await backend.aclose()


async def test_straggler_is_killed_after_the_drain_bound(fake: tuple[list[str], Path]) -> None:
    argv, out = fake
    backend = _backend(argv, "ignore-term", minimum=1, drain_timeout_s=0.5)
    await backend.start()
    await _until(lambda: len(_marks(out, "start")) == 1)
    pid = int(_marks(out, "start")[0].split(".")[1])
    started = time.monotonic()
    await backend.aclose()
    # It got SIGTERM (wrote its mark), ignored it, and was SIGKILLed at the bound.
    assert _marks(out, "term") and not _alive(pid)
    assert 0.4 <= time.monotonic() - started < 5.0


async def test_slot_name_not_reused_while_draining(fake: tuple[list[str], Path]) -> None:
    argv, out = fake
    backend = _backend(argv, "ignore-term", minimum=0, maximum=2, drain_timeout_s=2.0)
    await backend.start()
    try:
        await backend.scale(1)
        await _until(lambda: len(_marks(out, "start")) == 1)
        await backend.scale(0)  # r0 drains (ignores SIGTERM for 2 s)
        await backend.scale(1)  # must not start a second "r0" meanwhile
        await _until(lambda: len(_marks(out, "start")) == 2)
        assert {m.split(".")[0] for m in _marks(out, "start")} == {"test-host-r0", "test-host-r1"}
    finally:
        await backend.aclose()
