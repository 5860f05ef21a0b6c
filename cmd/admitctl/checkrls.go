package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
	"github.com/sluicehq/sluice/admission/memstore"
)

func init() {
	register(&command{
		name:    "check-rls",
		usage:   "[-q] FILE|DIR",
		summary: "validate the rate limit configuration sluice-rls serves (envoyproxy/ratelimit's YAML, a file or a directory) offline: every problem with its file, domain and path; the policies its limits become",
		run:     runCheckRLS,
	})
}

func runCheckRLS(_ context.Context, e *env, fs *flag.FlagSet, args []string) int {
	quiet := fs.Bool("q", false, "print nothing but problems (on stderr) when the configuration is valid")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	path := fs.Arg(0)
	cfg, err := rlsconfig.Load(path)
	if err != nil {
		n := 1
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			n = len(j.Unwrap())
		}
		fmt.Fprintln(e.stderr, err)
		fmt.Fprintf(e.stderr, "%s: %d problem(s); the configuration was not accepted\n", path, n)
		return 1
	}
	// The controller is the final judge; offline, in-memory stores stand
	// in for the ones sluice-rls registers.
	var stores []string
	for _, p := range cfg.Policies {
		// memory is every replica's own, built in.
		if p.Store != "" && p.Store != "memory" && !slices.Contains(stores, p.Store) {
			stores = append(stores, p.Store)
		}
	}
	var opts []admission.Option
	for _, s := range stores {
		opts = append(opts, admission.WithStore(s, memstore.Store{}))
	}
	if _, err := admission.New(admission.Config{Policies: cfg.Policies}, opts...); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", path, err)
		return 1
	}
	if *quiet {
		return 0
	}
	fmt.Fprintf(e.stdout, "%s: OK: %d domains (%s), %d limits\n", path, len(cfg.Domains()), strings.Join(cfg.Domains(), ", "), len(cfg.Policies))
	if len(stores) > 0 {
		fmt.Fprintf(e.stdout, "stores sluice-rls must be given: %s\n", strings.Join(stores, ", "))
	}
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tMODE\tALGORITHM\tUNIT\tLIMIT\tPER\tQUEUE\tSTORE\tON_STORE_ERROR")
	for _, p := range cfg.Policies {
		queue, store := "-", "memory"
		if p.Queue.Size > 0 {
			queue = strconv.Itoa(p.Queue.Size)
		}
		if p.Store != "" {
			store = p.Store
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p.Name, p.Mode, p.Algorithm, p.Unit, p.Limit, formatDuration(p.Per), queue, store, p.OnStoreError)
	}
	if err := tw.Flush(); err != nil {
		return 1
	}
	return 0
}
