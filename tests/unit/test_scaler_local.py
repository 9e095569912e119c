"""The local backend supervising real child processes (a stand-in renderer),
exec'd and forked from a preloaded server."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
from ticketry_scaler.backends.local import RENDERER_NAME_ENV, LocalBackend
from ticketry_scaler.backends.prefork import Prefork, console_entry

from tests import fake_renderer
from tests.helpers import until


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


def _start_times(out: Path) -> list[float]:
    """When each child started (its start mark's content), oldest first."""
    return sorted(float(p.read_text()) for p in out.glob("*.start"))


def _pid_of(out: Path, consumer: str) -> int:
    (mark,) = (m for m in _marks(out, "start") if m.split(".")[0] == consumer)
    return int(mark.split(".")[1])


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
        await until(lambda: len(_marks(out, "start")) == 2)
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
        await until(lambda: len(_marks(out, "start")) == 1)
        first_pid = int(_marks(out, "start")[0].split(".")[1])
        # When the renderer is SIGKILLed, then a new one starts with the same consumer name.
        os.kill(first_pid, signal.SIGKILL)
        await until(lambda: len(_marks(out, "start")) == 2)
        names = {m.split(".")[0] for m in _marks(out, "start")}
        assert names == {"test-host-r0"}
        await until(lambda: backend.restarts == 1 and not _alive(first_pid))
        assert (await backend.status()).running == 1
    finally:
        await backend.aclose()


async def test_crash_loop_backs_off(fake: Fake) -> None:
    # Given a renderer that exits as soon as it starts, restarted after 0.2 s, doubling
    out, backoff_s = fake.out, 0.2
    backend = fake.backend("crash", minimum=1, backoff_s=backoff_s, backoff_max_s=10.0)
    await backend.start()
    try:
        # When it has started five times (however long its starts take here)
        await until(lambda: len(_marks(out, "start")) >= 5)
    finally:
        await backend.aclose()
    # Then each restart waited at least its backoff, 0.2, 0.4, 0.8 then 1.6 s, so
    # the gaps grow (a restart without backoff comes a poll, ~0.05 s, after the
    # exit: ~40 starts in the 3 s these five took at least)
    starts = _start_times(out)
    gaps = [later - earlier for earlier, later in pairwise(starts)][:4]
    assert all(gap >= backoff_s * 2**i for i, gap in enumerate(gaps)), gaps
    assert gaps[-1] > gaps[0], gaps
    assert len(starts) <= 6, starts  # the next is 3.2 s after the fifth


async def test_scale_down_drains_highest_slots_and_never_below_min(
    fake: Fake,
) -> None:
    out = fake.out
    backend = fake.backend(minimum=1, maximum=3)
    await backend.start()
    try:
        await backend.scale(10)  # capped at max
        await until(lambda: len(_marks(out, "start")) == 3)
        assert (await backend.status()).target == 3
        await backend.scale(0)  # floored at min
        await until(lambda: len(_marks(out, "term")) == 2)
        assert {m.split(".")[0] for m in _marks(out, "term")} == {"test-host-r1", "test-host-r2"}
        status = await backend.status()
        assert (status.target, status.running) == (1, 1)
        await until(lambda: not backend._draining)
        # Then the drained children are not restarted: when the one left is SIGKILLed,
        # its restart (seen) is the only one; a restart of a drained child, gone
        # before it, would have come no later
        os.kill(_pid_of(out, "test-host-r0"), signal.SIGKILL)
        await until(lambda: backend.restarts >= 1 and len(_marks(out, "start")) >= 4)
        assert backend.restarts == 1
        names = sorted(m.split(".")[0] for m in _marks(out, "start"))
        assert names == ["test-host-r0", "test-host-r0", "test-host-r1", "test-host-r2"]
    finally:
        await backend.aclose()


async def test_straggler_is_killed_after_the_drain_bound(fake: Fake) -> None:
    out, drain_timeout_s = fake.out, 1.0
    backend = fake.backend("ignore-term", minimum=1, drain_timeout_s=drain_timeout_s)
    await backend.start()
    await until(lambda: len(_marks(out, "start")) == 1)
    pid = int(_marks(out, "start")[0].split(".")[1])
    # When it is drained, it gets SIGTERM, ignores it (writes its mark), and is
    # SIGKILLed at the bound: not before, and the close does not hang (a wait
    # far above the bound: a child never killed would keep it forever)
    started = time.monotonic()
    await asyncio.wait_for(backend.aclose(), drain_timeout_s + 30)
    assert time.monotonic() - started >= drain_timeout_s
    assert _marks(out, "term") and not _alive(pid)


async def test_slot_name_not_reused_while_draining(fake: Fake) -> None:
    out = fake.out
    backend = fake.backend("ignore-term", minimum=0, maximum=2, drain_timeout_s=2.0)
    await backend.start()
    try:
        await backend.scale(1)
        await until(lambda: len(_marks(out, "start")) == 1)
        await backend.scale(0)  # r0 drains (ignores SIGTERM for 2 s)
        await backend.scale(1)  # must not start a second "r0" meanwhile
        await until(lambda: len(_marks(out, "start")) == 2)
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
        await until(lambda: len(_marks(fake.out, "start")) == 1)
        pid = int(_marks(fake.out, "start")[0].split(".")[1])
        assert os.getsid(pid) == pid  # a terminal's Ctrl-C reaches the scaler only, which drains it
    finally:
        await backend.aclose()
