"""The tests' inbox: a real SMTP server process (``tests.smtp_sink``) and what it received."""

from __future__ import annotations

import email
import email.policy
import os
import sys
from email.message import EmailMessage
from pathlib import Path

from ticketry_devstack.procs import Proc


def sink_proc(out: Path, port: int, hold: int | None = None) -> Proc:
    """The SMTP sink writing into ``out``, on ``port`` (``hold``: see ``tests.smtp_sink``)."""
    argv = [sys.executable, "-m", "tests.smtp_sink", str(out), str(port)]
    argv += ["--hold", str(hold)] if hold is not None else []
    return Proc("smtp", argv, dict(os.environ), out.parent / f"{out.name}.log")


def mail_env(port: int, **over: str) -> dict[str, str]:
    """The settings that point a stack's mailer at the sink, with quick retries."""
    return {
        "TICKETRY_SMTP_URL": f"smtp://127.0.0.1:{port}", "TICKETRY_MAIL_BACKOFF_BASE_S": "0.3",
        "TICKETRY_MAIL_BACKOFF_CAP_S": "1", "TICKETRY_MAIL_MAX_ATTEMPTS": "4", "TICKETRY_MAIL_TIMEOUT_S": "5",
        "TICKETRY_MAIL_CLAIM_IDLE_MS": "10000", **over,
    }  # fmt: skip


def received(out: Path) -> list[EmailMessage]:
    """Every message the sink accepted, in order."""
    msgs = []
    for path in sorted(out.glob("*.eml")):
        msg = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        assert isinstance(msg, EmailMessage)
        msgs.append(msg)
    return msgs


def to(out: Path, address: str) -> list[EmailMessage]:
    """The messages the sink accepted for ``address``."""
    return [m for m in received(out) if m["To"] == address]


def parts(msg: EmailMessage) -> dict[str, list[EmailMessage]]:
    """A message's leaf parts by content type (``text/plain``, ``application/pdf``, …)."""
    out: dict[str, list[EmailMessage]] = {}
    for p in msg.walk():
        if not p.is_multipart():
            assert isinstance(p, EmailMessage)
            out.setdefault(p.get_content_type(), []).append(p)
    return out
