"""The problem+json types each operation can answer, read from the code that
serves it rather than kept by hand: every ``Problem(status, …, kind=…)`` the
route's handler, its dependencies and what they call construct, plus the
exception handlers' own types for any operation that reaches the store or
Redis. A route that gains a new refusal documents it without anyone
remembering to."""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, routing
from fastapi.dependencies.models import Dependant
from pydantic import BaseModel, ConfigDict, Field

from ticketry_api.core.problem import PROBLEM_BASE, Problem
from ticketry_api.deps import get_state
from ticketry_api.http import errors

BLANK = "about:blank"  # RFC 9457: a problem told apart by its status alone
Found = dict[int, set[str]]  # status → problem types
_OWN = "ticketry_api"


class ProblemBody(BaseModel):
    """An error (RFC 9457 problem details): ``type`` tells problems of one
    status apart (``about:blank`` or ``https://ticketry.dev/problems/<kind>``)."""

    model_config = ConfigDict(
        title="Problem",
        extra="allow",  # some carry more (a 422's ``errors``, a queue's ``retry_after_s``)
        json_schema_extra={
            "examples": [
                {"type": "about:blank", "status": 404, "title": "event not found", "detail": ""},
                {
                    "type": PROBLEM_BASE + "already-checked-in", "status": 409, "title": "already checked in",
                    "detail": "checked in at 2027-06-01T19:42:10+02:00",
                },
            ]
        },
    )  # fmt: skip

    type: str = Field(description="about:blank, or https://ticketry.dev/problems/<kind>")
    status: int = Field(ge=400, le=599)
    title: str
    detail: str


def _resolve(node: ast.expr, scope: dict[str, Any]) -> object:
    """The object a name or dotted name in the source stands for, if it can be known without running it."""
    if isinstance(node, ast.Name):
        return scope.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, scope)
        if isinstance(base, (types.ModuleType, type)):
            return getattr(base, node.attr, None)
    return None


def _scope(fn: types.FunctionType) -> dict[str, Any]:
    scope = dict(vars(__builtins__)) if isinstance(__builtins__, types.ModuleType) else {}
    scope.update(fn.__globals__)
    cells = fn.__closure__ or ()
    for name, cell in zip(fn.__code__.co_freevars, cells, strict=True):
        try:
            scope[name] = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
    return scope


def _own_functions(obj: object) -> Iterator[types.FunctionType]:
    """The project's functions ``obj`` is (or, for a class, has)."""
    if isinstance(obj, type) and obj.__module__.startswith(_OWN):
        for member in vars(obj).values():
            yield from _own_functions(member.__func__ if isinstance(member, (staticmethod, classmethod)) else member)
    elif isinstance(obj, types.MethodType):
        yield from _own_functions(obj.__func__)
    elif isinstance(obj, types.FunctionType) and obj.__module__.startswith(_OWN):
        yield obj


