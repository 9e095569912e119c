"""The OpenAPI document says exactly what the API accepts and answers: built
in-process (no servers), it is a valid OpenAPI document, every body has an
example that its own schema accepts, every id in a path has the pattern of
``ticketry.ids``, every string a request carries is bounded, and every
operation lists the problem+json types its code can answer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import ticketry_api
from fastapi import routing
from hypothesis import given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate
from pydantic import BaseModel
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from ticketry.ids import is_valid_id, new_id, ticket_id
from ticketry_api.config import ApiSettings
from ticketry_api.core.problem import PROBLEM_BASE
from ticketry_api.main import create_app
from ticketry_api.openapi.doc import PATH_IDS
from ticketry_api.openapi.examples import EXAMPLES
from ticketry_api.openapi.problems import BLANK

APP = create_app(ApiSettings(dev_mode=True))
DOC: dict[str, Any] = APP.openapi()
_JSON = ("application/json", "application/problem+json")
_METHODS = {"get", "put", "post", "delete", "patch", "options", "head"}


def _operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in DOC["paths"].items():
        for method, operation in item.items():
            if method in _METHODS:
                yield method, path, operation


def _bodies() -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, media type object) of every JSON request and response body."""
    for method, path, op in _operations():
        for media_type, media in op.get("requestBody", {}).get("content", {}).items():
            if media_type in _JSON:
                yield f"{method.upper()} {path} request", media
        for status, response in op["responses"].items():
            for media_type, media in response.get("content", {}).items():
                if media_type in _JSON:
                    yield f"{method.upper()} {path} {status}", media


