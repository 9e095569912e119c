"""An order's ticket PDFs joined into one multi-page PDF ("download all", the
order's mail attachment): fast-path stamps of one template by
``ticketry.orderpdf`` (the event's page, fonts and images written once: ~2 kB
a ticket), anything else by PDFium's page import (each ticket's whole file:
~25 kB a fast-path ticket)."""

from __future__ import annotations

import io
import threading

import pypdfium2
from ticketry import orderpdf

# PDFium is one library per process and not thread-safe: one join at a time.
_PDFIUM = threading.Lock()

# Tickets per joined file: a 10,000-ticket order downloads in parts, each a
# bounded piece of work, never one answer of the whole order. A part of
# fast-path stamps of one template is ~0.54 MB (~35 ms of CPU); through PDFium
# (several templates, a ticket rendered in full) about the sum of its
# tickets' files (~6 MB for 250 stamps, ~0.3 s).
PART_SIZE = 250


def join_pdfs(pdfs: list[bytes]) -> bytes:
    """The pages of ``pdfs``, in order, as one PDF. Blocking: run it in a thread.
    One that cannot be read is left out."""
    shared = orderpdf.join(pdfs)  # pure Python: no PDFium, so not under its lock
    if shared is not None:
        return shared
    with _PDFIUM:
        out = pypdfium2.PdfDocument.new()
        try:
            for pdf in pdfs:
                try:
                    src = pypdfium2.PdfDocument(pdf)
                except pypdfium2.PdfiumError:
                    continue
                try:
                    out.import_pages(src)
                finally:
                    src.close()
            buf = io.BytesIO()
            out.save(buf)
            return buf.getvalue()
        finally:
            out.close()
