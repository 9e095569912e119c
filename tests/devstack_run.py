"""``python -m ticketry_devstack up`` run as a process by the tests of
``just up``: started with the caller's settings only (no ``TICKETRY_*`` of the
test run leaks in), its output read line by line, stopped by a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from ticketry_devstack.procs import REPO


def up(data: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    """Start ``up`` with ``--data-dir data`` and ``args``; ``env`` on top of this
    environment without its ``TICKETRY_`` settings."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TICKETRY_")}
    base.update(PYTHONUNBUFFERED="1", **env)
    argv = [sys.executable, "-m", "ticketry_devstack", "up", "--data-dir", str(data), *args]
    return subprocess.Popen(argv, env=base, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def lines(proc: subprocess.Popen[str]) -> Iterator[str]:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield line.rstrip("\n")


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop(proc: subprocess.Popen[str], sig: signal.Signals = signal.SIGINT, timeout_s: float = 120) -> int:
    """Send ``sig`` and wait for the exit code (SIGKILL past ``timeout_s``, then raise)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
