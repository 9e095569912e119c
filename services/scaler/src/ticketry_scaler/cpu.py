"""How many renderers this host's cores can feed (the local backend's CPU cap).

A renderer is one single-threaded, CPU-bound process while it has work: two of
them on two cores render about 1.5x what one does, a third on the same two
cores renders nothing more, and one started mid-burst takes CPU from the
others while it starts (measured: a 2,000-ticket burst with renderers forked
up to four ran at 68 % of two fixed renderers). So the local backend runs at
most ``cap`` *busy* renderers, ``cap`` being the cores this process may use:

* the CPUs of its affinity mask (``os.sched_getaffinity``: taskset, cpusets),
* bounded by its cgroup's CPU quota, rounded up (a container limited to 1.5
  CPUs still gets more from two renderers than from one): cgroup v2
  ``cpu.max``, cgroup v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``, the
  tightest along the path from its own cgroup to the root.

*Busy* is measured, not assumed: a renderer counts as busy when it wanted a
core at least ``BUSY_DEMAND`` of the last window: time on a CPU plus time
runnable but waiting for one (``/proc/<pid>/task/*/schedstat``). Not CPU time
alone: on a machine loaded by others a CPU-bound renderer gets a fifth of a
core and waits the rest (measured here at load 9 on 2 cores: 0.2 on a CPU,
0.7 waiting), and would look idle. A fleet that waits on I/O rather than on
the CPU is not capped. Past the cap
the backend grows one renderer at a time, only once every renderer has been
measured for a full window and fewer than ``cap`` of them were busy, and it
drains the excess when more than ``cap`` are busy (:func:`cpu_allowed`).

The functions that read files take their paths, so they are tested on plain
files; :func:`cpu_allowed` is pure.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

# A renderer that wanted a core (running or runnable) this share of the window
# is busy. An idle one (heartbeat, a blocking XREADGROUP) wants ~1 %; a
# rendering one ~95 %, however loaded the machine.
BUSY_DEMAND: float = 0.5
CPU_WINDOW_S: float = 1.0

CGROUP_ROOT = Path("/sys/fs/cgroup")
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_allowed(wanted: int, slots: int, busy: int | None, cap: int) -> int:
    """Renderer slots the local backend may run now.

    ``wanted``: what the scaler asked for (already within min and max);
    ``slots``: how many run now; ``busy``: how many of those were busy over the
    last window, ``None`` while any of them has not been measured for a whole
    window yet; ``cap``: busy renderers the cores can feed (0: no cap).

    Up to the cap, everything wanted at once. Past it: one more while a core is
    free (fewer than ``cap`` busy), hold at ``cap`` busy or while not every
    renderer is measured, and shed the busy ones beyond the cap. Never below
    the cap (those slots are always allowed) nor above ``wanted``.
    """
    if cap <= 0 or wanted <= cap:
        return wanted
    if busy is None or busy == cap:
        allowed = slots
    elif busy > cap:
        allowed = slots - (busy - cap)
    else:
        allowed = slots + 1
    return min(wanted, max(cap, allowed))


def parse_cpu_max(text: str) -> float | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` (``"<quota> <period>"`` or
    ``"max <period>"``); None: no limit."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    period = float(parts[1]) if len(parts) > 1 else 100_000.0
    quota = float(parts[0])
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs allowed by cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``
    (a quota of -1: no limit)."""
    quota, period = float(quota_text.strip()), float(period_text.strip())
    return quota / period if quota > 0 and period > 0 else None


def _ancestry(mount: Path, path: str) -> list[Path]:
    """``mount/path`` and each of its parents up to ``mount``, existing ones only.

    Inside a cgroup namespace (a container) ``path`` is often ``/`` or does not
    exist under the mount as named; the mount itself is then the own cgroup."""
    parts = [p for p in path.strip("/").split("/") if p]
    dirs = [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return [d for d in dirs if d.is_dir()]


def cgroup_cpu_limit(proc_cgroup: str, root: Path = CGROUP_ROOT) -> float | None:
    """The tightest CPU quota (in CPUs) on the way from this process's cgroup
    to the root, cgroup v2 or v1; None when there is none (or no cgroup fs).

    ``proc_cgroup``: the text of ``/proc/self/cgroup``."""
    limits: list[float] = []
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # v2 (unified)
            unified = root / "unified" if (root / "unified" / "cgroup.controllers").exists() else root
            for d in _ancestry(unified, path):
                f = d / "cpu.max"
                if f.is_file() and (limit := parse_cpu_max(f.read_text())) is not None:
                    limits.append(limit)
        elif "cpu" in controllers.split(","):  # v1
            mounts = [root / name for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu", controllers)]
            v1 = next((m for m in mounts if m.is_dir()), None)
            if v1 is None:
                continue
            for d in _ancestry(v1, path):
                q, p = d / "cpu.cfs_quota_us", d / "cpu.cfs_period_us"
                if q.is_file() and p.is_file() and (limit := parse_cfs(q.read_text(), p.read_text())) is not None:
                    limits.append(limit)
    return min(limits) if limits else None


def usable_cores(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """CPUs this process may run on: its affinity mask, bounded by its cgroup's
    CPU quota rounded up; at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    try:
        limit = cgroup_cpu_limit(proc_cgroup.read_text(), root)
    except OSError:
        limit = None
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)


def parse_schedstat(text: str) -> float:
    """Seconds on a CPU plus seconds runnable on a run queue, from one
    ``schedstat`` line (nanoseconds; https://docs.kernel.org/scheduler/sched-stats.html)."""
    run_ns, wait_ns, *_ = text.split()
    return (int(run_ns) + int(wait_ns)) / 1e9


def parse_stat_cpu(text: str) -> float:
    """User + system CPU seconds from a ``/proc/<pid>/stat`` line (proc(5):
    after the name in parentheses, utime and stime are the 12th and 13th)."""
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def demand_seconds(pid: int, proc: Path = Path("/proc")) -> float | None:
    """Seconds process ``pid`` has wanted a CPU (running or runnable), over all
    its threads; its CPU time where the kernel keeps no schedstats; None when it
    is gone or there is no ``/proc``."""
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
        return sum(parse_schedstat((t / "schedstat").read_text()) for t in tasks)
    except (OSError, ValueError):
        pass
    try:
        return parse_stat_cpu((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class DemandMeter:
    """One child's CPU demand (share of wall time it wanted a core) over the
    last completed window; time passed in."""

    mark_t: float
    mark: float | None
    demand: float | None = None  # None until a whole window was measured

    def sample(self, now: float, seconds: float | None, window_s: float) -> None:
        if seconds is None or self.mark is None:  # unreadable: count it busy (the cautious side)
            self.demand = 1.0
            return
        if now - self.mark_t >= window_s:
            self.demand = max(0.0, seconds - self.mark) / (now - self.mark_t)
            self.mark_t, self.mark = now, seconds
