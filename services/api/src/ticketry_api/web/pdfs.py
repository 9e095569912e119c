"""An order's ticket PDFs joined into one multi-page PDF ("download all")."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pypdfium2

# PDFium is one library per process and not thread-safe: one join at a time.
_PDFIUM = threading.Lock()

# Tickets per joined file: a 10,000-ticket order downloads in parts, each a
# bounded piece of work (~0.3 s, ~9 MB), never one 380 MB answer.
PART_SIZE = 250


def join_pdfs(paths: list[Path]) -> bytes:
    """The pages of ``paths``, in order, as one PDF. Blocking: run it in a thread.
    A file that went missing meanwhile (its order was just cancelled) is left out."""
    with _PDFIUM:
        out = pypdfium2.PdfDocument.new()
        try:
            for path in paths:
                try:
                    src = pypdfium2.PdfDocument(path)
                except (FileNotFoundError, pypdfium2.PdfiumError):
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
