package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
)

func init() {
	register(&command{
		name:    "check",
		usage:   "FILE",
		summary: "validate a policy file offline and print the effective policies per plan",
		run:     runCheck,
	})
}

func runCheck(_ context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	quiet := fs.Bool("q", false, "print nothing when the file is valid")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(e.stderr, "usage: admitctl check [-q] FILE")
		return 2
	}
	f, err := config.Load(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		if es, ok := err.(config.Errors); ok {
			fmt.Fprintf(e.stderr, "%s: %d problem(s); the file was not accepted\n", fs.Arg(0), len(es))
		}
		return 1
	}
	// The controller is the final judge of the rest. Stores are registered
	// by the program that runs the file; offline, in-memory ones stand in.
	var opts []admission.Option
	for _, name := range f.Stores() {
		opts = append(opts, admission.WithStore(name, admission.MemoryStore{}))
	}
	if _, err := admission.New(f.Config, opts...); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", fs.Arg(0), err)
		return 1
	}
	if *quiet {
		return 0
	}
	fmt.Fprintf(e.stdout, "%s: OK: %d policies, %d plans, %d tenants, %d API keys\n",
		fs.Arg(0), len(f.Config.Policies), len(f.Config.Plans.Plans), len(f.Config.Plans.Tenants), len(f.Identity.Keys))
	if stores := f.Stores(); len(stores) > 0 {
		fmt.Fprintf(e.stdout, "stores the program must register: %s\n", strings.Join(stores, ", "))
	}
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLAN\tPOLICY\tMODE\tALGORITHM\tUNIT\tKEY\tLIMIT\tBURST\tPER\tQUEUE")
	for _, r := range f.Effective() {
		burst := "-"
		if r.Algorithm == admission.TokenBucket {
			burst = strconv.FormatInt(r.Burst, 10)
		}
		per := "-"
		switch {
		case r.Algorithm == admission.Quota && r.Period != admission.PeriodFixed:
			per = r.Period.String()
		case r.Per > 0:
			per = formatDuration(r.Per)
		}
		queue := "-"
		if r.Queue > 0 {
			queue = strconv.Itoa(r.Queue)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n",
			r.Plan, r.Policy, r.Mode, r.Algorithm, r.Unit, r.Key, r.Limit, burst, per, queue)
	}
	if err := tw.Flush(); err != nil {
		return 1
	}
	if d := f.Config.Plans.Default; d != "" {
		fmt.Fprintf(e.stdout, "\ntenants without a plan are on %q; \"-\" rows are the policies' own limits\n", d)
	}
	return 0
}

// formatDuration writes 1m rather than 1m0s.
func formatDuration(d time.Duration) string {
	if d%(24*time.Hour) == 0 && d >= 48*time.Hour {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
