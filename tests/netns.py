"""Separate "hosts" on one machine (network namespaces): the devstack's
:mod:`ticketry_devstack.hosts`, shared by the tests and ``just up --ha``."""

from __future__ import annotations

from ticketry_devstack.hosts import Host, Lan, can_make_hosts

__all__ = ["Host", "Lan", "can_make_hosts"]
