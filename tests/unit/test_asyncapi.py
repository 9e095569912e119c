"""The AsyncAPI document of the streams (``ticketry.asyncapi``, served as
``GET /asyncapi.json``): valid by the AsyncAPI parser itself (npm
``@asyncapi/parser``, installed into ``.bin/asyncapi`` by ``infra/bootstrap.sh``),
and complete: every stream ``streams.py`` describes is a channel, every message
model is on one, and the flat-entry models name the fields their writers write."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from faststream.specification import AsyncAPI
from pydantic import BaseModel
from ticketry import events, messages, streams
from ticketry.asyncapi import build_document, message_key
from ticketry_api.mail.mailer import Job
from ticketry_api.webhooks.deadletters import dead_fields
from ticketry_api.webhooks.models import Delivery
from ticketry_renderer.config import RendererSettings
from ticketry_renderer.main import create_app

ROOT = Path(__file__).resolve().parents[2]
VALIDATOR = ROOT / ".bin" / "asyncapi" / "validate.mjs"


def validate(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run the AsyncAPI parser once on each of ``docs`` (one node start for
    all): per document ``{"valid": bool, "version": ..., "errors": [...]}``."""
    assert VALIDATOR.exists(), f"{VALIDATOR} missing: run infra/bootstrap.sh (npm ci of infra/asyncapi)"
    result = subprocess.run(
        ["node", str(VALIDATOR), "-"], input=json.dumps(docs), capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    verdicts = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(verdicts) == len(docs), result.stdout
    return verdicts


CHANGES = ["missing message", "missing channel", "bad payload schema", "no info"]


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict[str, Any]]:
    """The parser's verdict on the document and on each doctored copy."""
    names = ["as built", *CHANGES]
    docs = [build_document(), *(_doctored(change) for change in CHANGES)]
    return dict(zip(names, validate(docs), strict=True))


def described_streams() -> set[str]:
    """Every stream ``streams.py``'s header and section comments describe: the
    docstring's Streams section, and each ``# ``key`` (stream`` comment entry."""
    source = (ROOT / "shared/src/ticketry/streams.py").read_text()
    doc = streams.__doc__ or ""
    section = doc.split("Streams\n-------", 1)[1].split("\n----", 1)[0]
    found = set(re.findall(r"``(ticketry:[^`\s]+)``", section))
    found |= set(re.findall(r"^# ``(ticketry:[^`\s]+)`` \(stream\b", source, re.MULTILINE))
    return found


def test_the_document_is_valid_asyncapi_3(verdicts: dict[str, dict[str, Any]]) -> None:
    doc = build_document()
    verdict = verdicts["as built"]
    assert verdict["valid"] and verdict["errors"] == [], verdict
    assert doc["asyncapi"].startswith("3.") and verdict["version"].startswith("3.")
    assert build_document() == doc  # pure: the api's copy is this one


def test_every_stream_streams_py_describes_is_a_channel() -> None:
    described = described_streams()
    # The parser of the header found them (so an empty set cannot pass).
    assert {
        streams.RENDER_VIP,
        streams.TICKET_EVENTS,
        streams.WEBHOOK_DEAD,
        streams.room_updates("{event}"),
    } <= described
    addresses = {ch["address"] for ch in build_document()["channels"].values()}
    assert described - addresses == set(), "streams without a ticketry.messages.CHANNELS entry"
    assert addresses - described == set(), "channels streams.py does not describe"


def test_every_channel_has_a_writer_and_its_messages() -> None:
    for ch in messages.CHANNELS:
        assert ch.producers and ch.messages, ch.id
        assert set(ch.producers) | set(ch.consumers) <= set(messages.SERVICES), ch.id
    doc = build_document()
    ops = doc["operations"].values()
    for cid in doc["channels"]:
        assert any(op["action"] == "send" and op["channel"]["$ref"] == f"#/channels/{cid}" for op in ops), cid


def _subclasses(cls: type[BaseModel]) -> set[type[BaseModel]]:
    out: set[type[BaseModel]] = set()
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("ticketry."):  # not the tests' own (test_message_versions)
            out |= {sub, *_subclasses(sub)}
    return out