def _resolved(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = DOC["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _examples(media: dict[str, Any]) -> list[Any]:
    if "example" in media:
        return [media["example"]]
    if "examples" in media:
        return [e["value"] for e in media["examples"].values()]
    return list(_resolved(media.get("schema", {})).get("examples", []))


_REGISTRY = Registry().with_resource("urn:openapi", Resource(contents=DOC, specification=DRAFT202012))


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    # $refs name the document's components: resolve them in the document itself.
    rooted = {"$ref": "urn:openapi" + schema["$ref"]} if "$ref" in schema else schema
    return jsonschema.Draft202012Validator(rooted, registry=_REGISTRY)


def test_openapi_spec_validator_accepts_the_document() -> None:
    validate(DOC)


def test_every_body_has_an_example_its_own_schema_accepts() -> None:
    bodies = list(_bodies())
    assert len(bodies) > 50  # every operation's answers, not a handful
    without = [where for where, media in bodies if not _examples(media)]
    assert without == [], f"bodies without an example: {without}"
    wrong = {
        where: [e.message for e in _validator(media["schema"]).iter_errors(example)]
        for where, media in bodies
        for example in _examples(media)
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_every_component_example_its_own_schema_accepts() -> None:
    # Nested schemas too (TierIn inside EventIn): a body's example need not show every part.
    schemas = DOC["components"]["schemas"]
    examples = {
        name: [*(schema.get("examples") or []), *([schema["example"]] if "example" in schema else [])]
        for name, schema in schemas.items()
    }
    assert {"TierIn", "EventIn", "OrderIn"} <= {n for n, ex in examples.items() if ex}
    wrong = {
        name: [e.message for ex in exs for e in _validator({"$ref": f"#/components/schemas/{name}"}).iter_errors(ex)]
        for name, exs in examples.items()
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_request_examples_are_accepted_by_the_models_themselves() -> None:
    # Patterns cannot say everything the API checks (NFC, the IANA zone list, doors before start).
    models = [
        r.dependant.body_params[0].field_info.annotation
        for r in routing.iter_route_contexts(APP.routes)
        if isinstance(r.original_route, routing.APIRoute) and r.dependant.body_params
    ]
    assert len(models) >= 5
    for model in models:
        assert isinstance(model, type) and issubclass(model, BaseModel)
        model.model_validate(EXAMPLES[model.__name__])


def test_every_id_in_a_path_has_the_pattern_and_length_of_its_kind() -> None:
    seen = set()
    for method, path, op in _operations():
        for p in op.get("parameters", []):
            if p["in"] != "path":
                continue
            assert p["name"] in PATH_IDS, f"{method.upper()} {path}: {p['name']} is not a known id"
            schema, kind = p["schema"], PATH_IDS[p["name"]]
            made = ticket_id(new_id("or"), 7) if kind == "tk" else new_id(kind)
            assert re.search(schema.get("pattern", "(?!)"), made), f"{method.upper()} {path}: {p['name']}"
            assert schema["minLength"] == schema["maxLength"] == len(made)
            seen.add(p["name"])
    assert seen == set(PATH_IDS)


@pytest.mark.parametrize("kind", ["ev", "or", "cl", "tk"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_path_id_pattern_accepts_exactly_what_ticketry_ids_accepts(kind: str, data: st.DataObject) -> None:
    name = next(n for n, k in PATH_IDS.items() if k == kind)
    pattern = next(
        p["schema"]["pattern"] for _, _, op in _operations() for p in op.get("parameters", []) if p["name"] == name
    )
    # Every spelling the document allows is one the API finds things by …
    assert is_valid_id(data.draw(st.from_regex(pattern, fullmatch=True)), kind)
    # … and near misses are refused by both alike.
    made = ticket_id(new_id("or"), 3) if kind == "tk" else new_id(kind)
    near = data.draw(
        st.sampled_from([made[:-1], made + "0", made.upper(), "x" + made[1:], made.replace("_", "-", 1), made + "\n"])
    )
    assert (re.search(pattern, near) is not None) == is_valid_id(near, kind)


def _strings(schema: dict[str, Any], where: str, seen: set[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        if name not in seen:
            seen.add(name)
            yield from _strings(_resolved(schema), f"{where}>{name}", seen)
        return
    if schema.get("type") == "string":
        yield where, schema
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(key, [])):
            yield from _strings(sub, f"{where}|{i}", seen)
    for name, sub in schema.get("properties", {}).items():
        yield from _strings(sub, f"{where}.{name}", seen)
    if isinstance(schema.get("items"), dict):
        yield from _strings(schema["items"], f"{where}[]", seen)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _strings(schema["additionalProperties"], f"{where}{{}}", seen)


def test_every_string_a_request_carries_is_bounded() -> None:
    unbounded = []
    for method, path, op in _operations():
        where = f"{method.upper()} {path}"
        carried = [(f"{where} {p['in']} {p['name']}", p["schema"]) for p in op.get("parameters", [])]
        carried += [(f"{where} body", m["schema"]) for m in op.get("requestBody", {}).get("content", {}).values()]
        for at, schema in carried:
            for leaf, s in _strings(schema, at, set()):
                if not ({"maxLength", "pattern", "enum", "const", "format"} & s.keys()):
                    unbounded.append(leaf)
    assert unbounded == []


def test_every_error_answer_is_a_problem_with_its_types() -> None:
    operations = list(_operations())
    for method, path, op in operations:
        where = f"{method.upper()} {path}"
        every: set[str] = set()
        for status, response in op["responses"].items():
            if int(status) < 400:
                continue
            assert set(response["content"]) == {"application/problem+json"}, where
            assert response["content"]["application/problem+json"]["schema"] == {"$ref": "#/components/schemas/Problem"}
            types = response["x-problem-types"]
            assert types and all(t == BLANK or t.startswith(PROBLEM_BASE) for t in types), (where, status)
            assert all(t in response["description"] for t in types)
            every.update(types)
        assert op["x-problem-types"] == sorted(every), where
    assert "HTTPValidationError" not in DOC["components"]["schemas"]


def _types(method: str, path: str, status: int) -> list[str]:
    types: list[str] = DOC["paths"][path][method]["responses"][str(status)]["x-problem-types"]
    return types


def test_problem_types_are_read_from_the_code_that_raises_them() -> None:
    assert {PROBLEM_BASE + "already-checked-in", PROBLEM_BASE + "wrong-list"} <= set(
        _types("post", "/v1/checkins", 409)
    )
    assert PROBLEM_BASE + "unknown-tier" in _types("post", "/v1/events/{event_id}/checkin-lists", 409)
    assert PROBLEM_BASE + "not-on-sale" in _types("post", "/v1/orders", 409)  # raised by the waiting room's gate
    assert PROBLEM_BASE + "busy" in _types("get", "/v1/orders/{order_id}/pdf", 503)
    assert PROBLEM_BASE + "unavailable" in _types("get", "/v1/events/{event_id}", 503)  # an exception handler's
    assert "503" not in DOC["paths"]["/healthz"]["get"]["responses"]  # it needs nothing that can be down
    # Every kind of problem the code names is listed where it can be answered.
    source = Path(ticketry_api.__file__).parent
    kinds = {k for f in source.rglob("*.py") for k in re.findall(r'kind="([a-z-]+)"', f.read_text())}
    listed = {t.removeprefix(PROBLEM_BASE) for _, _, op in _operations() for t in op["x-problem-types"]}
    assert kinds and kinds <= listed


def test_every_operation_id_is_its_route_functions_name() -> None:
    """A generated client names its calls by operationId: short and unique
    (``create_order``), not FastAPI's name + path + method."""
    ids = [op["operationId"] for ops in DOC["paths"].values() for m, op in ops.items() if m in _METHODS]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", i) and "_v1_" not in i for i in ids), ids


def _field_schema(schema: dict[str, Any], pointer: str) -> dict[str, Any] | None:
    """The schema of ``pointer`` (``/tickets/0/id``) inside ``schema``, None where it names nothing."""
    for part in [p for p in pointer.split("/") if p]:
        schema = _resolved(schema)
        options = schema.get("anyOf") or schema.get("oneOf") or [schema]
        found = None
        for option in (_resolved(o) for o in options):
            if part.isdigit() and "items" in option:
                found = option["items"]
            elif part in option.get("properties", {}):
                found = option["properties"][part]
            if found is not None:
                break
        if found is None:
            return None
        schema = found
    return _resolved(schema)


def _links() -> Iterator[tuple[str, str, dict[str, Any], str, dict[str, Any]]]:
    """(source operationId, status, source operation, link name, link) of every link."""
    for _, _, op in _operations():
        for status, response in op["responses"].items():
            for name, link in response.get("links", {}).items():
                yield op["operationId"], status, op, name, link


def test_links_walk_from_an_event_to_every_step_of_a_sale() -> None:
    # Given the links as a graph of operations
    edges: dict[str, set[str]] = {}
    for source, _, _, _, link in _links():
        edges.setdefault(source, set()).add(link["operationId"])
    reached, todo = {"create_event"}, ["create_event"]
    while todo:
        for target in edges.get(todo.pop(), set()) - reached:
            reached.add(target)
            todo.append(target)
    # Then from creating an event a client reaches each step without guessing an id
    sale = {
        "create_order", "get_order", "order_tickets", "get_ticket_pdf", "get_ticket_pkpass", "reissue_ticket",
        "order_pdf", "create_checkin_list", "check_in", "checkin_list_status", "cancel_order", "create_webhook",
        "delete_webhook", "create_device", "pair_device", "device_token", "revoke_device", "revocations",
    }  # fmt: skip
    assert sale - reached == set()


def test_every_link_fills_its_targets_parameters_from_fields_that_exist() -> None:
    ops = {op["operationId"]: (path, op) for _, path, op in _operations()}
    links = list(_links())
    assert len(links) > 40
    wrong = []
    for source, status, op, name, link in links:
        path, target = ops[link["operationId"]]
        # every path parameter of the target, and nothing else
        wanted = {p["name"] for p in target.get("parameters", []) if p["in"] == "path"}
        if set(link["parameters"]) != wanted:
            wrong.append(f"{source} {status} {name}: parameters {sorted(link['parameters'])} for {path}")
        body = target.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        for field in link.get("requestBody", {}):
            if _field_schema(body, field) is None:
                wrong.append(f"{source} {status} {name}: no body field {field} in {link['operationId']}")
        answer = op["responses"][status].get("content", {}).get("application/json", {}).get("schema", {})
        source_params = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
        for expression in [*link["parameters"].values(), *link.get("requestBody", {}).values()]:
            if expression.startswith("$response.body#"):
                ok = _field_schema(answer, expression.removeprefix("$response.body#")) is not None
            else:
                ok = expression.removeprefix("$request.path.") in source_params
            if not ok:
                wrong.append(f"{source} {status} {name}: {expression} names nothing")
    assert wrong == []
