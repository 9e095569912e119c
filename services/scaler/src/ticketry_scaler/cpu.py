"""How many renderers this host's cores can feed (the local backend's CPU cap).

A renderer is one single-threaded, CPU-bound process while it has work
(~450 tickets per CPU-second here, however many run). On two idle cores two
of them render about 1.5x what one does; a third only takes CPU from the other
two, and one forked mid-burst takes it while it starts (measured: a 2,000-ticket
burst with renderers forked up to four ran at 68 % of two fixed renderers). So
the local backend stops adding renderers once they have the cores. ``cap`` is
the cores this process may use:

* the CPUs of its affinity mask (``os.sched_getaffinity``: taskset, cpusets),
* bounded by its cgroup's CPU quota, rounded up (a container limited to 1.5
  CPUs still gets more from two renderers than from one): cgroup v2
  ``cpu.max``, cgroup v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``, the
  tightest along the path from its own cgroup to the root.

Up to ``cap`` renderers run whenever asked for. Past it, what decides is the
CPU the renderers actually *get*, summed over them (``used``, in cores, from
``/proc/<pid>/task/*/schedstat`` over the last window), not how many are busy:

* below ``GROW_BELOW`` of the cap, the cores are not feeding the renderers
  (they wait on I/O, or the machine is busy with other work): one more;
* at ``SHED_ABOVE`` of the cap or more, the renderers have the cores: a
  renderer past the cap only competes, one is drained;
* in between, or until every renderer has been measured, hold.

Not a count of busy renderers: on a machine loaded by other work (load 9-13 on
these 2 cores) a CPU-bound renderer gets a fifth of a core and waits the rest,
and four renderers finished a 10,000-ticket order at 189-319/s against 160-213/s
for two, in the same run: capped at two busy ones, the order took twice as long
as under the old policy. Whether the renderer added last raised the rate at all
is the scaler's plateau rule (``policy.plateau``).

The functions that read files take their paths, so they are tested on plain
files; :func:`cpu_allowed` is pure.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

# Shares of the cap (cores): below GROW_BELOW the renderers leave CPU unused,
# at SHED_ABOVE they have the cores. Apart, so one renderer more or less does
# not flip the answer (two renderers with ~1.45 cores beside the api and Redis
# on two cores neither grow nor shrink).
GROW_BELOW: float = 0.6
SHED_ABOVE: float = 0.85
CPU_WINDOW_S: float = 1.0

CGROUP_ROOT = Path("/sys/fs/cgroup")
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_allowed(
    wanted: int,
    slots: int,
    used: float | None,
    cap: int,
    grow_below: float = GROW_BELOW,
    shed_above: float = SHED_ABOVE,
) -> int:
    """Renderer slots the local backend may run now.

    ``wanted``: what the scaler asked for (already within min and max);
    ``slots``: how many run now; ``used``: the CPU (in cores) they got over the
    last window, ``None`` while one of them has not been measured for a whole
    window; ``cap``: this host's usable cores (0: no cap).

    Up to the cap, everything wanted at once. Past it, one step a window: one
    more while ``used < grow_below * cap``, one fewer (never below the cap)
    while ``used >= shed_above * cap``, else hold. Never above ``wanted``.
    """
    if cap <= 0 or wanted <= cap:
        return wanted
    if used is None:
        allowed = slots
    elif used >= shed_above * cap:
        allowed = slots - 1
    elif used < grow_below * cap:
        allowed = slots + 1
    else:
        allowed = slots
    return min(wanted, max(cap, allowed))


def cores_full(used: float | None, cap: int, grow_below: float = GROW_BELOW) -> bool:
    """The renderers get the cores: :func:`cpu_allowed` would not add one."""
    return cap > 0 and used is not None and used >= grow_below * cap


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
    """Seconds on a CPU from one ``schedstat`` line (nanoseconds on a CPU, on a
    run queue, time slices: https://docs.kernel.org/scheduler/sched-stats.html)."""
    return int(text.split()[0]) / 1e9


def parse_stat_cpu(text: str) -> float:
    """User + system CPU seconds from a ``/proc/<pid>/stat`` line (proc(5):
    after the name in parentheses, utime and stime are the 12th and 13th)."""
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def cpu_seconds(pid: int, proc: Path = Path("/proc")) -> float | None:
    """CPU seconds of process ``pid`` over all its threads (``schedstat``, in
    nanoseconds; ``stat`` in clock ticks where the kernel keeps no schedstats);
    None when it is gone or there is no ``/proc``."""
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
        return sum(parse_schedstat((t / "schedstat").read_text()) for t in tasks)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return parse_stat_cpu((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class CpuMeter:
    """One child's CPU share (cores) over the last completed window; time passed in."""

    mark_t: float
    mark: float | None
    share: float | None = None  # None until a whole window was measured

    def sample(self, now: float, seconds: float | None, window_s: float) -> None:
        if seconds is None or self.mark is None:  # unreadable: count a whole core (the cautious side)
            self.share = 1.0
            return
        if now - self.mark_t >= window_s:
            self.share = max(0.0, seconds - self.mark) / (now - self.mark_t)
            self.mark_t, self.mark = now, seconds
