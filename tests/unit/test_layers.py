"""Layers (docs/design.md "Layers: edge, core, adapters"): the core modules
import no I/O library, no adapter and nothing of the project outside the core.

The api shows its layers in its folders, and they are checked as folders:
every module of ``core/`` is core; ``store/`` alone builds MongoDB queries;
the ASGI middlewares are all in ``middleware/`` and the routes all in
``routes/``, none of which imports another. The other packages name their
core and adapter modules in the lists here.

Read from the source with ``ast``, nothing imported: no server, and an import
that only a type needs counts as much as any other. The doc's table names the
same core and adapter modules as the lists here, so neither can drift.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "design.md"
SECTION = "## Layers: edge, core, adapters"
PATH = re.compile(r"`([\w/]+(?:\.py|/))`")  # a module `waitingroom/core.py`, a package `store/`

# package -> (its row in the doc's table, its source directory)
PACKAGES = {
    "ticketry_api": ("api", "services/api/src/ticketry_api"),
    "ticketry_renderer": ("renderer", "services/renderer/src/ticketry_renderer"),
    "ticketry_notifier": ("notifier", "services/notifier/src/ticketry_notifier"),
    "ticketry_scaler": ("scaler", "services/scaler/src/ticketry_scaler"),
    "ticketry": ("shared", "shared/src/ticketry"),
}

API = ROOT / PACKAGES["ticketry_api"][1]

# Packages (every module in them) or modules whose code is pure.
CORE_OF = [
    "ticketry_api.core",
    "ticketry_renderer.decision",
    "ticketry_renderer.rate",
    "ticketry_notifier.handshake",
    "ticketry_notifier.core",
    "ticketry_scaler.policy",
    "ticketry.ids",
    "ticketry.streams",
    "ticketry.events",
    "ticketry.auth",
    "ticketry.codes",
    "ticketry.tasks",
    "ticketry.replies",
    "ticketry.backoff",
    "ticketry.orderpdf",
]

# Modules, or packages (all of their modules but the core ones), that do I/O.
# (The api's core imports nothing of the api outside core/, adapters included.)
ADAPTERS = [
    "ticketry_renderer.render",
    "ticketry_renderer.fastpath",
    "ticketry_renderer.designs",
    "ticketry_renderer.metrics",
    "ticketry_notifier.lookups",
    "ticketry_notifier.orders",
    "ticketry_scaler.observe",
    "ticketry_scaler.leader",
    "ticketry_scaler.cpu",
    "ticketry_scaler.backends",
    "ticketry.db",
    "ticketry.consumer",
    "ticketry.emit",
    "ticketry.designs",
    "ticketry.documents",
    "ticketry.webhook_documents",
    "ticketry.storage",
    "ticketry.pdfstores",
    "ticketry.s3store",
    "ticketry.fonts",
    "ticketry.telemetry",
    "ticketry.tracing",
]

IO_LIBRARIES = frozenset({
    "redis", "pymongo", "motor", "beanie", "fastapi", "starlette", "faststream", "httpx", "aiohttp",
    "websockets", "weasyprint", "subprocess", "socket", "uvicorn", "kubernetes", "kubernetes_asyncio",
    "boto3", "aioboto3", "botocore", "aiobotocore",
})  # fmt: skip
# asyncio's (and an event loop's) sockets and subprocesses, reached without importing a library.
IO_CALLS = frozenset({
    "open_connection", "start_server", "open_unix_connection", "start_unix_server", "create_connection",
    "create_server", "create_unix_connection", "create_unix_server", "create_datagram_endpoint",
    "create_subprocess_exec", "create_subprocess_shell", "subprocess_exec", "subprocess_shell",
    "sock_connect", "sock_accept", "getaddrinfo",
})  # fmt: skip


def _parts(name: str) -> tuple[Path, list[str]]:
    package, *rest = name.split(".")
    return ROOT / PACKAGES[package][1], rest


def is_package(name: str) -> bool:
    base, rest = _parts(name)
    return (base.joinpath(*rest) / "__init__.py").is_file()


def is_module(name: str) -> bool:
    if name.split(".")[0] not in PACKAGES:
        return False
    base, rest = _parts(name)
    return is_package(name) or (bool(rest) and base.joinpath(*rest).with_suffix(".py").is_file())


def source_of(name: str) -> Path:
    base, rest = _parts(name)
    return base.joinpath(*rest) / "__init__.py" if is_package(name) else base.joinpath(*rest).with_suffix(".py")


def doc_path(name: str) -> str:
    """How the doc's table names a module: ``waitingroom/core.py``, a package ``store/``."""
    rest = "/".join(name.split(".")[1:])
    return f"{rest}/" if is_package(name) else f"{rest}.py"


