"""Where PDFs live. Paths are built only from validated ids (no traversal)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import tempfile
from pathlib import Path

from ticketry.ids import is_valid_id


def pdf_path(storage_dir: Path, order_id: str, ticket_id: str) -> Path:
    """``<storage>/<order id>/<ticket id>.pdf``; refuses anything but our ids."""
    if not (is_valid_id(order_id, "or") and is_valid_id(ticket_id, "tk")):
        raise ValueError("invalid id")
    return storage_dir / order_id / f"{ticket_id}.pdf"


def write_atomic(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Write via a temp file in the same directory, then rename: a reader (or a
    crash) sees the old file or the whole new one, never a partial PDF.

    With ``fsync=False`` the caller makes a whole batch durable at once with
    :func:`sync_storage` before announcing any of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pdf")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_syncfs = getattr(_libc, "syncfs", None)


def sync_storage(storage_dir: Path) -> None:
    """Flush every file (and rename) under ``storage_dir`` to disk: one
    ``syncfs(2)`` for a whole batch instead of an fsync per PDF."""
    fd = os.open(storage_dir, os.O_RDONLY)
    try:
        if _syncfs is None or _syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)
