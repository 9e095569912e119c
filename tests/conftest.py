"""Real servers for the whole test run: Redis (AOF) and FerretDB started here,
plus the services as separate processes. Nothing is faked.

``TICKETRY_TEST_REDIS_URL`` / ``TICKETRY_TEST_MONGO_URL`` point the tests at
running servers instead (e.g. a real MongoDB).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Protocol

import httpx
import pytest
from ticketry.auth import Role, issue_token
from ticketry.settings import DEV_JWT_SECRET
from ticketry_devstack.procs import Stack, start_stack
from ticketry_devstack.walletca import dev_wallet_env

from tests.helpers import serving
from tests.mail_support import mail_env, sink_proc


class TokenFactory(Protocol):
    """Mints a dev-secret token; ``org`` (an organizer's sub) and ``events``
    bind a staff token, which the api refuses (403) without either."""

    def __call__(self, sub: str, role: Role, *, org: str | None = None, events: list[str] | None = None) -> str: ...


# The shop the waiting-room pages may link back to (TICKETRY_SHOP_ORIGINS).
SHOP_ORIGIN = "https://shop.example"
# The session stack mails orders over this many bytes as a link (a one-ticket order fits).
SESSION_MAIL = {"TICKETRY_MAIL_MAX_ATTACHMENT_BYTES": "150000"}


def make_stack(root: Path, renderers: int = 2, extra_env: dict[str, str] | None = None) -> Stack:
    """Infra + api + notifier + ``renderers`` renderer processes under ``root``."""
    return start_stack(
        root,
        renderers,
        {"TICKETRY_SHOP_ORIGINS": SHOP_ORIGIN, **(extra_env or {})},
        redis_url=os.environ.get("TICKETRY_TEST_REDIS_URL"),
        mongo_url=os.environ.get("TICKETRY_TEST_MONGO_URL"),
    )


@contextlib.contextmanager
def stack_of_its_own(
    factory: pytest.TempPathFactory, name: str, renderers: int = 2, extra_env: dict[str, str] | None = None
) -> Iterator[Stack]:
    """A stack (``make_stack``) in a new temporary folder, stopped and removed after."""
    root = factory.mktemp(name)
    s = make_stack(root, renderers, extra_env)
    try:
        yield s
    finally:
        s.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def inbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The folder a real SMTP server (``tests.smtp_sink``) writes what the session stack mails into."""
    out = tmp_path_factory.mktemp("mail") / "inbox"
    with serving(lambda port: sink_proc(out, port)) as port:
        (out / "port").write_text(str(port))
        yield out


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory, inbox: Path) -> Iterator[Stack]:
    port = int((inbox / "port").read_text())
    # Throw-away wallet credentials (a dev CA, a pass certificate, a Google key): the wallet path runs whole.
    env = {**mail_env(port, **SESSION_MAIL), **dev_wallet_env(tmp_path_factory.mktemp("wallet"))}
    with stack_of_its_own(tmp_path_factory, "stack", extra_env=env) as s:
        yield s


@pytest.fixture(scope="session")
def token() -> TokenFactory:
    def make(sub: str, role: Role, *, org: str | None = None, events: list[str] | None = None) -> str:
        return issue_token(sub, role, key=DEV_JWT_SECRET, org=org, events=events)

    return make


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as client:
        yield client