def modules_in(name: str) -> list[str]:
    """``name`` and, for a package, every module below it."""
    if not is_package(name):
        return [name]
    base = source_of(name).parent
    below = (p.relative_to(base).with_suffix("").parts for p in sorted(base.rglob("*.py")))
    return [name, *(".".join([name, *parts]) for parts in below if parts[-1] != "__init__")]


CORE = [m for c in CORE_OF for m in modules_in(c)]


@cache
def imported(name: str) -> frozenset[str]:
    """Every dotted name the module imports, wherever (a function, ``TYPE_CHECKING``):
    ``from a.b import c`` gives ``a.b.c`` when that is a module of the project, else ``a.b``."""
    tree = ast.parse(source_of(name).read_text(), filename=str(source_of(name)))
    here = name.split(".") if is_package(name) else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            within = here[: len(here) - node.level + 1] if node.level else []
            base = ".".join([*within, *([node.module] if node.module else [])])
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base)
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.add(node.args[0].value)
    return frozenset(out)


def is_adapter(name: str) -> bool:
    return name not in CORE and any(name == a or name.startswith(f"{a}.") for a in ADAPTERS)


@pytest.mark.parametrize("module", CORE)
def test_a_core_module_imports_no_io_library(module: str) -> None:
    libraries = sorted(n for n in imported(module) if n.split(".")[0] in IO_LIBRARIES)
    assert not libraries, f"{module} imports {libraries}: I/O belongs in an adapter"
    tree = ast.parse(source_of(module).read_text())
    calls = sorted({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in IO_CALLS})
    assert not calls, f"{module} uses {calls}: sockets and subprocesses belong in an adapter"


@pytest.mark.parametrize("module", CORE)
def test_a_core_module_imports_no_adapter(module: str) -> None:
    adapters = sorted(n for n in imported(module) if is_adapter(n))
    assert not adapters, f"{module} imports the adapters {adapters}"


@pytest.mark.parametrize("module", CORE)
def test_a_core_module_imports_nothing_of_the_project_but_the_core(module: str) -> None:
    """So the core is pure all the way down (a package's ``__init__`` does not
    count: ``from ticketry import streams`` is ``ticketry.streams``)."""
    outside = sorted(n for n in imported(module) if n.split(".")[0] in PACKAGES and n not in CORE)
    assert not outside, f"{module} imports {outside}, which the core list does not hold"


def test_every_listed_module_exists() -> None:
    missing = [m for m in [*CORE_OF, *ADAPTERS] if not is_module(m)]
    assert not missing, f"renamed or gone (update this list and docs/design.md): {missing}"
    assert not set(CORE) & set(ADAPTERS)


def _table() -> dict[str, dict[str, set[str]]]:
    """The doc's layers table: row (service) -> column -> the module paths in it."""
    text = DOC.read_text()
    assert SECTION in text, f"docs/design.md has no {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    table: dict[str, dict[str, set[str]]] = {}
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        table[cells[0]] = {col: set(PATH.findall(cell)) for col, cell in zip(header, cells, strict=True)}
    return table


@pytest.mark.parametrize(("column", "listed"), [("core (pure)", CORE_OF), ("adapters", ADAPTERS)])
def test_the_doc_names_the_listed_modules(column: str, listed: list[str]) -> None:
    table = _table()
    assert set(table) == {row for row, _ in PACKAGES.values()}
    for package, (row, _) in PACKAGES.items():
        if package == "ticketry_api" and column == "adapters":
            continue  # the api's are its folders (below), whatever the doc adds
        mine = {doc_path(m) for m in listed if m.split(".")[0] == package}
        doc = table[row][column]
        assert doc == mine, f"docs/design.md, {row} / {column}: only in the doc {doc - mine}, only here {mine - doc}"


def test_every_path_the_doc_names_for_the_api_exists() -> None:
    named = set().union(*_table()["api"].values()) - {"api"}
    missing = sorted(p for p in named if not (API / p).exists())
    assert not missing, f"docs/design.md names api paths that are gone: {missing}"


# --- the api's folders ------------------------------------------------------------


def api_modules(*, outside: tuple[str, ...] = ()) -> list[str]:
    """Every module of the api, but those under the folders ``outside``."""
    return [m for m in modules_in("ticketry_api") if not any(doc_path(m).startswith(f"{o}/") for o in outside)]


def in_folder(folder: str) -> list[str]:
    return [m for m in modules_in(f"ticketry_api.{folder}") if m != f"ticketry_api.{folder}"]


