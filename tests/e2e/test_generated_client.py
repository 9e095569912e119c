"""The OpenAPI document is usable, not only valid: a client generated from the
served ``/openapi.json`` by a standard generator (openapi-python-client, as a
shop would) places an order, follows it to completion and downloads a ticket's
PDF. The client is generated at test time (once per session), never committed."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import httpx
import pytest
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory
from tests.helpers import eventually

pytestmark = pytest.mark.e2e

PACKAGE = "ticketry_generated_client"
# The generator's own defaults but two: no formatter run over the output (not
# needed to import it), and PDFs handed over as files (it parses only JSON and
# octet-stream bodies otherwise).
CONFIG = f"""\
project_name_override: {PACKAGE}
package_name_override: {PACKAGE}
post_hooks: []
content_type_overrides:
  application/pdf: application/octet-stream
"""


@pytest.fixture(scope="session")
def generated(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    root = tmp_path_factory.mktemp("generated-client")
    (root / "openapi.json").write_bytes(httpx.get(f"{stack.api_url}/openapi.json", timeout=60).content)
    (root / "config.yaml").write_text(CONFIG)
    cli = shutil.which("openapi-python-client")
    assert cli is not None
    run = subprocess.run(
        [cli, "generate", "--path", str(root / "openapi.json"), "--config", str(root / "config.yaml"),
         "--meta", "none", "--output-path", str(root / PACKAGE)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    # Every operation generated in full: a warning means part of the document was beyond it.
    assert "Warning" not in run.stdout, run.stdout
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(root))


def _op(client: ModuleType, tag: str, name: str) -> Any:
    return importlib.import_module(f"{client.__name__}.api.{tag}.{name}")


async def test_a_generated_client_orders_follows_and_downloads_a_ticket(
    stack: Stack, generated: ModuleType, token: TokenFactory
) -> None:
    models = importlib.import_module(f"{PACKAGE}.models")
    organizer = generated.AuthenticatedClient(base_url=stack.api_url, token=token("gen-org", "organizer"), timeout=60)
    buyer = generated.AuthenticatedClient(base_url=stack.api_url, token=token("gen-buyer", "buyer"), timeout=60)
    async with organizer, buyer:  # the generated client's own connection pools, closed after
        await _order_follow_download(generated, models, organizer, buyer)


async def _order_follow_download(generated: ModuleType, models: ModuleType, organizer: Any, buyer: Any) -> None:
    # Given an event, created through the generated client
    created = await _op(generated, "events", "create_event").asyncio_detailed(
        client=organizer,
        body=models.EventIn(
            name="Generated Night", venue="Client Hall", starts_at=datetime(2027, 6, 1, 19, 30, tzinfo=UTC),
            capacity=10, price="25.00", currency="EUR",
        ),
    )  # fmt: skip
    assert created.status_code == 201, created.content
    event = created.parsed

    # When a buyer orders one ticket with it
    placed = await _op(generated, "orders", "create_order").asyncio_detailed(
        client=buyer, body=models.OrderIn(event_id=event.id, quantity=1, holder_name="Ada Lovelace")
    )
    assert placed.status_code == 202, placed.content
    order = placed.parsed
    assert isinstance(order, models.OrderAccepted) and len(order.tickets) == 1

    # Then following the order with it shows it completed …
    get_order = _op(generated, "orders", "get_order")

    async def completed() -> Any:
        got = await get_order.asyncio(order.id, client=buyer)
        return got if got.status.value == "completed" else None

    done = await eventually(completed, "the order completes")
    assert [t.id for t in done.tickets] == order.tickets

    # … and its ticket downloads as a PDF
    pdf = await _op(generated, "tickets", "get_ticket_pdf").asyncio_detailed(order.tickets[0], client=buyer)
    assert pdf.status_code == 200
    assert pdf.parsed.payload.read().startswith(b"%PDF-")
