"""Our FerretDB build checkpoints SQLite's WAL in the background (FerretDB's
own connections never do, so no insert pays for a checkpoint); under writes
that never pause, the WAL must still be reset rather than grow with every
write. Checked on a real FerretDB, by the size of its WAL file."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.helpers import ferretdb_client


def test_the_wal_stays_bounded_under_writes_that_never_pause(tmp_path: Path) -> None:
    with ferretdb_client(tmp_path) as client:
        col = client["shop"]["blobs"]
        wal = tmp_path / "shop.sqlite-wal"
        written = peak = 0
        # When about 1 MB is inserted after 1 MB, back to back, until 40 MB went
        # through and for at least 10 s (ten of its checkpoint intervals; a slow
        # machine takes longer to write 40 MB, and gets more of them)
        t0 = time.monotonic()
        while written < 40_000_000 or time.monotonic() - t0 < 10:
            assert time.monotonic() - t0 < 240, f"only {written} bytes written in 240 s"
            docs = [{"_id": f"b{written}-{i}", "blob": os.urandom(50_000).hex()} for i in range(10)]
            col.insert_many(docs)
            written += sum(len(d["blob"]) for d in docs)
            peak = max(peak, wal.stat().st_size if wal.exists() else 0)
        # Then the WAL held a small part of what went through it (a WAL
        # that is never reset holds all of it)
        assert peak < written / 3, f"WAL peaked at {peak} bytes after {written} written"
        print(f"\nWAL peak {peak} bytes, {written} written in {time.monotonic() - t0:.1f} s")
        assert col.count_documents({}) == written // 100_000
