"""Which PDF store a service uses (``TICKETRY_STORAGE_BACKEND``): files
(``storage.LocalStore``) or S3 (``s3store.S3Store``). Apart from both so
that neither adapter module imports the other."""

from __future__ import annotations

from ticketry.settings import CommonSettings
from ticketry.storage import LocalStore, PdfStore


def open_store(settings: CommonSettings) -> PdfStore:
    """The store the settings name. Opens no connection: the S3 adapter connects
    (and creates its bucket when missing) at its first call."""
    if settings.storage_backend == "s3":
        from ticketry.s3store import S3Store  # botocore loads only where S3 is used

        return S3Store.from_settings(settings)
    return LocalStore(settings.storage_dir)