def _constant(node: ast.expr | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _raised_here(call: ast.Call, callee: object) -> tuple[int, str] | None:
    """(status, type) of a problem this call builds, when both are written out."""
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    status = _constant(call.args[0] if call.args else keywords.get("status"))
    if not isinstance(status, int):
        return None
    if callee is Problem:
        kind = _constant(keywords.get("kind")) or ""
        return (status, PROBLEM_BASE + kind if isinstance(kind, str) and kind else BLANK)
    if callee is errors.problem_response:
        typ = keywords.get("type")
        if typ is None:
            return (status, BLANK)
        if isinstance(typ, ast.BinOp) and isinstance(typ.op, ast.Add) and isinstance(_constant(typ.right), str):
            return (status, PROBLEM_BASE + str(_constant(typ.right)))
    return None


def _read(fn: types.FunctionType) -> tuple[set[tuple[int, str]], list[types.FunctionType]]:
    """The problems ``fn``'s own code builds, and the project's functions it names."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):  # no source (generated code): nothing to read
        return set(), []
    scope = _scope(fn)
    hits: set[tuple[int, str]] = set()
    reached: list[types.FunctionType] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (hit := _raised_here(node, _resolve(node.func, scope))) is not None:
            hits.add(hit)
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            # Called or handed on (``gate=gate.check``): either way it may run for this request.
            reached.extend(_own_functions(_resolve(node, scope)))
    return hits, reached


class ProblemReader:
    """Reads each function once (a document reaches most of them from many routes)."""

    def __init__(self) -> None:
        self._read: dict[types.CodeType, tuple[set[tuple[int, str]], list[types.FunctionType]]] = {}

    def problems_of(self, *functions: Callable[..., Any]) -> Found:
        """Every (status, problem type) the code of ``functions`` and what they reach can build."""
        found: Found = defaultdict(set)
        todo = [own for fn in functions for own in _own_functions(fn)]
        seen: set[types.CodeType] = set()
        while todo:
            fn = todo.pop()
            if fn.__code__ in seen:
                continue
            seen.add(fn.__code__)
            if fn.__code__ not in self._read:
                self._read[fn.__code__] = _read(fn)
            hits, reached = self._read[fn.__code__]
            for status, typ in hits:
                found[status].add(typ)
            todo.extend(reached)
        return dict(found)


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    if dependant.call is not None:
        yield dependant.call
    for sub in dependant.dependencies:
        yield from _calls(sub)


def operation_problems(app: FastAPI) -> dict[tuple[str, str], Found]:
    """(method, path) → the problems its route can answer, for every documented route."""
    reader = ProblemReader()
    handlers = reader.problems_of(*app.exception_handlers.values())
    # The handlers' own types (a dependency down: 503 unavailable) reach whatever uses the state.
    typed = {s: {t for t in ts if t != BLANK} for s, ts in handlers.items()}
    result: dict[tuple[str, str], Found] = {}
    for route in routing.iter_route_contexts(app.routes):  # with the prefixes and dependencies of their routers
        declared = route.original_route
        if not isinstance(declared, routing.APIRoute) or not route.include_in_schema:
            continue
        calls = list(_calls(route.dependant))
        found = reader.problems_of(*calls)
        if get_state in calls:
            for status, kinds in typed.items():
                if kinds:
                    found.setdefault(status, set()).update(kinds)
        for method in declared.methods or ():
            result[(method.lower(), str(route.path_format))] = found
    return result


def add_problems(document: dict[str, Any], app: FastAPI) -> dict[str, Any]:
    """Each operation's 4xx/5xx answers as ``application/problem+json`` with the
    Problem schema, an example, and their types (``x-problem-types``, on the
    response and, all of them, on the operation); a status the code can answer
    but the route did not declare is added."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["Problem"] = ProblemBody.model_json_schema()
    ref = {"$ref": "#/components/schemas/Problem"}
    derived = operation_problems(app)
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            found = derived.get((method, path), {})
            responses = operation.setdefault("responses", {})
            for status in found:
                responses.setdefault(str(status), errors.problems(status)[status])
            every: set[str] = set()
            for code, response in responses.items():
                if not code.isdigit() or int(code) < 400:
                    continue
                status = int(code)
                # A status only middleware, the auth or validation answers is about:blank.
                kinds = sorted(found.get(status) or {BLANK})
                every.update(kinds)
                title = str(response.get("description", "Error")).split(". Problem types:")[0]
                response["description"] = f"{title}. Problem types: {', '.join(kinds)}"
                response["content"] = {
                    errors.PROBLEM: {
                        "schema": ref,
                        "example": {"type": kinds[0], "status": status, "title": title.lower(), "detail": ""},
                    }
                }
                response["x-problem-types"] = kinds
            operation["x-problem-types"] = sorted(every)
    schemas.pop("HTTPValidationError", None)  # every 422 is problem+json, never FastAPI's default body
    schemas.pop("ValidationError", None)
    return document
