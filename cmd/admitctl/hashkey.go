package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/admission/config"
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
	if code, ok := parse(fs, args); !ok {
		return code
	}
	args = fs.Args()
	var key string
	switch len(args) {
	case 0:
		line, err := bufio.NewReader(e.stdin).ReadString('\n')
		if err != nil && line == "" {
			fmt.Fprintln(e.stderr, "admitctl hash-key: no key on stdin")
			return 2
		}
		key = strings.TrimRight(line, "\r\n")
	case 1:
		key = args[0]
	default:
		fs.Usage()
		return 2
	}
	if key == "" {
		fmt.Fprintln(e.stderr, "admitctl hash-key: empty key")
		return 2
	}
	h := config.HashKey(key)
	fmt.Fprintln(e.stdout, h.String())
	fmt.Fprintf(e.stderr, "key id in logs and metrics: %s\n", h.ID())
	return 0
}
