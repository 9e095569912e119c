"""Renderer processes on this host: spawn, supervise, restart with backoff, drain.

Each slot ``i`` runs one ``ticketry-renderer`` named ``<instance>-r<i>`` (passed as
``TICKETRY_RENDERER_NAME``, so its heartbeat key and consumer name are known).
Slot names are reused, which keeps the group's consumer list short, but never while
a previous holder of the name is still draining. Scaling down drains the highest
slots: SIGTERM (the renderer stops reading, finishes and acks in-flight work,
exits), then SIGKILL after ``drain_timeout_s``; whatever it left pending is
reclaimed by the other renderers (XAUTOCLAIM), so nothing is lost either way.

A child that exits on its own is restarted after an exponential backoff (reset
once a child has run ``reset_s``), so a renderer that cannot start does not spin.
Children run in their own session (a terminal's Ctrl-C reaches only the scaler,
which then drains them in order) and, on Linux, get SIGTERM if the scaler dies
without draining them (``PR_SET_PDEATHSIG``), so no orphan keeps rendering.
A command that is a console script of this environment (``ticketry-renderer``)
is forked from a server that imported it once instead of exec'd: see
``prefork``.

The count asked for is run up to a CPU cap: past ``cpu_cap`` renderers (the
cores this process may use, unless configured) only while they leave CPU
unused, measured from each child's CPU time every ``cpu_window_s``; see
``ticketry_scaler.cpu``.
``status().target`` stays what was asked, ``running`` what runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ticketry.backoff import backoff_ceiling

from ticketry_scaler import metrics
from ticketry_scaler.backends import BackendStatus
from ticketry_scaler.backends.prefork import Prefork, console_entry, die_with_parent
from ticketry_scaler.config import ScalerSettings
from ticketry_scaler.cpu import (
    CPU_WINDOW_S,
    GROW_BELOW,
    SHED_ABOVE,
    CpuMeter,
    cores_full,
    cpu_allowed,
    cpu_seconds,
    usable_cores,
)

log = logging.getLogger(__name__)

RENDERER_NAME_ENV = "TICKETRY_RENDERER_NAME"


def resolve_command(argv: list[str]) -> list[str]:
    """``argv`` with its program found on PATH or beside this interpreter (the venv)."""
    program = argv[0]
    if os.sep in program:
        return argv
    found = shutil.which(program) or shutil.which(program, path=str(Path(sys.executable).parent))
    return [found or program, *argv[1:]]


class ChildProcess(Protocol):
    """What the backend needs of a child: ``asyncio.subprocess.Process`` or
    ``prefork.Forked``."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...
    async def wait(self) -> int: ...


@dataclass
class _Child:
    slot: int
    consumer: str
    proc: ChildProcess
    started: float
    meter: CpuMeter | None = None

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None


@dataclass
class _Slot:
    index: int
    child: _Child | None = None
    failures: int = 0
    restart_at: float = 0.0