# The operators a MongoDB query or update is built of.
MONGO_OPERATORS = frozenset({
    "$and", "$or", "$nor", "$not", "$in", "$nin", "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$exists",
    "$regex", "$set", "$setOnInsert", "$unset", "$inc", "$push", "$pull", "$addToSet", "$match", "$group",
    "$project", "$sort", "$limit", "$lookup",
})  # fmt: skip
MONGO_LIBRARIES = frozenset({"pymongo", "motor", "beanie"})


def test_the_api_core_is_its_core_folder() -> None:
    """The checks above run over every module of ``core/`` (a new one is checked
    by being there), and none of the api's pure modules lives elsewhere."""
    assert set(in_folder("core")) <= set(CORE)
    assert [m for m in CORE if m.startswith("ticketry_api.") and not m.startswith("ticketry_api.core")] == []


@pytest.mark.parametrize("module", api_modules(outside=("store", "ctl")))
def test_only_the_store_builds_mongodb_queries(module: str) -> None:
    """No api module outside ``store/`` imports a MongoDB library but for its
    exception types (the edge answers 503 to them), or writes a query
    operator. ``ctl/``'s operator commands open clients of their own."""
    libraries = sorted(
        n for n in imported(module) if n.split(".")[0] in MONGO_LIBRARIES and not n.startswith("pymongo.errors")
    )
    assert not libraries, f"{module} imports {libraries}: queries are built in ticketry_api.store"
    tree = ast.parse(source_of(module).read_text())
    operators = sorted({
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in MONGO_OPERATORS
    })  # fmt: skip
    assert not operators, f"{module} builds a query ({operators}): that is ticketry_api.store's"


@pytest.mark.parametrize("module", in_folder("routes"))
def test_routes_do_not_import_each_other(module: str) -> None:
    others = sorted(n for n in imported(module) if n.startswith("ticketry_api.routes.") and n != module)
    assert not others, f"{module} imports the routes {others}: what two routes share belongs below them"


def _defines(module: str, what: str) -> list[str]:
    tree = ast.parse(source_of(module).read_text())
    if what == "router":  # an APIRouter made here
        return [
            f"line {n.lineno}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "APIRouter"
        ]
    # an ASGI middleware: a class called with (scope, receive, send)
    return [
        c.name
        for c in ast.walk(tree)
        if isinstance(c, ast.ClassDef)
        for f in c.body
        if isinstance(f, ast.AsyncFunctionDef)
        and f.name == "__call__"
        and [a.arg for a in f.args.args[1:4]] == ["scope", "receive", "send"]
    ]


@pytest.mark.parametrize(("folder", "what"), [("routes", "router"), ("middleware", "middleware")])
def test_each_kind_of_edge_is_in_its_folder(folder: str, what: str) -> None:
    stray = {m: found for m in api_modules(outside=(folder,)) if (found := _defines(m, what))}
    assert not stray, f"a {what} outside {folder}/: {stray}"
    assert all(_defines(m, what) for m in in_folder(folder) if not m.endswith("__init__")), f"{folder}/ holds no {what}"


# The api's top holds its entry point, its dependencies and its settings; every
# other module is in the folder of its layer (docs/design.md).
API_TOP = {"ticketry_api", "ticketry_api.main", "ticketry_api.deps", "ticketry_api.config"}


def test_nothing_lies_loose_at_the_api_top() -> None:
    loose = {m for m in modules_in("ticketry_api") if m.count(".") == 1 and not is_package(m)}
    assert loose, "no module found at the api's top (main.py must be there)"
    assert loose <= API_TOP, f"loose at ticketry_api's top: {sorted(loose - API_TOP)}: put each in its layer's folder"


def _room(module: str) -> str:
    """Where a module of the api stands: its folder under the top, or the top module itself."""
    return module.split(".")[1] if module.count(".") >= 1 else module


def test_the_api_folders_import_each_other_one_way() -> None:
    """Folders (and the three top modules) form layers: no two import each other,
    directly or through others, so each stands on a floor of its own."""
    rooms: dict[str, set[str]] = {}
    for m in modules_in("ticketry_api"):
        if m == "ticketry_api":
            continue
        to = {_room(n) for n in imported(m) if n.startswith("ticketry_api.")}
        rooms.setdefault(_room(m), set()).update(to - {_room(m)})
    assert {"core", "store", "routes", "main"} <= rooms.keys()
    assert rooms["main"], "main imports nothing of the api: the import reading is broken"

    def climbs(start: str, seen: tuple[str, ...]) -> tuple[str, ...] | None:
        for nxt in sorted(rooms.get(seen[-1], ())):
            if nxt == start:
                return (*seen, nxt)
            if nxt not in seen and (loop := climbs(start, (*seen, nxt))):
                return loop
        return None

    loops = {r: loop for r in rooms if (loop := climbs(r, (r,)))}
    assert not loops, f"the api's folders import each other in a loop: {' -> '.join(next(iter(loops.values())))}"
