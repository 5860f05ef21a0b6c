package main

import (
	"context"
	"flag"

	"github.com/sluicehq/sluice/cmd/admitctl/internal/hashkey"
)

func init() {
	register(&command{
		name:    "hash-key",
		usage:   "[KEY]",
		summary: "print the stored form (sha256:...) of an API key; reads the key from stdin when not given, which keeps it out of shell history (a key beginning with - goes after --)",
		run:     runHashKey,
	})
}

func runHashKey(_ context.Context, e *env, fs *flag.FlagSet, args []string) int {
	return hashkey.Run(fs, args, e.stdin, e.stdout, e.stderr)
}
