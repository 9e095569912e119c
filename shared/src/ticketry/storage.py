"""Where PDFs live: one small port (:class:`PdfStore`) and its two adapters.

* :class:`LocalStore` (the default): files ``<storage dir>/<order id>/<ticket
  id>.pdf``, each written atomically, a batch made durable with one
  ``syncfs(2)``; the api and the renderers share the directory (one host, or a
  shared volume).
* :class:`ticketry.s3store.S3Store`: objects with the same names in a bucket of
  an S3-compatible store, for renderers and apis on different hosts; the api
  redirects a download to a presigned URL.

Names are built only from validated ids (no traversal).
:func:`ticketry.pdfstores.open_store` picks the adapter from the settings
(``TICKETRY_STORAGE_BACKEND``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import shutil
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Protocol

from ticketry.ids import is_valid_id


class StorageUnavailable(Exception):
    """The store could not be reached or refused the request (not: a PDF is missing)."""


class PdfStore(Protocol):
    """What the renderer and the api need of where PDFs are kept."""

    async def put_all(self, items: Sequence[tuple[str, str, bytes]]) -> list[Exception | None]:
        """Store each ``(order id, ticket id, pdf)``; one outcome per item (None:
        stored). Every item stored is durable when this returns, so its ticket
        may be announced."""
        ...

    async def stored(self, order_id: str, ticket_ids: Collection[str]) -> set[str]:
        """Which of ``ticket_ids`` (of one order) have a PDF stored."""
        ...

    async def exists(self, order_id: str, ticket_id: str) -> bool: ...

    async def read(self, order_id: str, ticket_id: str) -> bytes | None:
        """The PDF, or None when there is none."""
        ...

    async def download_url(self, order_id: str, ticket_id: str) -> str | None:
        """A presigned URL the buyer can fetch the PDF from, or None: the api serves :meth:`read`."""
        ...

    async def delete_order(self, order_id: str) -> None:
        """Delete every PDF of the order (none there is fine)."""
        ...

    async def read_pass(self, order_id: str, ticket_id: str) -> bytes | None:
        """The ticket's wallet pass (``.pkpass``) kept beside its PDF, or None."""
        ...

    async def put_pass(self, order_id: str, ticket_id: str, pkpass: bytes) -> None:
        """Keep the ticket's wallet pass beside its PDF (replacing one there);
        gone with the order's PDFs (:meth:`delete_order`)."""
        ...

    async def delete_pass(self, order_id: str, ticket_id: str) -> None:
        """Forget the ticket's kept wallet pass (its code changed: the next
        request builds it again); nothing if there is none."""
        ...

    async def aclose(self) -> None: ...


def pdf_key(order_id: str, ticket_id: str) -> str:
    """``<order id>/<ticket id>.pdf``; refuses anything but our ids."""
    if not (is_valid_id(order_id, "or") and is_valid_id(ticket_id, "tk")):
        raise ValueError("invalid id")
    return f"{order_id}/{ticket_id}.pdf"


def pass_key(order_id: str, ticket_id: str) -> str:
    """``<order id>/<ticket id>.pkpass``: a ticket's wallet pass, beside its PDF."""
    return pdf_key(order_id, ticket_id).removesuffix(".pdf") + ".pkpass"


def order_prefix(order_id: str) -> str:
    """``<order id>/``: every PDF of the order is under it."""
    if not is_valid_id(order_id, "or"):
        raise ValueError("invalid id")
    return f"{order_id}/"


def pdf_path(storage_dir: Path, order_id: str, ticket_id: str) -> Path:
    """``<storage>/<order id>/<ticket id>.pdf``; refuses anything but our ids."""
    return storage_dir / pdf_key(order_id, ticket_id)


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


class LocalStore:
    """PDFs as files under ``root``. Its calls do their (small, local) file
    work inline, as the renderer did before there was a port."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def put_all(self, items: Sequence[tuple[str, str, bytes]]) -> list[Exception | None]:
        out: list[Exception | None] = []
        for order_id, ticket_id, pdf in items:
            try:
                write_atomic(pdf_path(self.root, order_id, ticket_id), pdf, fsync=False)
                out.append(None)
            except Exception as exc:
                out.append(exc)
        if any(e is None for e in out):
            # Every PDF of the batch is on disk before any of it is announced.
            sync_storage(self.root)
        return out

    async def stored(self, order_id: str, ticket_ids: Collection[str]) -> set[str]:
        if len(ticket_ids) <= 4:
            return {t for t in ticket_ids if await self.exists(order_id, t)}
        # A batch of one order: one read of its folder, not a stat per ticket.
        try:
            with os.scandir(self.root / order_prefix(order_id)) as folder:
                files = {e.name for e in folder if e.is_file()}
        except (ValueError, FileNotFoundError, NotADirectoryError):
            return set()
        return {t for t in ticket_ids if f"{t}.pdf" in files and is_valid_id(t, "tk")}

    async def exists(self, order_id: str, ticket_id: str) -> bool:
        # is_file, not exists: a stray directory at the path is a storage fault, not a PDF.
        try:
            return pdf_path(self.root, order_id, ticket_id).is_file()
        except ValueError:
            return False

    async def read(self, order_id: str, ticket_id: str) -> bytes | None:
        try:
            return pdf_path(self.root, order_id, ticket_id).read_bytes()
        except (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    async def download_url(self, order_id: str, ticket_id: str) -> str | None:
        return None

    async def read_pass(self, order_id: str, ticket_id: str) -> bytes | None:
        try:
            return (self.root / pass_key(order_id, ticket_id)).read_bytes()
        except (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    async def put_pass(self, order_id: str, ticket_id: str, pkpass: bytes) -> None:
        await asyncio.to_thread(write_atomic, self.root / pass_key(order_id, ticket_id), pkpass)

    async def delete_pass(self, order_id: str, ticket_id: str) -> None:
        with contextlib.suppress(ValueError, FileNotFoundError):
            (self.root / pass_key(order_id, ticket_id)).unlink()

    async def delete_order(self, order_id: str) -> None:
        try:
            folder = self.root / order_prefix(order_id)
        except ValueError:
            return
        await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)

    async def aclose(self) -> None:
        return None
