"""An order's ticket PDFs joined into one multi-page PDF ("download all")."""

from __future__ import annotations

import io
import threading

import pypdfium2

# PDFium is one library per process and not thread-safe: one join at a time.
_PDFIUM = threading.Lock()

# Tickets per joined file: a 10,000-ticket order downloads in parts, each a
# bounded piece of work (~0.3 s, ~9 MB), never one 380 MB answer.
PART_SIZE = 250


def join_pdfs(pdfs: list[bytes]) -> bytes:
    """The pages of ``pdfs``, in order, as one PDF. Blocking: run it in a thread.
    One that cannot be read is left out."""
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
