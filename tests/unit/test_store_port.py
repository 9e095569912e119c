"""The api speaks to the store through one port (``ticketry_api.store``):
no module outside that package touches a collection or a document's own
store methods, save two operator commands (``ctl/``).

Read from the source with ``ast`` (no server). The exempt modules must be
found doing it, so the check is seen to catch what it is for."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[2] / "services" / "api" / "src" / "ticketry_api"
DOCUMENT_MODULES = {"ticketry.documents", "ticketry.webhook_documents"}
STORE_METHODS = {"find", "find_one", "find_many", "get", "insert", "insert_many", "delete", "distinct", "count"}
EXEMPT = {"ctl/webhooks.py", "ctl/replay.py"}


def store_calls(path: Path) -> list[str]:
    """``line: what`` for each place the module reaches the store itself."""
    tree = ast.parse(path.read_text())
    documents = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in DOCUMENT_MODULES
        for alias in node.names
    }
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "get_pymongo_collection":
            found.append(f"{node.lineno}: get_pymongo_collection")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, method = node.func.value, node.func.attr
            if isinstance(owner, ast.Name) and owner.id in documents and method in STORE_METHODS:
                found.append(f"{node.lineno}: {owner.id}.{method}")
            elif method == "insert" and not node.args and not node.keywords:  # a document's own insert()
                found.append(f"{node.lineno}: .insert()")
        elif (  # client[db][col]
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Subscript)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "client"
        ):
            found.append(f"{node.lineno}: client[db][col]")
    return found


MODULES = sorted(p.relative_to(API).as_posix() for p in API.rglob("*.py") if p.parts[len(API.parts)] != "store")


@pytest.mark.parametrize("module", [m for m in MODULES if m not in EXEMPT])
def test_only_the_store_package_reaches_the_store(module: str) -> None:
    assert store_calls(API / module) == [], f"{module} reaches the store itself: use ticketry_api.store"


@pytest.mark.parametrize("module", sorted(EXEMPT))
def test_the_exempt_modules_are_seen_reaching_the_store(module: str) -> None:
    # The detector finds what the exempt modules do, so a clean module above is clean.
    assert store_calls(API / module), f"{module} no longer reaches the store: drop it from EXEMPT"


def test_the_store_package_is_where_the_collections_are() -> None:
    inside = [c for p in sorted((API / "store").glob("*.py")) for c in store_calls(p)]
    assert len(inside) >= 10