class LocalBackend:
    name = "local"

    def __init__(
        self,
        argv: list[str],
        *,
        instance: str,
        minimum: int,
        maximum: int,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
        reset_s: float = 30.0,
        drain_timeout_s: float = 30.0,
        poll_s: float = 0.2,
        env: Mapping[str, str] | None = None,
        prefork: Prefork | None = None,
        cpu_cap: int | None = None,
        cpu_window_s: float = CPU_WINDOW_S,
        grow_below: float = GROW_BELOW,
        shed_above: float = SHED_ABOVE,
    ) -> None:
        """``cpu_cap``: the cores renderers may fill (None: this process's usable
        cores; 0: no cap); see ``ticketry_scaler.cpu``."""
        self._argv = resolve_command(argv)
        self._prefork = prefork
        self._instance = instance
        self._min, self._max = minimum, maximum
        self._backoff_s, self._backoff_max_s, self._reset_s = backoff_s, backoff_max_s, reset_s
        self._drain_timeout_s = drain_timeout_s
        self._poll_s = poll_s
        self._env = dict(os.environ if env is None else env)
        self._cap = usable_cores() if cpu_cap is None else cpu_cap
        self._cpu_window_s, self._grow_below, self._shed_above = cpu_window_s, grow_below, shed_above
        self._wanted = minimum
        self._capped_at: int | None = None  # last count the cap held the fleet at (for the log)
        if 0 < self._cap < minimum:
            log.warning(
                "TICKETRY_RENDERERS_MIN exceeds the CPU cap; running min", extra={"min": minimum, "cap": self._cap}
            )
        self._slots: dict[int, _Slot] = {}
        self._draining: dict[int, _Child] = {}
        self._drain_tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._supervisor: asyncio.Task[None] | None = None
        self.restarts = 0

    @classmethod
    def from_settings(cls, s: ScalerSettings) -> LocalBackend:
        entry = console_entry(s.renderer_argv) if s.scaler_prefork else None
        how = {"forked_from_preloaded": entry} if entry else {"exec": s.renderer_command}
        log.info("how renderers start", extra=how)
        return cls(
            s.renderer_argv,
            instance=s.scaler_instance,
            minimum=s.renderers_min,
            maximum=s.renderers_max,
            backoff_s=s.scaler_restart_backoff_s,
            backoff_max_s=s.scaler_restart_backoff_max_s,
            reset_s=s.scaler_restart_reset_s,
            drain_timeout_s=s.scaler_drain_timeout_s,
            prefork=Prefork(entry) if entry else None,
            cpu_cap=s.scaler_cpu_cap,
        )

    # -- Backend protocol ------------------------------------------------------------

    async def start(self) -> None:
        await self.scale(self._min)
        self._supervisor = asyncio.create_task(self._supervise(), name="renderer-supervisor")

    async def status(self) -> BackendStatus:
        children = [s.child for s in self._slots.values() if s.child is not None]
        names = {c.consumer for c in children} | {c.consumer for c in self._draining.values()}
        return BackendStatus(
            target=self._wanted,
            running=sum(1 for c in children if c.alive),
            consumers=frozenset(names),
            cpu_cap=self._cap,
            cores_full=cores_full(self._used(), self._cap, self._grow_below),
        )

    @property
    def cpu_cap(self) -> int:
        """The cores renderers may fill (0: no cap)."""
        return self._cap

    async def scale(self, replicas: int) -> None:
        """Ask for ``replicas`` renderers, clamped to ``[min, max]`` (never below
        min); as many run as the CPU cap allows now (the supervisor follows it)."""
        self._wanted = min(max(replicas, self._min), self._max)
        async with self._lock:
            await self._resize()

    async def _resize(self) -> None:
        """Run as many slots as wanted and the CPU cap allows (lock held)."""
        used = self._used()
        allowed = cpu_allowed(self._wanted, len(self._slots), used, self._cap, self._grow_below, self._shed_above)
        allowed = max(self._min, allowed)
        if allowed < self._wanted and allowed != self._capped_at:
            log.info(
                "cpu cap: fewer renderers than wanted",
                extra={"running": allowed, "wanted": self._wanted, "cpu_used": used, "cap": self._cap},
            )
        self._capped_at = allowed if allowed < self._wanted else None
        while len(self._slots) < allowed:
            index = self._free_index()
            slot = self._slots[index] = _Slot(index)
            await self._spawn(slot)
        for index in sorted(self._slots, reverse=True)[: len(self._slots) - allowed]:
            child = self._slots.pop(index).child
            if child is not None and child.alive:
                self._drain_later(child)

    def _used(self) -> float | None:
        """Cores the running renderers got over the last window; None while one
        of them has not been measured for a whole window. A slot waiting to
        restart runs nothing."""
        used = 0.0
        for slot in self._slots.values():
            child = slot.child
            if child is None or not child.alive:
                continue
            if child.meter is None or child.meter.share is None:
                return None
            used += child.meter.share
        return used

    def _measure(self) -> None:
        """Sample every live child's CPU time (a new child starts its window)."""
        if self._cap <= 0:
            return
        now = time.monotonic()
        for slot in self._slots.values():
            child = slot.child
            if child is None or not child.alive:
                continue
            seconds = cpu_seconds(child.proc.pid)
            if child.meter is None:
                child.meter = CpuMeter(now, seconds)
            else:
                child.meter.sample(now, seconds, self._cpu_window_s)

    async def aclose(self) -> None:
        """Drain every renderer (SIGTERM, wait, SIGKILL stragglers) and stop supervising."""
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        async with self._lock:
            for index in list(self._slots):
                child = self._slots.pop(index).child
                if child is not None and child.alive:
                    self._drain_later(child)
        if self._drain_tasks:
            await asyncio.gather(*self._drain_tasks, return_exceptions=True)

    # -- internals ---------------------------------------------------------------------

    def _free_index(self) -> int:
        used = set(self._slots) | set(self._draining)
        return next(i for i in range(len(used) + 1) if i not in used)

    async def _spawn(self, slot: _Slot) -> None:
        consumer = f"{self._instance}-r{slot.index}"
        env = {**self._env, RENDERER_NAME_ENV: consumer}
        proc: ChildProcess
        try:
            if self._prefork is not None:
                proc = await self._prefork.start(env)
            else:
                proc = await asyncio.create_subprocess_exec(
                    *self._argv,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=die_with_parent(os.getpid()),
                )
        except (OSError, EOFError) as exc:  # EOFError: the fork server went away
            log.error("renderer failed to start", extra={"consumer": consumer, "error": repr(exc)})
            self._schedule_restart(slot, ran_s=0.0)
            return
        slot.child = _Child(slot.index, consumer, proc, time.monotonic())
        log.info("renderer started", extra={"consumer": consumer, "pid": proc.pid})

    def _schedule_restart(self, slot: _Slot, *, ran_s: float) -> None:
        if ran_s >= self._reset_s:
            slot.failures = 0
        slot.failures += 1
        delay = backoff_ceiling(slot.failures, self._backoff_s, self._backoff_max_s)
        slot.restart_at = time.monotonic() + delay
        slot.child = None

    async def _supervise(self) -> None:
        while True:
            try:
                async with self._lock:
                    await self._supervise_once()
                    self._measure()
                    await self._resize()
            except Exception:
                log.exception("supervisor tick failed")  # the loop itself never dies
            await asyncio.sleep(self._poll_s)

    async def _supervise_once(self) -> None:
        now = time.monotonic()
        for slot in list(self._slots.values()):
            child = slot.child
            if child is not None and not child.alive:
                ran = now - child.started
                self._schedule_restart(slot, ran_s=ran)
                self.restarts += 1
                metrics.RESTARTS.inc()
                log.warning(
                    "renderer exited; restarting",
                    extra={
                        "consumer": child.consumer,
                        "pid": child.proc.pid,
                        "returncode": child.proc.returncode,
                        "ran_s": round(ran, 1),
                        "restart_in_s": round(slot.restart_at - now, 2),
                    },
                )
            elif child is None and slot.restart_at <= now:
                await self._spawn(slot)

    def _drain_later(self, child: _Child) -> None:
        self._draining[child.slot] = child
        task = asyncio.create_task(self._drain(child), name=f"drain-{child.consumer}")
        self._drain_tasks.add(task)
        task.add_done_callback(self._drain_tasks.discard)

    async def _drain(self, child: _Child) -> None:
        try:
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
            log.info("renderer draining", extra={"consumer": child.consumer, "pid": child.proc.pid})
            try:
                await asyncio.wait_for(child.proc.wait(), self._drain_timeout_s)
            except TimeoutError:
                log.warning(
                    "renderer did not drain in time; killing",
                    extra={"consumer": child.consumer, "pid": child.proc.pid},
                )
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
                await child.proc.wait()
            log.info(
                "renderer stopped",
                extra={"consumer": child.consumer, "returncode": child.proc.returncode},
            )
        finally:
            if self._draining.get(child.slot) is child:
                del self._draining[child.slot]
