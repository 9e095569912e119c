package main

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the driver FerretDB itself uses ("sqlite")
)

// eachDatabase runs fn on every SQLite database file under dir (FerretDB makes
// one per MongoDB database) every interval until ctx ends, each through a
// connection of its own opened with the given URL parameters.
func eachDatabase(ctx context.Context, dir string, every time.Duration, params string, logger *slog.Logger,
	fn func(context.Context, *sql.DB) error,
) {
	dbs := map[string]*sql.DB{}
	defer func() {
		for _, db := range dbs {
			_ = db.Close()
		}
	}()

	for {
		files, _ := filepath.Glob(filepath.Join(dir, "*.sqlite"))
		for _, file := range files {
			db, ok := dbs[file]
			if !ok {
				var err error
				if db, err = sql.Open("sqlite", "file:"+file+"?"+params); err != nil {
					logger.Warn("open", "file", file, "error", err)
					continue
				}
				db.SetMaxOpenConns(1)
				dbs[file] = db
			}
			if err := fn(ctx, db); err != nil && ctx.Err() == nil {
				logger.Warn("sqlite maintenance", "file", file, "error", err)
			}
		}

		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