def test_every_message_model_is_on_a_channel_with_its_version() -> None:
    on_channels = {m.model for ch in messages.CHANNELS for m in ch.messages}
    models = _subclasses(events._Message) | _subclasses(messages._Entry)
    assert {events.RenderRequest, events.TicketEvent, messages.WebhookDeliveryEntry} <= models
    assert models - on_channels == set()
    doc = build_document()
    referenced = {ref["$ref"].rsplit("/", 1)[1] for ch in doc["channels"].values() for ref in ch["messages"].values()}
    assert referenced == set(doc["components"]["messages"])
    assert "RenderRequest.v1" in referenced and "TicketEvent.v1" in referenced
    for m in {m for ch in messages.CHANNELS for m in ch.messages}:
        payload = doc["components"]["messages"][message_key(m)]["payload"]
        assert set(payload["properties"]) == {f.alias or name for name, f in m.model.model_fields.items()}


def test_the_entry_models_name_the_fields_their_writers_write() -> None:
    d = Delivery(endpoint_id="e", msg_id="m", type="order.completed", order_id="o", event_id="ev", body=b"{}")
    assert set(messages.WebhookDeliveryEntry.model_fields) == set(d.to_fields())
    assert set(messages.WebhookDeadLetterEntry.model_fields) == set(dead_fields(d.to_fields(), "gone", "1-0"))
    job = Job("or_1", 4, ("451 try later",))
    assert set(messages.MailDeadLetterEntry.model_fields) == set(dead_fields(job.to_fields(), "451", "1-0"))
    dlq = {v for k, v in vars(streams).items() if k.startswith("DLQ_") and k != "DLQ_PREFIX"}
    assert set(messages.RenderDeadLetterEntry.model_fields) == {"v", "data", *dlq}
    room = {v for k, v in vars(streams).items() if k.startswith("ROOM_") and isinstance(v, str)}
    room -= {streams.ROOM_CARRY, streams.ROOM_ON_SALE_MS, streams.ROOM_PENDING}  # the state's only
    assert set(messages.RoomUpdateEntry.model_fields) == room
    ticket_event = set(events.event_fields(type="ticket.failed", event_uuid="u", order_id="o", ticket_id="t",
                                           reason="r", traceparent="p")[::2])  # fmt: skip
    assert ticket_event - {"v"} <= set(events.TicketEvent.model_fields)


def test_faststreams_own_asyncapi_of_the_renderer_agrees() -> None:
    """FastStream documents the renderer's subscribers; each is a stream the
    catalogue says the renderer reads."""
    app = create_app(RendererSettings(), "asyncapi-probe")
    theirs = AsyncAPI(app.broker, schema_version="3.0.0").to_specification().to_jsonable()
    subscribed = {ch["address"] for ch in theirs["channels"].values()}
    assert {streams.RENDER_VIP, streams.RENDER_STD, streams.DESIGN_REQUESTS} <= subscribed
    ours = {ch.address for ch in messages.CHANNELS if "renderer" in ch.consumers}
    assert subscribed == ours


def _doctored(change: str) -> dict[str, Any]:
    doc = copy.deepcopy(build_document())
    if change == "missing message":
        doc["channels"]["renderVip"]["messages"]["Ghost.v1"] = {"$ref": "#/components/messages/Ghost.v1"}
    elif change == "missing channel":
        doc["operations"]["api.send.renderVip"]["channel"] = {"$ref": "#/channels/nowhere"}
    elif change == "bad payload schema":
        doc["components"]["messages"]["TicketEvent.v1"]["payload"]["type"] = "tuple"
    elif change == "no info":
        del doc["info"]
    return doc


@pytest.mark.parametrize("change", CHANGES)
def test_the_validator_rejects_a_doctored_document(verdicts: dict[str, dict[str, Any]], change: str) -> None:
    verdict = verdicts[change]
    assert not verdict["valid"], verdict
    assert verdict["errors"] and all(e["severity"] == 0 for e in verdict["errors"]), verdict
