"""Renderers forked from a server that has already imported them.

A renderer spends seconds of CPU importing WeasyPrint, FastStream and pymongo
before it renders anything, and several starting beside a busy renderer take
several times that to their first heartbeat (docs/design.md). A renderer
command that names a console script of this environment (the default,
``ticketry-renderer``) is therefore started like a preloaded app server starts
its workers: a ``multiprocessing`` fork server imports the script's module
once, and each renderer is a fork of it that calls the script's entry point.
The import happens once per scaler, off the event loop; a fork then costs
milliseconds.

A forked renderer is the same program as an exec'd one: it reads its
``TICKETRY_*`` environment (the one given, not the fork server's), runs in its
own session, and gets SIGTERM when the fork server goes (which it does when the
scaler does: it watches a pipe from the scaler), so no orphan keeps rendering.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import importlib.metadata
import importlib.util
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Mapping
from multiprocessing import forkserver
from multiprocessing.process import BaseProcess

_PR_SET_PDEATHSIG = 1
# Loaded before any fork: the child must not dlopen between fork and exec.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(parent: int) -> Callable[[], None]:
    """Run in a child: SIGTERM it when ``parent`` (its parent) dies (Linux)."""

    def preexec() -> None:
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def console_entry(argv: list[str]) -> str | None:
    """The ``module:function`` behind ``argv`` when it is a console script of
    this environment, called without arguments; None otherwise (exec it)."""
    if len(argv) != 1 or os.sep in argv[0]:
        return None
    found = importlib.metadata.entry_points(group="console_scripts", name=argv[0])
    for ep in found:
        if importlib.util.find_spec(ep.module) is not None:
            return str(ep.value)
    return None


def _run_entry(entry: str, env: dict[str, str]) -> None:
    """In the forked child: become the renderer ``entry`` names."""
    os.setsid()
    # The fork server exits when nobody holds the write end of its "alive" pipe:
    # the scaler and, by default, every child of the server. A renderer lets go
    # of it, so the server goes with the scaler, and the renderers with it.
    alive = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive is not None:
        os.close(alive)
    die_with_parent(os.getppid())()  # the fork server
    os.environ.clear()
    os.environ.update(env)
    module, _, func = entry.partition(":")
    result = getattr(importlib.import_module(module), func)()
    sys.exit(result if isinstance(result, int) else 0)


class Forked:
    """A forked child, with the parts of ``asyncio.subprocess.Process`` the
    local backend uses."""

    def __init__(self, process: BaseProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        pid = self._process.pid
        assert pid is not None  # started
        return pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        """The exit code, once the child has exited (its sentinel turns readable)."""
        loop = asyncio.get_running_loop()
        while (code := self.returncode) is None:
            ready: asyncio.Future[None] = loop.create_future()

            def readable(ready: asyncio.Future[None] = ready) -> None:
                if not ready.done():  # it may fire again before we remove it
                    ready.set_result(None)

            loop.add_reader(self._process.sentinel, readable)
            try:
                await ready
            finally:
                loop.remove_reader(self._process.sentinel)
        return code


class Prefork:
    """Forks children that run ``entry`` (``module:function``) from a fork
    server that imported ``module`` once."""

    def __init__(self, entry: str) -> None:
        self.entry = entry
        self._ctx = multiprocessing.get_context("forkserver")
        # Read when the fork server starts (the first child), not after. Then
        # forkwarm: the start-up work every child would repeat (see there).
        self._ctx.set_forkserver_preload([entry.partition(":")[0], f"{__package__}.forkwarm"])

    async def start(self, env: Mapping[str, str]) -> Forked:
        # daemon: if the scaler ever exits without draining its renderers,
        # multiprocessing's exit hook sends them SIGTERM (a drain) and waits.
        process = self._ctx.Process(target=_run_entry, args=(self.entry, dict(env)), daemon=True)
        # The first start launches the fork server and waits for its import.
        await asyncio.to_thread(process.start)
        return Forked(process)
