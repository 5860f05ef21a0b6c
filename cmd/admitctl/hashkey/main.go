// Command hashkey prints the stored form (sha256:...) of an API key, as
// admitctl hash-key does, and reads the key from stdin when not given. It
// imports nothing but admission/apikey (the standard library), so from a
// module that already uses sluice's HTTP middleware or config it runs
// with no new go.sum entries:
//
//	go run github.com/sluicehq/sluice/cmd/admitctl/hashkey < key.txt
//
// (go run …/cmd/admitctl hash-key would need the go.sum entries of every
// dependency of admitctl: PostgreSQL, Redis, OpenTelemetry, gRPC.)
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/cmd/admitctl/internal/hashkey"
)

func main() {
	fs := flag.NewFlagSet("hashkey", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hashkey [KEY]; reads the key from stdin when not given (a key beginning with - goes after --)")
	}
	os.Exit(hashkey.Run(fs, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
