"""The local backend's CPU cap: how many cores this process may use (affinity,
cgroup v1/v2 quotas on plain files), the CPU its children get, the pure rule,
and the backend with real children that wait or spin."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from ticketry_scaler.backends.local import LocalBackend
from ticketry_scaler.cpu import (
    CpuMeter,
    cgroup_cpu_limit,
    cores_full,
    cpu_allowed,
    cpu_seconds,
    parse_cfs,
    parse_cpu_max,
    parse_schedstat,
    parse_stat_cpu,
    usable_cores,
)

from tests.helpers import until


@pytest.mark.parametrize(
    ("wanted", "slots", "used", "cap", "expected"),
    [
        (4, 1, 0.9, 0, 4),  # no cap
        (2, 1, None, 2, 2),  # up to the cap: at once, measured or not
        (1, 2, 1.9, 2, 1),  # fewer wanted: fewer
        (4, 1, None, 2, 2),  # past the cap: the cap at once …
        (4, 2, None, 2, 2),  # … then nothing until every renderer is measured
        (4, 2, 1.9, 2, 2),  # the renderers have the two cores: hold
        (4, 2, 1.45, 2, 2),  # most of them (the api and Redis have the rest): hold
        (4, 2, 0.4, 2, 3),  # a machine busy with other work, or waiting on I/O: one more
        (4, 3, 0.6, 2, 4),
        (4, 4, 0.7, 2, 4),
        (3, 3, 1.9, 2, 2),  # three with the cores: one drained, past the cap only
        (4, 4, 1.8, 2, 3),
        (4, 2, 1.95, 2, 2),  # never below the cap
        (2, 1, 0.9, 1, 1),  # one core, one renderer on it: hold
        (2, 1, 0.3, 1, 2),
    ],
)
def test_cpu_allowed(wanted: int, slots: int, used: float | None, cap: int, expected: int) -> None:
    assert cpu_allowed(wanted, slots, used, cap) == expected


@pytest.mark.parametrize(
    ("used", "cap", "expected"),
    [(None, 2, False), (0.4, 2, False), (1.2, 2, True), (1.9, 2, True), (5.0, 0, False), (0.6, 1, True)],
)
def test_cores_full(used: float | None, cap: int, expected: bool) -> None:
    assert cores_full(used, cap) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("max 100000\n", None), ("150000 100000\n", 1.5), ("200000 50000", 4.0), ("100000", 1.0), ("", None)],
)
def test_parse_cpu_max(text: str, expected: float | None) -> None:
    assert parse_cpu_max(text) == expected


@pytest.mark.parametrize(
    ("quota", "period", "expected"), [("-1\n", "100000\n", None), ("200000", "100000", 2.0), ("50000", "100000", 0.5)]
)
def test_parse_cfs(quota: str, period: str, expected: float | None) -> None:
    assert parse_cfs(quota, period) == expected


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_takes_the_tightest_quota_on_the_path(tmp_path: Path) -> None:
    _write(tmp_path / "cgroup.controllers", "cpu memory\n")
    _write(tmp_path / "cpu.max", "max 100000\n")
    _write(tmp_path / "kubepods" / "cpu.max", "300000 100000\n")
    _write(tmp_path / "kubepods" / "pod1" / "cpu.max", "150000 100000\n")
    _write(tmp_path / "kubepods" / "pod1" / "ctr" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit("0::/kubepods/pod1/ctr\n", tmp_path) == 1.5
    assert cgroup_cpu_limit("0::/kubepods\n", tmp_path) == 3.0
    assert cgroup_cpu_limit("0::/\n", tmp_path) is None


def test_cgroup_v2_in_a_namespace_reads_the_mount_itself(tmp_path: Path) -> None:
    # Inside a container the path names the host's hierarchy; the mount is our own cgroup.
    _write(tmp_path / "cpu.max", "200000 100000\n")
    assert cgroup_cpu_limit("0::/system.slice/docker-abc.scope\n", tmp_path) == 2.0


def test_cgroup_v1_quota_and_no_quota(tmp_path: Path) -> None:
    _write(tmp_path / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    _write(tmp_path / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    _write(tmp_path / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "250000\n")
    _write(tmp_path / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    proc = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n"
    assert cgroup_cpu_limit(proc, tmp_path) == 2.5
    assert cgroup_cpu_limit("4:cpu,cpuacct:/\n", tmp_path) is None
    assert cgroup_cpu_limit("4:cpuacct:/docker/abc\n", tmp_path) is None  # cpuacct alone sets no quota


def test_usable_cores_is_the_affinity_bounded_by_the_quota_rounded_up(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    proc = tmp_path / "cgroup"
    proc.write_text("0::/box\n")
    _write(tmp_path / "fs" / "box" / "cpu.max", "50000 100000\n")  # half a CPU: still one renderer
    assert usable_cores(tmp_path / "fs", proc) == 1
    _write(tmp_path / "fs" / "box" / "cpu.max", f"{(affinity + 0.5) * 100000:.0f} 100000\n")
    assert usable_cores(tmp_path / "fs", proc) == affinity  # a quota above the CPUs we may use
    _write(tmp_path / "fs" / "box" / "cpu.max", "max 100000\n")
    assert usable_cores(tmp_path / "fs", proc) == affinity
    assert usable_cores(tmp_path / "nothing", tmp_path / "no-such-file") == affinity


def test_cpu_time_from_schedstat_or_stat(tmp_path: Path) -> None:
    assert parse_schedstat("1500000000 500000000 42\n") == 1.5
    stat = "123 (ticketry renderer) S 1 123 123 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 1\n"
    assert parse_stat_cpu(stat) == pytest.approx(300 / os.sysconf("SC_CLK_TCK"))
    # Every thread's time counts; without schedstats, the CPU time; a process gone: None
    for tid, line in (("123", "1000000000 9 1"), ("124", "500000000 250000000 1")):
        _write(tmp_path / "123" / "task" / tid / "schedstat", line)
    assert cpu_seconds(123, tmp_path) == 1.5
    _write(tmp_path / "7" / "stat", stat)
    assert cpu_seconds(7, tmp_path) == pytest.approx(300 / os.sysconf("SC_CLK_TCK"))
    assert cpu_seconds(99, tmp_path) is None
    # And our own process's CPU time grows while it computes
    before = cpu_seconds(os.getpid())
    assert before is not None
    sum(i * i for i in range(300_000))
    after = cpu_seconds(os.getpid())
    assert after is not None and after > before


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ([(0.5, 10.4)], None),  # less than a window
        ([(1.0, 10.8)], pytest.approx(0.8)),
        ([(1.0, 10.8), (1.5, 11.3)], pytest.approx(0.8)),  # the next window is not complete
        ([(1.0, 10.8), (2.0, 10.81)], pytest.approx(0.01)),
        ([(0.2, None)], 1.0),  # unreadable: a whole core
    ],
)
def test_cpu_meter(samples: list[tuple[float, float | None]], expected: float | None) -> None:
    meter = CpuMeter(0.0, 10.0)
    for t, seconds in samples:
        meter.sample(t, seconds, 1.0)
    assert meter.share == expected


# -- the backend with real children ---------------------------------------------------------

CHILD = """
import os, signal, sys, time
out, name = sys.argv[1], os.environ["TICKETRY_RENDERER_NAME"]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
open(os.path.join(out, f"{name}.{os.getpid()}.start"), "w").close()
spin = os.path.join(out, "spin")
while True:
    if os.path.exists(spin):  # CPU-bound, like a renderer with work
        for _ in range(100_000):
            pass
    else:  # waiting, like an idle renderer (or one waiting on I/O)
        time.sleep(0.05)
