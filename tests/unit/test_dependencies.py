"""Each workspace package declares, in its own pyproject, every third-party
distribution its code imports at run time — not through another package's
list, which may drop it — and declares nothing it never imports."""

from __future__ import annotations

import ast
import importlib.util
import sys
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib.metadata import distributions, packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# The workspace's own library: declared as ``ticketry``, imported as its modules.
NOT_IMPORTED = {"ticketry"}


def members() -> list[Path]:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]["members"]
    return sorted(d for p in patterns for d in ROOT.glob(p) if (d / "pyproject.toml").is_file())


@cache
def own_modules() -> frozenset[str]:
    """The top-level modules of the workspace's own packages."""
    return frozenset(m.stem for d in members() for m in (d / "src").iterdir() if m.is_dir() or m.suffix == ".py")


@cache
def _top_level_owners() -> Mapping[str, list[str]]:
    return packages_distributions()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(tree: ast.AST) -> set[str]:
    """Absolute module names imported by ``tree``, outside ``if TYPE_CHECKING:``."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.orelse:
                visit(stmt)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # the names too: ``from opentelemetry import trace`` is a module of a shared namespace
            found.update(f"{node.module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


@cache
def _file_owners() -> dict[Path, str]:
    owners: dict[Path, str] = {}
    for dist in distributions():
        for f in dist.files or ():
            owners[Path(str(dist.locate_file(f))).resolve()] = canonicalize_name(dist.metadata["Name"])
    return owners


def distribution_of(module: str) -> str | None:
    """The installed distribution that provides ``module`` (None: the standard
    library or the workspace). A namespace shared by several distributions
    (``opentelemetry``) is resolved by the file the module comes from."""
    top = module.partition(".")[0]
    if top in sys.stdlib_module_names or top in own_modules():
        return None
    dists = _top_level_owners().get(top)
    assert dists, f"{module} is imported but no installed distribution provides it"
    if len(dists) == 1:
        return canonicalize_name(dists[0])
    name = module
    while name:
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:
            spec = None
        if spec is not None and spec.origin:
            owner = _file_owners().get(Path(spec.origin).resolve())
            if owner:
                return owner
        name = name.rpartition(".")[0]
    raise AssertionError(f"cannot tell which of {dists} provides {module}")


def used_and_declared(package: Path) -> tuple[str, dict[str, set[str]], set[str]]:
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    declared: set[str] = {canonicalize_name(Requirement(r).name) for r in project.get("dependencies", [])}
    used: dict[str, set[str]] = {}
    for source in sorted((package / "src").rglob("*.py")):
        for module in runtime_imports(ast.parse(source.read_text(), str(source))):
            dist = distribution_of(module)
            if dist is not None:
                used.setdefault(dist, set()).add(str(source.relative_to(ROOT)))
    return str(project["name"]), used, declared


@pytest.mark.parametrize("package", members(), ids=lambda p: p.name)
def test_a_package_declares_what_it_imports_and_imports_what_it_declares(package: Path) -> None:
    name, used, declared = used_and_declared(package)
    undeclared = {dist: sorted(files)[:3] for dist, files in used.items() if dist not in declared}
    assert not undeclared, f"{name} imports distributions its pyproject does not declare: {undeclared}"
    unused = declared - set(used) - NOT_IMPORTED
    assert not unused, f"{name} declares distributions it never imports: {sorted(unused)}"


def test_the_scan_sees_imports_and_skips_type_checking_ones() -> None:
    tree = ast.parse(
        "import redis.asyncio\nfrom prometheus_client import Counter\nfrom . import x\n"
        "if TYPE_CHECKING:\n    import types_aiobotocore_s3\nelse:\n    import orjson\n"
        "def f():\n    import jwt\n"
    )
    assert runtime_imports(tree) == {"redis.asyncio", "prometheus_client.Counter", "orjson", "jwt"}
    assert distribution_of("prometheus_client") == "prometheus-client"
    assert distribution_of("opentelemetry.sdk.trace") == "opentelemetry-sdk"
    assert distribution_of("jwt") == "pyjwt"
    assert distribution_of("asyncio") is None and distribution_of("ticketry.auth") is None
