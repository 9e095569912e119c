"""Separate "hosts" on one machine: network namespaces, addressed in the
loopback range only (127.77.n.0/24, with ``route_localnet`` so 127/8 may cross
a veth), so nothing of theirs can reach a real network. Needs root and iproute2.

Two shapes:

* :class:`Host` alone (``Host(ns, n)``): a veth pair between the root namespace
  (``127.77.n.1``, the host's :attr:`Host.gateway`) and the host (``127.77.n.2``).
  The host reaches what listens in the root namespace; hosts do not reach each
  other (the multi-host renderer test).
* :class:`Lan`: a bridge in the root namespace (``127.77.s.1``) with hosts on it
  (``127.77.s.2``, ``.3``, …, :meth:`Lan.host`): every host reaches every other
  and the root namespace reaches them all (``just up --ha``). The bridge carries
  frames, so no forwarding is switched on anywhere.

Either way :meth:`Host.cut` pulls a host's cable (its link in the root
namespace goes down) and :meth:`Host.restore` plugs it back;
:meth:`Host.kill_all` SIGKILLs every process in it (a machine lost at once).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


def _ip(*args: str, ns: str | None = None) -> None:
    argv = ["ip", *(("netns", "exec", ns, "ip") if ns else ()), *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")


def _sysctl(ns: str | None, *settings: str) -> None:
    argv = [*(("ip", "netns", "exec", ns) if ns else ()), "sysctl", "-qw", *settings]
    subprocess.run(argv, check=True, capture_output=True)


def can_make_hosts() -> str | None:
    """None when this machine can make hosts, else why not."""
    if os.geteuid() != 0:
        return "needs root for ip netns"
    if shutil.which("ip") is None:
        return "needs iproute2 (infra/bootstrap.sh installs it)"
    return None


def netns_exists(ns: str) -> bool:
    return Path("/var/run/netns", ns).exists()


def netns_pids(ns: str) -> list[int]:
    """Processes whose network namespace is ``ns`` (``ip netns pids``)."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split() if p.isdigit()]


def _used_subnets() -> set[int]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=False).stdout
    used = set()
    for word in out.split():
        if word.startswith("127.77."):
            with contextlib.suppress(ValueError, IndexError):
                used.add(int(word.split(".")[2]))
    return used


def free_subnet(first: int = 100, last: int = 250) -> int:
    """An ``n`` in ``first..last`` whose 127.77.n.0/24 no interface uses now."""
    used = _used_subnets()
    for n in range(first, last + 1):
        if n not in used and not Path(f"/sys/class/net/tkt{n}br").exists():
            return n
    raise RuntimeError(f"no free 127.77.n.0/24 for n in {first}..{last}")


@dataclass
class Host:
    """One namespace: its name ``ns``, its veth ends and address. ``index``
    picks its subnet (alone) or its place on ``lan``."""

    ns: str
    index: int
    lan: Lan | None = None

    @property
    def root_if(self) -> str:
        return f"tkt{self.index}r" if self.lan is None else f"tk{self.lan.subnet}h{self.index}r"

    @property
    def host_if(self) -> str:
        return f"tkt{self.index}h" if self.lan is None else f"tk{self.lan.subnet}h{self.index}h"

    @property
    def gateway(self) -> str:
        """The root namespace's address as this host sees it."""
        return f"127.77.{self.index}.1" if self.lan is None else self.lan.gateway

    @property
    def address(self) -> str:
        """This host's own address (reachable from the root namespace)."""
        return f"127.77.{self.index}.2" if self.lan is None else f"127.77.{self.lan.subnet}.{self.index + 1}"

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this host (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def create(self) -> Host:
        self.destroy()
        _ip("netns", "add", self.ns)
        _ip("link", "set", "lo", "up", ns=self.ns)
        _ip("link", "add", self.root_if, "type", "veth", "peer", "name", self.host_if)
        _ip("link", "set", self.host_if, "netns", self.ns)
        if self.lan is None:
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.root_if)
        else:
            _ip("link", "set", self.root_if, "master", self.lan.bridge)
        _ip("link", "set", self.root_if, "up")
        _ip("addr", "add", f"{self.address}/24", "dev", self.host_if, ns=self.ns)
        _ip("link", "set", self.host_if, "up", ns=self.ns)
        _sysctl(None, "net.ipv4.conf.all.route_localnet=1", f"net.ipv4.conf.{self.root_if}.route_localnet=1")
        _sysctl(self.ns, "net.ipv4.conf.all.route_localnet=1", f"net.ipv4.conf.{self.host_if}.route_localnet=1")
        return self

    def cut(self) -> None:
        """Pull the cable: the host's link goes down (its processes live on)."""
        _ip("link", "set", self.root_if, "down")

    def restore(self) -> None:
        """Plug the cable back in."""
        _ip("link", "set", self.root_if, "up")

    def pids(self) -> list[int]:
        return netns_pids(self.ns) if netns_exists(self.ns) else []

    def kill_all(self) -> list[int]:
        """SIGKILL every process in this host at once; the pids killed."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def destroy(self) -> None:
        """Kill what still runs in it, then remove its link and namespace."""
        self.kill_all()
        subprocess.run(["ip", "link", "del", self.root_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, check=False)


@dataclass
class Lan:
    """A bridge ``tkt<subnet>br`` in the root namespace holding 127.77.subnet.1/24,
    and the hosts plugged into it."""

    subnet: int
    hosts: list[Host] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"tkt{self.subnet}br"

    @property
    def gateway(self) -> str:
        return f"127.77.{self.subnet}.1"

    def create(self) -> Lan:
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        _sysctl(None, "net.ipv4.conf.all.route_localnet=1", f"net.ipv4.conf.{self.bridge}.route_localnet=1")
        return self

    def host(self, ns: str) -> Host:
        """A new host on this LAN, namespace ``ns`` (created now)."""
        made = Host(ns, len(self.hosts) + 1, self).create()
        self.hosts.append(made)
        return made

    def destroy(self) -> None:
        for h in self.hosts:
            h.destroy()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
