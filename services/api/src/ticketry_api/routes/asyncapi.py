"""``GET /asyncapi.json``: the AsyncAPI 3 document of every stream (public, like
``/openapi.json``), built once from the message catalogue (``ticketry.asyncapi``)."""

from __future__ import annotations

import functools

import orjson
from fastapi import APIRouter, Response
from ticketry.asyncapi import build_document

router = APIRouter(tags=["docs"])


@functools.cache
def _document() -> bytes:
    return orjson.dumps(build_document())


@router.get("/asyncapi.json", include_in_schema=False)
async def asyncapi() -> Response:
    return Response(_document(), media_type="application/json")
