"""A method a path is not served with: 405 problem+json whose ``Allow`` names
every method the path is served with, the API's paths and the others alike
(the pages, the scanner, /metrics and the documents are in no OpenAPI paths)."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.e2e

CASES = [
    ("PUT", "/v1/orders", {"GET", "POST"}),
    ("DELETE", "/v1/events/ev_x", {"GET"}),
    ("POST", "/metrics", {"GET"}),
    ("DELETE", "/o/or_x", {"GET"}),
    ("POST", "/scan", {"GET"}),
    ("POST", "/openapi.json", {"GET", "HEAD"}),
    ("POST", "/asyncapi.json", {"GET"}),
    ("POST", "/ops", {"GET"}),
]


@pytest.mark.parametrize(("method", "path", "allowed"), CASES)
async def test_a_405_names_every_method_its_path_is_served_with(
    api: httpx.AsyncClient, method: str, path: str, allowed: set[str]
) -> None:
    r = await api.request(method, path)
    assert r.status_code == 405, (method, path, r.status_code, r.text[:200])
    assert r.headers["content-type"].startswith("application/problem+json"), r.headers
    assert set(r.headers["allow"].split(", ")) == allowed, (path, r.headers["allow"])
