package main

import (
	"context"
	"database/sql"
	"log/slog"
	"time"
)

// SQLite checkpoints its WAL into the database file when the WAL passes 1,000
// pages (wal_autocheckpoint), inside the commit that crossed the line: that
// insert copies ~4 MB and fsyncs before it returns, and every write queued
// behind it waits (measured: bursts of 60–140 ms POSTs every few seconds at
// 200 orders/s, p99 94 ms; with this, p99 33 ms).
//
// With -checkpoint-every, FerretDB's own connections never checkpoint
// (wal_autocheckpoint(0) in its URL) and this loop does, beside the writers:
//
//   - PASSIVE copies what the WAL holds without taking the writer lock, so
//     inserts go on meanwhile; under steady writes it never ends up with an
//     empty WAL, which alone would let the WAL grow without bound (measured:
//     109 MB in 30 s);
//   - RESTART then takes the writer lock, copies the little that came in
//     since, and waits for readers of the old WAL frames (at most the busy
//     timeout, else it gives up until the next tick), so the next write starts
//     the WAL from its beginning: the WAL stays at about one interval's writes.
func checkpointWALs(ctx context.Context, dir string, every time.Duration, logger *slog.Logger) {
	eachDatabase(ctx, dir, every, "_pragma=busy_timeout(50)", logger, func(ctx context.Context, db *sql.DB) error {
		for _, mode := range []string{"PASSIVE", "RESTART"} {
			var busy, frames, copied int
			if err := db.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &frames, &copied); err != nil {
				return err
			}
			logger.Debug("checkpoint", "mode", mode, "busy", busy, "frames", frames, "copied", copied)
		}
		return nil
	})
}
