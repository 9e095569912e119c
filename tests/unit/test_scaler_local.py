"""The local backend supervising real child processes (a stand-in renderer),
exec'd and forked from a preloaded server."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from ticketry_scaler.backends.local import RENDERER_NAME_ENV, LocalBackend
from ticketry_scaler.backends.prefork import Prefork, console_entry

from tests import fake_renderer


@dataclass
class Fake:
    """How the backend starts the stand-in (``tests/fake_renderer.py``): exec'd
    as a script, or forked from a preloaded server as a console script is."""

    argv: list[str]
    out: Path
    prefork: Prefork | None

    def backend(self, mode: str = "ok", **kw: float) -> LocalBackend:
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
            self.argv,
            instance="test-host",
            env={**os.environ, "FAKE_MODE": mode, "FAKE_OUT": str(self.out)},
            minimum=int(opts.pop("minimum")),
            maximum=int(opts.pop("maximum")),
            prefork=self.prefork,
            **opts,
        )


@pytest.fixture(params=["exec", "prefork"])
def fake(request: pytest.FixtureRequest, tmp_path: Path) -> Fake:
    out = tmp_path / "out"
    out.mkdir()
    if request.param == "prefork":
        return Fake(["unused"], out, Prefork("tests.fake_renderer:run"))
    return Fake([sys.executable, fake_renderer.__file__], out, None)


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


async def test_start_runs_min_and_names_each_child(fake: Fake) -> None:
    assert RENDERER_NAME_ENV == "TICKETRY_RENDERER_NAME"  # the renderer's contract
    out = fake.out
    backend = fake.backend(minimum=2)
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


async def test_crashed_child_is_restarted_under_its_name(fake: Fake) -> None:
    out = fake.out
    backend = fake.backend(minimum=1)
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


async def test_crash_loop_backs_off(fake: Fake) -> None:
    out = fake.out
    backend = fake.backend("crash", minimum=1, backoff_s=0.2, backoff_max_s=10.0)
    await backend.start()
    try:
        await asyncio.sleep(2.0)
    finally:
        await backend.aclose()
    # Backoff 0.2, 0.4, 0.8 (sum 1.4 s) → about 4 starts in 2 s; no backoff would be ~40.
    starts = len(_marks(out, "start"))
    assert 2 <= starts <= 5, starts


async def test_scale_down_drains_highest_slots_and_never_below_min(
    fake: Fake,
) -> None:
    out = fake.out
    backend = fake.backend(minimum=1, maximum=3)
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


async def test_straggler_is_killed_after_the_drain_bound(fake: Fake) -> None:
    out = fake.out
    backend = fake.backend("ignore-term", minimum=1, drain_timeout_s=0.5)
    await backend.start()
    await _until(lambda: len(_marks(out, "start")) == 1)
    pid = int(_marks(out, "start")[0].split(".")[1])
    started = time.monotonic()
    await backend.aclose()
    # It got SIGTERM (wrote its mark), ignored it, and was SIGKILLed at the bound.
    assert _marks(out, "term") and not _alive(pid)
    assert 0.4 <= time.monotonic() - started < 5.0


async def test_slot_name_not_reused_while_draining(fake: Fake) -> None:
    out = fake.out
    backend = fake.backend("ignore-term", minimum=0, maximum=2, drain_timeout_s=2.0)
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


def test_console_scripts_of_this_environment_are_forked_others_execd() -> None:
    assert console_entry(["ticketry-renderer"]) == "ticketry_renderer.main:run"
    assert console_entry(["ticketry-renderer", "--flag"]) is None  # arguments: exec it as given
    assert console_entry([sys.executable, fake_renderer.__file__]) is None
    assert console_entry(["/opt/bin/ticketry-renderer"]) is None  # a path names a program
    assert console_entry(["no-such-script"]) is None


async def test_child_runs_in_its_own_session(fake: Fake) -> None:
    backend = fake.backend(minimum=1)
    await backend.start()
    try:
        await _until(lambda: len(_marks(fake.out, "start")) == 1)
        pid = int(_marks(fake.out, "start")[0].split(".")[1])
        assert os.getsid(pid) == pid  # a terminal's Ctrl-C reaches the scaler only, which drains it
    finally:
        await backend.aclose()
