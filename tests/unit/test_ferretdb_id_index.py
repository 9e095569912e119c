"""Our FerretDB build indexes the expression FerretDB v1.24's SQLite backend
uses to find a document by _id (``_ferretdb_sjson->'$._id'``); its own _id
index is on another expression, so without ours every lookup, update and delete
by _id scans the table. Checked on a real FerretDB, in SQLite's query plan."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tests.helpers import ferretdb_client

LOOKUP = "SELECT _ferretdb_sjson FROM {table} WHERE _ferretdb_sjson->'$._id' = ?"


def _table(db: Path, collection: str) -> str:
    with sqlite3.connect(db) as con:
        row = con.execute("SELECT table_name FROM _ferretdb_collections WHERE name = ?", (collection,)).fetchone()
    assert row is not None, f"no table for {collection}"
    return str(row[0])


def _plan(db: Path, table: str) -> str:
    with sqlite3.connect(db) as con:
        rows = con.execute("EXPLAIN QUERY PLAN " + LOOKUP.format(table=f'"{table}"'), ('"tk_1"',)).fetchall()
    return " ".join(str(r[-1]) for r in rows)


def test_lookups_by_id_use_an_index(tmp_path: Path) -> None:
    with ferretdb_client(tmp_path) as client:
        # Given a collection FerretDB created on first use
        client["shop"]["tickets"].insert_many([{"_id": f"tk_{i}", "n": i} for i in range(100)])
        db = tmp_path / "shop.sqlite"
        table = _table(db, "tickets")
        # Then soon the lookup FerretDB runs searches an index (polled; the deadline
        # is only a bound on never)
        deadline = time.monotonic() + 60
        while "USING INDEX" not in (plan := _plan(db, table)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "USING INDEX" in plan and "SCAN" not in plan, plan
        # And FerretDB is unaware of it: it lists only its own indexes, and
        # finds, updates and drops as before
        assert [i["name"] for i in client["shop"]["tickets"].list_indexes()] == ["_id_"]
        assert client["shop"]["tickets"].find_one({"_id": "tk_7"}) == {"_id": "tk_7", "n": 7}
        client["shop"]["tickets"].update_one({"_id": "tk_7"}, {"$set": {"n": 70}})
        assert client["shop"]["tickets"].find_one({"_id": "tk_7"}) == {"_id": "tk_7", "n": 70}
        client["shop"].drop_collection("tickets")
        assert client["shop"]["tickets"].find_one({"_id": "tk_7"}) is None
