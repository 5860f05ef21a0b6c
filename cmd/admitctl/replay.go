package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/shadow"
)

func init() {
	register(&command{
		name:    "replay",
		usage:   "--log F --config A...",
		summary: "replay a request log (JSON Lines, - for stdin) through candidate policy files and compare what each admits, rejects and would reject",
		run:     runReplay,
	})
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runReplay(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	logPath := fs.String("log", "", "the request log, JSON Lines (- reads stdin)")
	var configs stringList
	fs.Var(&configs, "config", "a candidate policy file (repeat for several)")
	format := fs.String("format", "table", "output format: table or json")
	top := fs.Int("top", shadow.DefaultTopTenants, "tenants listed per policy")
	maxTenants := fs.Int("max-tenants", shadow.DefaultMaxTenants, "tenants counted by name; the rest are "+shadow.OtherTenant)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: admitctl replay --log FILE --config A.yaml [--config B.yaml ...] [--format table|json]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var problems []string
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	if *logPath == "" {
		problems = append(problems, "--log is required")
	}
	if len(configs) == 0 {
		problems = append(problems, "at least one --config is required")
	}
	if *format != "table" && *format != "json" {
		problems = append(problems, fmt.Sprintf("--format must be table or json, not %q", *format))
	}
	if *top <= 0 || *maxTenants <= 0 {
		problems = append(problems, "--top and --max-tenants must be > 0")
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(e.stderr, "admitctl replay: "+p)
		}
		fs.Usage()
		return 2
	}

	var cands []shadow.Candidate
	failed := false
	for _, path := range configs {
		f, err := config.Load(path)
		if err != nil {
			fmt.Fprintln(e.stderr, err)
			failed = true
			continue
		}
		cands = append(cands, shadow.Candidate{Name: path, Config: f.Config})
	}
	if failed {
		return 1
	}
	var in io.Reader = e.stdin
	if *logPath != "-" {
		f, err := os.Open(*logPath)
		if err != nil {
			fmt.Fprintf(e.stderr, "admitctl replay: %v\n", err)
			return 1
		}
		defer f.Close()
		in = f
	}
	rep, err := shadow.Replay(ctx, in, shadow.ReplayConfig{MaxTenants: *maxTenants, TopTenants: *top}, cands...)
	if err != nil {
		var re *shadow.RecordError
		if errors.As(err, &re) {
			name := *logPath
			if name == "-" {
				name = "stdin"
			}
			fmt.Fprintf(e.stderr, "%s:%v\n", name, strings.TrimPrefix(err.Error(), "line "))
		} else {
			fmt.Fprintf(e.stderr, "admitctl replay: %v\n", err)
		}
		return 1
	}
	if *format == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return 1
		}
		return 0
	}
	if err := rep.WriteText(e.stdout); err != nil {
		return 1
	}
	return 0
}
