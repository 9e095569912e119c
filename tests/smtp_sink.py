"""A real SMTP server for the tests (aiosmtpd), run as its own process:
``python -m tests.smtp_sink <dir> <port> [--delay-s S]``.

Every accepted message is written whole to ``<dir>`` (``<n>.eml``, written
aside and renamed, so a reader never sees half a file). What it answers
depends on the recipient's local part, so one server serves every test:

* ``refuse2…@``: 451 to the first two DATA for that recipient, then 250;
* ``never…@``: 451 to every DATA;
* ``reject…@``: 550 to every DATA;
* anything else: 250.

``--hold N``: the N-th message it would accept (counted from 0) is held: its
recipient is written to ``<dir>/held`` and the DATA is never answered, so a
kill test can kill the client while a message is in flight and none is
between its 250 and the client's record of it. Its connection lost, the held
message is dropped, as a real server drops a DATA it never answered.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
from collections import Counter
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session


class Sink:
    def __init__(self, out: Path, hold: int | None) -> None:
        self.out, self.hold = out, hold
        self.tries: Counter[str] = Counter()
        self.seq = itertools.count(len(list(out.glob("*.eml"))))
        self.accepting = itertools.count()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        rcpt = envelope.rcpt_tos[0].lower()
        self.tries[rcpt] += 1
        if rcpt.startswith("never") or (rcpt.startswith("refuse2") and self.tries[rcpt] <= 2):
            return "451 4.3.0 try again later"
        if rcpt.startswith("reject"):
            return "550 5.1.1 no such mailbox"
        if next(self.accepting) == self.hold:
            (self.out / "held").write_text(rcpt)
            await asyncio.Event().wait()  # cancelled by aiosmtpd when the client's connection is lost
        data: Any = envelope.original_content or envelope.content
        path = self.out / f"{next(self.seq):06d}.eml"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data if isinstance(data, bytes) else data.encode())
        os.replace(tmp, path)
        return "250 2.0.0 queued"


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("port", type=int)
    ap.add_argument("--hold", type=int, default=None)
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    sink = Sink(args.dir, args.hold)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(sink, data_size_limit=60_000_000, enable_SMTPUTF8=True), "127.0.0.1", args.port
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
