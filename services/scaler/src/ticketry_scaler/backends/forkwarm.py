"""Imported last by the fork server (``prefork``), after the renderer's module:
the start-up work every forked renderer would otherwise repeat.

Without it, nearly all of a forked renderer's CPU before its first heartbeat
(0.28 s by cProfile) goes to two things: importing the event loop and anyio's
asyncio backend, which FastStream loads when it starts, and the full garbage
collection that ``ticketry.runtime.freeze_startup_heap`` runs over the whole
heap the server had imported (0.4 s of wall time under load). So the server
does both once: it imports those modules, then collects and moves its heap to
the permanent generation (``gc.freeze``, as the ``gc`` docs advise right before
forking without exec). A child's own collection then only looks at what it
allocated itself, and its pages of the server's objects stay shared.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os

# Imported by a renderer when it starts, not when its module is imported; with
# S3 storage also its client (aiobotocore, botocore, aiohttp: ~2 s of import
# under load, paid at the first batch otherwise).
STARTUP_MODULES = ("uvloop", "anyio._backends._asyncio") + (
    ("ticketry.s3store",) if os.environ.get("TICKETRY_STORAGE_BACKEND") == "s3" else ()
)

for _name in STARTUP_MODULES:
    with contextlib.suppress(ImportError):  # not every preloaded command uses them
        importlib.import_module(_name)

gc.collect()
gc.freeze()
