"""A DNS server for the tests whose answers change (dnslib), run as its own
process (inside a network namespace, where it is the resolver):
``python -m tests.dns_rebinder <plan> <address> [<port>]``.

It answers A queries for the one name in ``<plan>`` and nothing else (an empty
answer for other types, NXDOMAIN for other names), TTL 0. ``<plan>`` is read
at every query: its first line is the name, the next lines addresses; the
n-th A query for the name (counted from 0) gets the address on line
``n % len(addresses)``, so one address is a fixed answer and two alternate,
one query each (a rebinding name's answers); a new plan counts from 0 again.
Each A query is appended to ``<plan>.log`` with the address it got. Prints
``listening`` once bound."""

from __future__ import annotations

import itertools
import sys
import threading
from pathlib import Path

from dnslib import QTYPE, RCODE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSHandler, DNSLogger, DNSServer


class Rebinder(BaseResolver):
    def __init__(self, plan: Path) -> None:
        self.plan, self.log = plan, plan.with_suffix(".log")
        self.count = itertools.count()
        self.seen = ""  # the plan the count is of
        self.lock = threading.Lock()

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        reply = request.reply()
        with self.lock:
            text = self.plan.read_text()
            if text != self.seen:
                self.seen, self.count = text, itertools.count()
            name, *addresses = text.split()
            if str(request.q.qname).rstrip(".") != name:
                reply.header.rcode = RCODE.NXDOMAIN
            elif request.q.qtype == QTYPE.A:
                address = addresses[next(self.count) % len(addresses)]
                with self.log.open("a") as fh:
                    fh.write(f"{address}\n")
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=0))
        return reply


def main(plan: Path, address: str, port: int = 53) -> None:
    quiet = DNSLogger(logf=lambda _: None)
    server = DNSServer(Rebinder(plan), address=address, port=port, logger=quiet)
    print("listening", flush=True)
    server.start()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], *(int(p) for p in sys.argv[3:4]))
