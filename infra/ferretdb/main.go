// Command ferretdb runs an embedded FerretDB v1 (SQLite backend) for Ticketry's
// local stack and tests. The upstream cmd/ferretdb needs a generated version file,
// so we wrap the embeddable package instead.
package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:27017", "TCP address to listen on")
	dir := flag.String("dir", ".data/ferretdb", "SQLite data directory")
	level := flag.String("log-level", "warn", "log level: debug, info, warn, error")
	// WAL + synchronous=NORMAL: a commit survives a crash of any process (it is
	// in the WAL, handed to the OS) but not of the OS itself; the same trade as
	// Redis's appendfsync everysec beside it. "full" fsyncs every commit (2x the
	// cost of an insert here).
	synchronous := flag.String("synchronous", "normal", "SQLite synchronous pragma: normal or full")
	checkpointEvery := flag.Duration("checkpoint-every", time.Second, "checkpoint the WALs in the background this often (0: SQLite's own, in the committing writer)")
	idIndexEvery := flag.Duration("id-index-every", time.Second, "how often to index new tables' _id lookups (0: never)")
	flag.Parse()

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		log.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	if *synchronous != "normal" && *synchronous != "full" {
		log.Fatalf("-synchronous must be normal or full, got %q", *synchronous)
	}

	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatal(err)
	}

	url := "file:" + *dir + "/?_pragma=synchronous(" + *synchronous + ")"
	if *checkpointEvery > 0 {
		url += "&_pragma=wal_autocheckpoint(0)"
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: *listen},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: url,
	})
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *checkpointEvery > 0 {
		go checkpointWALs(ctx, *dir, *checkpointEvery, logger)
	}
	if *idIndexEvery > 0 {
		go indexIDLookups(ctx, *dir, *idIndexEvery, logger)
	}

	logger.Warn("ferretdb listening", "addr", *listen, "dir", *dir)
	if err := f.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
