"""Kubernetes JSON schemas for kubeconform, from a registry package.

kubeconform fetches its schemas from GitHub by default; these machines reach
package registries only. PyPI's ``kubernetes-validate`` ships the same schemas
(generated from each release's OpenAPI document), in a "local" layout: one
file per kind plus ``_definitions.json``, referenced as
``/api/_definitions.json`` under an ``$id`` of ``https://kubernetes.io/api/…``.
This unpacks the strict variants of the releases asked for into
``OUT/v<version>-standalone-strict/<kind>-<group>-<version>.json`` (the file
names kubeconform's ``-schema-location`` template expects), with the ``$id``
dropped and the references made relative, so kubeconform resolves them as
files beside the schema.

    python3 infra/tools/k8s_schemas.py WHEEL OUT 1.30.0 1.37.0

Standard library only (bootstrap runs it before the Python workspace exists).
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

PREFIX = "kubernetes_validate/kubernetes-json-schema/"
ABSOLUTE_REF = "/api/_definitions.json"


def relative_refs(node: Any) -> Any:
    """``node`` with every ``$ref`` to ``/api/_definitions.json`` made relative."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v.startswith(ABSOLUTE_REF):
                v = "_definitions.json" + v[len(ABSOLUTE_REF) :]
            out[k] = relative_refs(v)
        return out
    if isinstance(node, list):
        return [relative_refs(v) for v in node]
    return node


def unpack(wheel: Path, out: Path, versions: list[str]) -> int:
    written = 0
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        for version in versions:
            src = f"{PREFIX}v{version}-local-strict/"
            files = [n for n in names if n.startswith(src) and n.endswith(".json")]
            if not files:
                raise SystemExit(f"{wheel.name} has no schemas for Kubernetes {version}")
            dest = out / f"v{version}-standalone-strict"
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            for name in files:
                schema = json.loads(z.read(name))
                if isinstance(schema, dict):
                    schema.pop("$id", None)
                (dest / name[len(src) :]).write_text(json.dumps(relative_refs(schema)))
                written += 1
    return written


def main() -> None:
    if len(sys.argv) < 4:
        raise SystemExit("usage: k8s_schemas.py WHEEL OUT VERSION...")
    n = unpack(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
    print(f"k8s schemas: {n} files for {', '.join(sys.argv[3:])}")


if __name__ == "__main__":
    main()
