"""Decides and records, changes nothing: for trying policies against live traffic."""

from __future__ import annotations

import logging

from ticketry_scaler.backends import BackendStatus

log = logging.getLogger(__name__)


class DryRunBackend:
    name = "dry-run"

    def __init__(self, initial: int = 0) -> None:
        self._target = initial

    async def start(self) -> None:
        return None

    async def status(self) -> BackendStatus:
        # Pretends the target is met: nothing runs, so there is nothing else to report.
        return BackendStatus(target=self._target, running=self._target)

    async def scale(self, replicas: int) -> None:
        log.info("dry-run scale", extra={"from": self._target, "to": replicas})
        self._target = replicas

    async def aclose(self) -> None:
        return None
