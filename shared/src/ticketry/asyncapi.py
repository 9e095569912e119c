"""The AsyncAPI 3 document of every stream, built from the message catalogue
(``ticketry.messages.CHANNELS``) and the message models' JSON schemas.

Pure: the same catalogue gives the same document. The api serves it as
``GET /asyncapi.json``; ``tests/unit/test_asyncapi.py`` validates it with the
AsyncAPI parser (``infra/asyncapi``).

Shape: one channel per stream (address = the Redis key), one message per
message type (named with its major version, ``RenderRequest.v1``), one
``send`` operation per producer and one ``receive`` operation per consumer of a
channel, tagged with the service. Schemas the models share are hoisted into
``components.schemas`` (pydantic's ``$defs``), so every ``$ref`` resolves from
the document's root.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from pydantic import BaseModel

from ticketry.messages import CHANNELS, SERVICES, Channel, Message

ASYNCAPI_VERSION: Final = "3.1.0"
_REF_TEMPLATE: Final = "#/components/schemas/{model}"


def message_key(msg: Message) -> str:
    """The message's key in ``components.messages``: its name and major version."""
    return f"{msg.name}.v{msg.version}" if msg.version is not None else msg.name


def _schema(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, Any]:
    """The model's JSON schema (what a reader validates: ``mode="validation"``,
    by alias), its ``$defs`` moved into ``schemas``."""
    schema = model.model_json_schema(by_alias=True, ref_template=_REF_TEMPLATE)
    schemas.update(schema.pop("$defs", {}))
    return schema


def _message(msg: Message, schemas: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": msg.name,
        "title": message_key(msg),
        "summary": msg.summary,
        "contentType": "application/json",
        "payload": _schema(msg.model, schemas),
    }
    if msg.model.__doc__:
        out["description"] = " ".join(msg.model.__doc__.split())
    out["x-ticketry-version"] = msg.version  # None: unversioned (fields only ever added)
    return out


def _channel(ch: Channel) -> dict[str, Any]:
    out: dict[str, Any] = {
        "address": ch.address,
        "title": ch.address,
        "description": ch.description,
        "messages": {message_key(m): {"$ref": f"#/components/messages/{message_key(m)}"} for m in ch.messages},
    }
    if ch.parameters:
        out["parameters"] = {name: {"description": text} for name, text in ch.parameters}
    return out


def _operations(ch: Channel) -> Iterable[tuple[str, dict[str, Any]]]:
    for action, services in (("send", ch.producers), ("receive", ch.consumers)):
        for service in services:
            yield (
                f"{service}.{action}.{ch.id}",
                {
                    "action": action,
                    "channel": {"$ref": f"#/channels/{ch.id}"},
                    "summary": f"{service} {'writes to' if action == 'send' else 'reads'} {ch.address}",
                    "tags": [{"name": service}],
                    "messages": [{"$ref": f"#/channels/{ch.id}/messages/{message_key(m)}"} for m in ch.messages],
                },
            )


def build_document(channels: Iterable[Channel] = CHANNELS, *, version: str = "0.1.0") -> dict[str, Any]:
    """The AsyncAPI 3 document of ``channels`` (default: every stream)."""
    channels = tuple(channels)
    schemas: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for ch in channels:
        for m in ch.messages:
            messages.setdefault(message_key(m), _message(m, schemas))
    doc: dict[str, Any] = {
        "asyncapi": ASYNCAPI_VERSION,
        "id": "urn:ticketry:streams",
        "info": {
            "title": "Ticketry streams",
            "version": version,
            "description": (
                "Every Redis stream of Ticketry, the messages on it and who writes and reads them. Each entry is"
                " a flat map of strings; a versioned message carries its major version in the field v (absent:"
                " 1). Within a major version writers only add optional fields and readers ignore fields they do"
                " not know (ticketry.events)."
            ),
            "tags": [{"name": name, "description": text} for name, text in SERVICES.items()],
        },
        "defaultContentType": "application/json",
        "servers": {
            "redis": {
                "host": "localhost:6379",
                "protocol": "redis",
                "description": "The Redis (or Sentinel-managed primary) every service shares (TICKETRY_REDIS_URL).",
            }
        },
        "channels": {ch.id: _channel(ch) for ch in channels},
        "operations": dict(op for ch in channels for op in _operations(ch)),
        "components": {"messages": messages},
    }
    if schemas:
        doc["components"]["schemas"] = schemas
    return doc
