"""Process-level settings shared by the services."""

from __future__ import annotations

import gc
import os
from typing import Final

from prometheus_client import values

METRICS_DIR_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own name


def freeze_startup_heap() -> None:
    """Take what start-up allocated (modules, models, clients: never garbage)
    out of the cyclic collector's reach with ``gc.freeze``. A full collection
    otherwise walks all of it: measured in the api under POST load, a 63 ms
    stall of the event loop, every request in flight waiting it out. Call once
    the service's long-lived objects exist, before it takes work."""
    gc.collect()
    gc.freeze()


def metrics_dir() -> str | None:
    """The directory this process keeps its Prometheus values in for another
    process to serve (``PROMETHEUS_MULTIPROC_DIR``, set by the api's supervisor
    for its workers and by the scaler for renderers), or None: it serves its
    own. prometheus_client reads the variable once, when first imported, so
    both must agree: a variable set later (or unset) changes nothing."""
    if not getattr(values.ValueClass, "_multiprocess", False):
        return None
    return os.environ.get(METRICS_DIR_ENV) or None
