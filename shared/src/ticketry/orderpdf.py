"""An order's stamped tickets as one PDF whose pages share the event's page (pure).

Every fast-path ticket is its event look's template (WeasyPrint's page, its
fonts, images and the ids' fonts) plus an incremental update of a few objects
(``fastpath.increment``): the overlay, the holder's fonts. Tickets stamped from
one template share those bytes, so :func:`join` writes the template once and,
for each ticket, its objects renumbered and a page of its own (the template's
page, its overlay and holder fonts swapped in), every dictionary packed in
object streams and identical streams (a font of the same glyphs, the same
name's ToUnicode) written once. PDFium's page import (``join_pdfs`` in the api)
copies each ticket's whole file instead: ~25 kB a page against ~2 kB here.

``join`` answers None for anything else (tickets of several templates, a full
render, a file from another producer); the caller then joins as before.
"""

from __future__ import annotations

import hashlib
import re
import struct
import zlib
from collections.abc import Sequence

_OBJ = re.compile(rb"(\d+) 0 obj\n")
_REF = re.compile(rb"(\d+) 0 R")
_LENGTH = re.compile(rb"/Length (\d+)")
_PREV = re.compile(rb"/Prev (\d+)")
_ROOT = re.compile(rb"/Root (\d+) 0 R")
_INFO = re.compile(rb"/Info (\d+) 0 R")
OBJECTS_PER_STREAM = 200


class _Ticket:
    """One stamp's own objects: (number, dictionary) and (number, stream object body)."""

    def __init__(self, tail: bytes) -> None:
        self.plain: list[tuple[int, bytes]] = []
        self.streams: list[tuple[int, bytes]] = []
        pos = 0
        while (m := _OBJ.match(tail, pos)) is not None:
            num, start = int(m.group(1)), m.end()
            head_end = tail.index(b">>", start) + 2
            head = tail[start:head_end]
            if b"/Type /XRef" in head:
                return
            length = _LENGTH.search(head)
            if length is None or not tail.startswith(b"\nstream\n", head_end):
                raise ValueError("not a stamp's object")
            data_start = head_end + len(b"\nstream\n")
            data_end = data_start + int(length.group(1))
            body = tail[start : data_end + len(b"\nendstream")]
            if b"/Type /ObjStm" in head:
                self.plain.extend(_unpack(head, zlib.decompress(tail[data_start:data_end])))
            else:
                self.streams.append((num, body))
            pos = tail.index(b"endobj\n", data_end) + len(b"endobj\n")
        raise ValueError("a stamp without its cross-reference stream")


def _unpack(head: bytes, data: bytes) -> list[tuple[int, bytes]]:
    n = int(re.search(rb"/N (\d+)", head).group(1))  # type: ignore[union-attr]
    first = int(re.search(rb"/First (\d+)", head).group(1))  # type: ignore[union-attr]
    nums = [int(v) for v in data[:first].split()]
    pairs = [(nums[2 * i], first + nums[2 * i + 1]) for i in range(n)]
    ends = [start for _, start in pairs[1:]] + [len(data)]
    return [(num, data[start:end].strip()) for (num, start), end in zip(pairs, ends, strict=True)]


def _renumber(body: bytes, mapping: dict[int, int]) -> bytes:
    """``body``'s references renumbered (a stream's data is never touched)."""
    split = body.find(b">>\nstream\n")
    head, rest = (body, b"") if split < 0 else (body[: split + 2], body[split + 2 :])
    return _REF.sub(lambda m: b"%d 0 R" % mapping.get(int(m.group(1)), int(m.group(1))), head) + rest


def _base_object(base: bytes, num: int) -> bytes | None:
    """The last plain (not compressed) definition of object ``num`` in ``base``."""
    at = base.rfind(b"\n%d 0 obj" % num)
    if at < 0:
        return None
    start = base.index(b"obj", at) + 3
    end = base.index(b"endobj", start)
    body = base[start:end].strip()
    return None if b"stream" in body else body


def join(pdfs: Sequence[bytes]) -> bytes | None:
    """The tickets' pages, in order, as one PDF sharing their template; None when
    they are not all stamps of one template."""
    if not pdfs:
        return None
    try:
        return _join(pdfs)
    except (ValueError, IndexError, AttributeError, zlib.error):
        return None


