"""A real SMTP server for the tests (aiosmtpd), run as its own process:
``python -m tests.smtp_sink <dir> <port> [--delay-s S]``.

Every accepted message is written whole to ``<dir>`` (``<n>.eml``, written
aside and renamed, so a reader never sees half a file). What it answers
depends on the recipient's local part, so one server serves every test:

* ``refuse2…@``: 451 to the first two DATA for that recipient, then 250;
* ``never…@``: 451 to every DATA;
* ``reject…@``: 550 to every DATA;
* anything else: 250.

``--delay-s``: each accepted DATA is answered this much later (a kill test's
batch then takes long enough to be killed in the middle).
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
    def __init__(self, out: Path, delay_s: float) -> None:
        self.out, self.delay_s = out, delay_s
        self.tries: Counter[str] = Counter()
        self.seq = itertools.count(len(list(out.glob("*.eml"))))

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        rcpt = envelope.rcpt_tos[0].lower()
        self.tries[rcpt] += 1
        if rcpt.startswith("never") or (rcpt.startswith("refuse2") and self.tries[rcpt] <= 2):
            return "451 4.3.0 try again later"
        if rcpt.startswith("reject"):
            return "550 5.1.1 no such mailbox"
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
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
    ap.add_argument("--delay-s", type=float, default=0.0)
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    sink = Sink(args.dir, args.delay_s)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(sink, data_size_limit=60_000_000, enable_SMTPUTF8=True), "127.0.0.1", args.port
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
