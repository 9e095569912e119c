"""``/openapi.json`` as FastAPI builds it, then made to say exactly what the API
accepts and answers: the spelling of every id in a path, the links from what
creates to what uses it, the problem+json types of each operation, and an
example of every body."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from ticketry.ids import new_id, ticket_id

from ticketry_api.http.schemas import id_pattern
from ticketry_api.openapi.examples import add_examples
from ticketry_api.openapi.links import add_links
from ticketry_api.openapi.problems import add_problems

# A path parameter's name → the kind of id it holds (ticketry.ids; ``wh``: webhooks; ``dv``: scanner devices).
PATH_IDS = {
    "event_id": "ev", "order_id": "or", "ticket_id": "tk", "list_id": "cl", "webhook_id": "wh", "device_id": "dv",
}  # fmt: skip


def _length(kind: str) -> int:
    return len(ticket_id(new_id("or"), 0) if kind == "tk" else new_id(kind))


def add_path_ids(document: dict[str, Any]) -> dict[str, Any]:
    """Every id in a path with its pattern and length (the API answers 404 to any other)."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                kind = PATH_IDS.get(parameter["name"]) if parameter.get("in") == "path" else None
                if kind is not None:
                    n = _length(kind)
                    parameter["schema"].update(pattern=id_pattern(kind), minLength=n, maxLength=n)
    return document


def add_pdf_bodies(document: dict[str, Any]) -> dict[str, Any]:
    """A PDF answer says it is bytes (a generated client then hands them over as a file)."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for response in operation.get("responses", {}).values():
                media = response.get("content", {}).get("application/pdf")
                if media is not None and not media.get("schema"):
                    media["schema"] = {"type": "string", "format": "binary"}
    return document


def build(app: FastAPI) -> dict[str, Any]:
    document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    return add_examples(add_problems(add_links(add_pdf_bodies(add_path_ids(document))), app))


def install(app: FastAPI) -> None:
    """Serve the document built here (once, as FastAPI does)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