def _join(pdfs: Sequence[bytes]) -> bytes | None:
    first = pdfs[0]
    prev_m = _PREV.search(first, first.rfind(b"/Type /XRef"))
    if prev_m is None:
        return None
    prev = int(prev_m.group(1))
    base_end = first.index(b"%%EOF", prev) + len(b"%%EOF\n")
    base = first[:base_end]
    if any(not p.startswith(base) for p in pdfs):
        return None
    trailer = first[first.rfind(b"/Type /XRef") :]
    root_m, info_m = _ROOT.search(trailer), _INFO.search(trailer)
    if root_m is None:
        return None
    # The template's page, resources and font dictionary: plain objects of its last update.
    page_num = max(int(m.group(1)) for m in re.finditer(rb"\n(\d+) 0 obj\s*<<\s*/Type /Page\b", base))
    page = _base_object(base, page_num)
    if page is None:
        return None
    parent = re.search(rb"/Parent (\d+) 0 R", page)
    res = re.search(rb"/Resources (\d+) 0 R", page)
    if parent is None or res is None:
        return None
    res_num = int(res.group(1))
    resources = _base_object(base, res_num)
    if resources is None:
        return None
    # The font dictionary: in the resources, or an object of its own (then copied per page too).
    font = re.search(rb"/Font (\d+) 0 R", resources)
    font_num = int(font.group(1)) if font else None
    fonts = _base_object(base, font_num) if font_num is not None else None
    if font_num is not None and fonts is None:
        return None
    copied = [page_num, res_num] + ([font_num] if font_num is not None else [])
    size = int(re.search(rb"/Size (\d+)", first[prev:]).group(1))  # type: ignore[union-attr]

    plain: list[tuple[int, bytes]] = []
    streams: list[tuple[int, bytes]] = []
    seen: dict[bytes, int] = {}  # a stream's digest → the number it was written under
    kids: list[int] = []
    next_num = size
    for pdf in pdfs:
        ticket = _Ticket(pdf[base_end:])
        mapping: dict[int, int] = {}
        for num in [*(n for n, _ in ticket.plain), *(n for n, _ in ticket.streams), *copied]:
            mapping[num], next_num = next_num, next_num + 1
        for num, body in ticket.streams:  # streams first: a repeated one maps to its first copy
            digest = hashlib.sha256(body).digest()
            if digest in seen:
                mapping[num] = seen[digest]
            else:
                seen[digest] = mapping[num]
                streams.append((mapping[num], body))
        plain.extend((mapping[num], _renumber(body, mapping)) for num, body in ticket.plain)
        if font_num is not None and fonts is not None:
            plain.append((mapping[font_num], _renumber(fonts, mapping)))
        plain.append((mapping[res_num], _renumber(resources, mapping)))
        plain.append((mapping[page_num], _renumber(page, mapping)))
        kids.append(mapping[page_num])
    refs = b" ".join(b"%d 0 R" % k for k in kids)
    plain.append((int(parent.group(1)), b"<< /Type /Pages /Kids [%s] /Count %d >>" % (refs, len(kids))))
    plain.append((int(root_m.group(1)), b"<< /Type /Catalog /Pages %d 0 R >>" % int(parent.group(1))))
    tail = b"/Root %s 0 R" % root_m.group(1) + (b" /Info %s 0 R" % info_m.group(1) if info_m else b"")
    return base + update(plain, streams, len(base), next_num, tail, prev)


def update(
    plain: Sequence[tuple[int, bytes]],
    streams: Sequence[tuple[int, bytes]],
    offset: int,
    size: int,
    tail: bytes,
    prev: int | None,
    level: int = 6,
) -> bytes:
    """An incremental update of a file of ``offset`` bytes whose last
    cross-reference section is at ``prev``: the stream objects as they are, the
    dictionaries packed in object streams, a cross-reference stream (PDF 1.5)
    carrying ``tail`` (``/Root …``). ``size`` is the first free object number.
    With ``prev`` None, the body of a whole file after its ``offset`` bytes of header."""
    parts: list[bytes] = []
    entries: dict[int, tuple[int, int, int]] = {}  # number → (type, field 2, field 3)
    if prev is None:
        entries[0] = (0, 0, 0xFFFF)  # the head of the (empty) free list
    for num, body in streams:
        obj = b"%d 0 obj\n%s\nendobj\n" % (num, body)
        entries[num] = (1, offset, 0)
        parts.append(obj)
        offset += len(obj)
    for i in range(0, len(plain), OBJECTS_PER_STREAM):
        chunk = plain[i : i + OBJECTS_PER_STREAM]
        stm, size = size, size + 1
        heads, pos = [], 0
        for num, body in chunk:
            heads.append(b"%d %d" % (num, pos))
            pos += len(body) + 1
        head = b" ".join(heads) + b"\n"
        packed = zlib.compress(head + b"\n".join(body for _, body in chunk), level)
        obj = b"%d 0 obj\n<</Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d>>\nstream\n%s\n" \
              b"endstream\nendobj\n" % (stm, len(chunk), len(head), len(packed), packed)  # fmt: skip
        entries[stm] = (1, offset, 0)
        entries.update((num, (2, stm, k)) for k, (num, _) in enumerate(chunk))
        parts.append(obj)
        offset += len(obj)
    xref_num, size = size, size + 1
    entries[xref_num] = (1, offset, 0)
    nums = sorted(entries)
    ranges: list[list[int]] = []  # [first, count] of consecutive numbers
    for n in nums:
        if ranges and ranges[-1][0] + ranges[-1][1] == n:
            ranges[-1][1] += 1
        else:
            ranges.append([n, 1])
    rows = b"".join(struct.pack(">BIH", *entries[n]) for n in nums)
    # A ticket's ~10 rows are ~70 bytes: packing them saves ~25 bytes for ~15 µs
    # (zlib's set-up), a tenth of the stamp's writing; an order's and a whole file's are packed.
    flate = len(rows) > 512 or prev is None
    if flate:
        rows = zlib.compress(rows, level)
    index = b" ".join(b"%d %d" % (first, count) for first, count in ranges)
    fields = b"" if prev is None else b" /Prev %d" % prev
    fields += b" /Filter /FlateDecode" if flate else b""
    parts.append(
        b"%d 0 obj\n<</Type /XRef /Size %d /W [1 4 2] /Index [%s] %s%s /Length %d>>\n"
        b"stream\n%s\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n"
        % (xref_num, size, index, tail, fields, len(rows), rows, offset)
    )
    return b"".join(parts)
