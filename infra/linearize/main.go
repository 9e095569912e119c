// Command linearize checks a recorded history of Ticketry client operations
// (JSON lines, written by tests/history.py) for linearizability with porcupine,
// against two models: a tier's sold count (capacity) and a ticket's check-in.
//
//	linearize [-model auto|capacity|checkin] [-viz out.html] [-timeout 60s] history.jsonl
//
// Exit 0 with "ok: N operations, M partitions"; 1 with "not linearizable: …"
// naming the model and the partition; 2 on malformed input or usage; 3 when
// the check did not finish within -timeout (no verdict).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("linearize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "auto", "auto (each operation's op), capacity or checkin (every operation must be of it)")
	viz := fs.String("viz", "", "write porcupine's HTML visualization of the whole history to this path")
	timeout := fs.Duration("timeout", time.Minute, "give up on a partition after this long (exit 3)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: linearize [-model auto|capacity|checkin] [-viz out.html] [-timeout 60s] history.jsonl")
		return 2
	}
	if *model != "auto" && *model != modelCapacity && *model != modelCheckin {
		fmt.Fprintf(stderr, "malformed: -model %q: want auto, capacity or checkin\n", *model)
		return 2
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "malformed: %v\n", err)
		return 2
	}
	defer f.Close()
	h, err := parse(f, *model)
	if err != nil {
		fmt.Fprintf(stderr, "malformed: %s: %v\n", fs.Arg(0), err)
		return 2
	}
	v := check(h, *timeout)
	if *viz != "" {
		if err := visualize(h, *viz); err != nil {
			fmt.Fprintf(stderr, "visualization not written: %v\n", err)
		}
	}
	switch {
	case len(v.illegal) > 0:
		for _, p := range v.illegal {
			why := ""
			if v.why[p] != "" {
				why = "; " + v.why[p]
			}
			fmt.Fprintf(stdout, "not linearizable: model %s, partition %s (%d operations%s)\n", p.model, p.key, len(p.ops), why)
		}
		if *viz != "" {
			fmt.Fprintf(stdout, "visualization: %s\n", *viz)
		}
		return 1
	case len(v.unknown) > 0:
		for _, p := range v.unknown {
			fmt.Fprintf(stdout, "unknown: model %s, partition %s: no verdict within %s\n", p.model, p.key, *timeout)
		}
		return 3
	}
	fmt.Fprintf(stdout, "ok: %d operations, %d partitions (%d of unknown outcome, %d without effect left out)\n",
		h.checked, len(h.partitions), h.pending, h.dropped)
	return 0
}
