// composecheck validates Compose files the way `docker compose config` does,
// without a Docker engine: compose-go (the Compose Specification's reference
// loader, which docker compose itself uses) checks each file against the
// spec's JSON schema, interpolates ${VARS} from the environment (a required
// one that is missing fails), normalises, and checks the model's consistency
// (depends_on, volumes, networks, secrets that no file defines fail).
//
//	composecheck [-json] FILE...
//
// Prints the resolved project (YAML, or JSON with -json) and exits 0, or
// prints why not and exits 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/compose-spec/compose-go/v2/cli"
	"go.yaml.in/yaml/v3"
)

func main() {
	asJSON := flag.Bool("json", false, "print the resolved project as JSON")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: composecheck [-json] FILE...")
		os.Exit(2)
	}
	options, err := cli.NewProjectOptions(flag.Args(),
		cli.WithOsEnv,
		cli.WithInterpolation(true),
		cli.WithResolvedPaths(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
	)
	if err != nil {
		fail(err)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fail(err)
	}
	var out []byte
	if *asJSON {
		out, err = json.MarshalIndent(project, "", "  ")
	} else {
		out, err = yaml.Marshal(project)
	}
	if err != nil {
		fail(err)
	}
	os.Stdout.Write(out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "composecheck:", err)
	os.Exit(1)
}
