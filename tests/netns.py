"""Separate "hosts" on one machine: network namespaces joined to the root
namespace by veth pairs, addressed in the loopback range only (127.77.n.0/24,
with ``route_localnet`` so 127/8 may cross a veth). Needs root and iproute2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


def _ip(*args: str, ns: str | None = None) -> None:
    argv = ["ip", *(("netns", "exec", ns, "ip") if ns else ()), *args]
    subprocess.run(argv, check=True, capture_output=True)


def _sysctl(ns: str | None, *settings: str) -> None:
    argv = [*(("ip", "netns", "exec", ns) if ns else ()), "sysctl", "-qw", *settings]
    subprocess.run(argv, check=True, capture_output=True)


def can_make_hosts() -> str | None:
    """None when this machine can run the multi-host test, else why not."""
    if os.geteuid() != 0:
        return "needs root for ip netns"
    if shutil.which("ip") is None:
        return "needs iproute2 (infra/bootstrap.sh installs it)"
    return None


@dataclass
class Host:
    """One namespace: ``ns`` name, its veth ends and addresses."""

    ns: str
    index: int

    @property
    def root_if(self) -> str:
        return f"tkt{self.index}r"

    @property
    def host_if(self) -> str:
        return f"tkt{self.index}h"

    @property
    def gateway(self) -> str:
        """The root side's address, where this host reaches Redis."""
        return f"127.77.{self.index}.1"

    def create(self) -> Host:
        self.destroy()
        _ip("netns", "add", self.ns)
        _ip("link", "set", "lo", "up", ns=self.ns)
        _ip("link", "add", self.root_if, "type", "veth", "peer", "name", self.host_if)
        _ip("link", "set", self.host_if, "netns", self.ns)
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.root_if)
        _ip("link", "set", self.root_if, "up")
        _ip("addr", "add", f"127.77.{self.index}.2/24", "dev", self.host_if, ns=self.ns)
        _ip("link", "set", self.host_if, "up", ns=self.ns)
        _sysctl(None, "net.ipv4.conf.all.route_localnet=1", f"net.ipv4.conf.{self.root_if}.route_localnet=1")
        _sysctl(self.ns, "net.ipv4.conf.all.route_localnet=1", f"net.ipv4.conf.{self.host_if}.route_localnet=1")
        return self

    def cut(self) -> None:
        """Pull the cable: the host's link goes down."""
        _ip("link", "set", self.root_if, "down")

    def destroy(self) -> None:
        subprocess.run(["ip", "link", "del", self.root_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, check=False)
