"""What comes of a failed try to mail an order, as a table: what the SMTP
client raised (``smtp_failure``), then retry or dead letter (``next_step``)."""

from __future__ import annotations

import aiosmtplib
import pytest
from ticketry_api.core.deliveries import DeadLetter, Decision, Failure, Retry
from ticketry_api.mail.config import MailSettings
from ticketry_api.mail.mailer import next_step, smtp_failure

SETTINGS = MailSettings(mail_max_attempts=4, mail_backoff_base_s=30.0, mail_backoff_cap_s=100.0)

GREYLISTED = aiosmtplib.SMTPDataError(451, "4.3.0 try again later")
NO_MAILBOX = aiosmtplib.SMTPDataError(550, "5.1.1 no such mailbox")
RCPT_REFUSED = aiosmtplib.SMTPRecipientsRefused([aiosmtplib.SMTPRecipientRefused(550, "unknown user", "x@y.z")])
RCPT_LATER = aiosmtplib.SMTPRecipientsRefused([aiosmtplib.SMTPRecipientRefused(452, "mailbox full", "x@y.z")])


@pytest.mark.parametrize(
    ("exc", "failure"),
    [
        (GREYLISTED, Failure("SMTP 451 4.3.0 try again later", "retryable")),
        (NO_MAILBOX, Failure("SMTP 550 5.1.1 no such mailbox", "permanent")),
        (RCPT_REFUSED, Failure("SMTP 550 unknown user", "permanent")),
        (RCPT_LATER, Failure("SMTP 452 mailbox full", "retryable")),
        (TimeoutError(), Failure("timed out after 5 s")),
        (aiosmtplib.SMTPTimeoutError("read timed out"), Failure("timed out after 5 s")),
        (ConnectionRefusedError(111, "refused"), Failure("ConnectionRefusedError: [Errno 111] refused")),
        (aiosmtplib.SMTPServerDisconnected("lost"), Failure("SMTPServerDisconnected: lost")),
    ],
)  # fmt: skip
def test_what_a_failed_try_was(exc: Exception, failure: Failure) -> None:
    assert smtp_failure(exc, 5.0) == failure


@pytest.mark.parametrize(
    ("attempt", "exc", "expected"),
    [
        # a 4xx, a timeout or a lost connection is retried after half to all of base·2^(n-1), capped
        (1, GREYLISTED, Retry(30.0)),
        (2, TimeoutError(), Retry(60.0)),
        (3, aiosmtplib.SMTPServerDisconnected("lost"), Retry(100.0)),
        # the last try failing is a dead letter naming the last failure
        (4, GREYLISTED, DeadLetter("gave up after 4 attempt(s); last: SMTP 451 4.3.0 try again later")),
        (4, TimeoutError(), DeadLetter("gave up after 4 attempt(s); last: timed out after 5 s")),
        # a 5xx is dead at once: retrying cannot help
        (1, NO_MAILBOX, DeadLetter("refused: SMTP 550 5.1.1 no such mailbox")),
        (1, RCPT_REFUSED, DeadLetter("refused: SMTP 550 unknown user")),
    ],
)
def test_retried_or_dead_lettered(attempt: int, exc: Exception, expected: Decision) -> None:
    got = next_step(attempt, smtp_failure(exc, 5.0), SETTINGS)
    if isinstance(expected, Retry):
        assert isinstance(got, Retry)
        assert expected.delay_s / 2 <= got.delay_s <= expected.delay_s
    else:
        assert got == expected
