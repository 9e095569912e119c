"""Capability detection (``ticketry.db.StoreTraits``): from a ``buildInfo``
reply alone, no server."""

from __future__ import annotations

from ticketry.db import StoreTraits

# What FerretDB 1.24 (our build) answers, less its long feature lists.
FERRETDB = {
    "version": "7.0.42", "gitVersion": "unknown", "modules": [], "versionArray": [7, 0, 42, 0],
    "ferretdbVersion": "unknown", "ferretdbFeatures": {"aggregationStages": ["$count"]}, "ok": 1.0,
}  # fmt: skip
# What a MongoDB 8.0 server answers, in part.
MONGODB = {"version": "8.0.4", "gitVersion": "bc35ab4305d9920d9d0491c1c9ef9b72383d31f9", "modules": [], "ok": 1.0}


def test_ferretdb_names_itself_and_gets_point_reads() -> None:
    traits = StoreTraits.of(FERRETDB)
    assert traits == StoreTraits("FerretDB unknown (MongoDB 7.0.42 wire)", indexed_queries=False)


def test_any_other_server_is_taken_for_mongodb_with_indexed_queries() -> None:
    assert StoreTraits.of(MONGODB) == StoreTraits("MongoDB 8.0.4", indexed_queries=True)
    assert StoreTraits.of({"ok": 1.0}).indexed_queries  # a reply without a version still tells