"""


def _backend(tmp_path: Path, cap: int | None, maximum: int = 3) -> LocalBackend:
    """Thresholds far below the product's (a spinning child "has the cores" at
    5 % of one), so the outcome does not depend on how loaded this machine is:
    waiting children use ~0.1 %, spinning ones get a share however many others run."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    (tmp_path / "out").mkdir(exist_ok=True)
    return LocalBackend(
        [sys.executable, str(script), str(tmp_path / "out")],
        instance="cap",
        minimum=1,
        maximum=maximum,
        poll_s=0.02,
        drain_timeout_s=10.0,
        cpu_cap=cap,
        cpu_window_s=0.3,
        grow_below=0.02,
        shed_above=0.05,
    )


def _running(backend: LocalBackend) -> int:
    return sum(1 for s in backend._slots.values() if s.child is not None and s.child.alive)


async def _windows(backend: LocalBackend, n: int) -> None:
    """Until every running child has been measured ``n`` more whole windows."""
    marks = {i: s.child.meter.mark_t for i, s in backend._slots.items() if s.child and s.child.meter}
    seen = dict.fromkeys(marks, 0)

    def advanced() -> bool:
        for i, last in list(marks.items()):
            child = backend._slots[i].child if i in backend._slots else None
            if child is not None and child.meter is not None and child.meter.mark_t != last:
                marks[i], seen[i] = child.meter.mark_t, seen[i] + 1
        return all(v >= n for v in seen.values())

    await until(advanced)


async def test_waiting_children_run_past_the_cap_cpu_bound_ones_are_shed_to_it(tmp_path: Path) -> None:
    backend = _backend(tmp_path, cap=1)
    await backend.start()
    try:
        # Given three wanted on a cap of one, and children that wait rather than compute
        await backend.scale(3)
        # Then all three run (one at a time past the cap, each once the others are measured)
        await until(lambda: _running(backend) == 3)
        status = await backend.status()
        assert (status.target, status.running, status.cores_full) == (3, 3, False)

        # When they all turn CPU-bound, then those past the cap are drained, the
        # highest slots first, down to one, which is then held: the cores are full
        (tmp_path / "out" / "spin").touch()
        await until(lambda: _running(backend) == 1 and not backend._draining)
        await _windows(backend, 3)
        status = await backend.status()
        assert (status.target, status.running, status.cores_full) == (3, 1, True)
        assert [s.child.consumer for s in backend._slots.values() if s.child] == ["cap-r0"]
        assert len(list((tmp_path / "out").glob("*.start"))) == 3  # none started again

        # When it waits again, then the backend grows back to what is wanted
        (tmp_path / "out" / "spin").unlink()
        await until(lambda: _running(backend) == 3)
    finally:
        await backend.aclose()


async def test_without_a_cap_busy_children_all_run(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "spin").touch()
    backend = _backend(tmp_path, cap=0, maximum=2)
    await backend.start()
    try:
        await backend.scale(2)
        await until(lambda: _running(backend) == 2)
        assert not (await backend.status()).cores_full
    finally:
        await backend.aclose()


def test_the_default_cap_is_this_process_s_usable_cores(tmp_path: Path) -> None:
    assert _backend(tmp_path, cap=None).cpu_cap == usable_cores() >= 1
    assert _backend(tmp_path, cap=0).cpu_cap == 0
