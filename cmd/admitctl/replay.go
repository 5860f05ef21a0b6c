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
	"time"

	"github.com/sluicehq/sluice/shadow"
)

func init() {
	register(&command{
		name:    "replay",
		usage:   "--log FILE --config A.yaml [--config B.yaml ...] [FLAGS]",
		summary: "replay a request log (JSON Lines, - for stdin) through candidate policy files and compare what each admits, rejects and would reject; malformed lines are reported with their line numbers and skipped (--strict: the first one stops the replay)",
		run:     runReplay,
	})
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// maxBadLinesShown bounds the malformed lines replay names one by one; the
// rest are counted.
const maxBadLinesShown = 20

func runReplay(ctx context.Context, e *env, fs *flag.FlagSet, args []string) int {
	logPath := fs.String("log", "", "the request log `FILE`, JSON Lines (- reads stdin)")
	var configs stringList
	fs.Var(&configs, "config", "a candidate policy `FILE` (repeat for several)")
	format := fs.String("format", "table", "output format: table or json")
	top := fs.Int("top", shadow.DefaultTopTenants, "tenants listed per policy")
	maxTenants := fs.Int("max-tenants", shadow.DefaultMaxTenants, "tenants counted by name; the rest are "+shadow.OtherTenant)
	strict := fs.Bool("strict", false, "stop at the first malformed line (exit status 1) instead of skipping it")
	reorder := fs.Duration("reorder", 5*time.Minute, "how late a line may come in the log and be replayed at its own time (a request log has a request's line when it ended); 0 replays lines in file order")
	if code, ok := parse(fs, args); !ok {
		return code
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
	if *reorder < 0 {
		problems = append(problems, "--reorder must be >= 0")
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
		f, _, ok := loadPolicyFile(e.stderr, path)
		if !ok {
			failed = true
			continue
		}
		cands = append(cands, shadow.Candidate{Name: path, Config: f.Config})
	}
	if failed {
		return 1
	}
	name := *logPath
	if name == "-" {
		name = "stdin"
	}
	var bad int64 // malformed lines so far
	cfg := shadow.ReplayConfig{MaxTenants: *maxTenants, TopTenants: *top, Reorder: *reorder, OnRecordError: func(re *shadow.RecordError) error {
		if *strict {
			fmt.Fprintf(e.stderr, "%s:%d: %v\n", name, re.Line, re.Err)
			return re
		}
		if bad++; bad <= maxBadLinesShown {
			fmt.Fprintf(e.stderr, "%s:%d: %v (line skipped)\n", name, re.Line, re.Err)
		}
		return nil
	}}
	rp, err := shadow.NewReplayer(cfg, cands...)
	if err != nil {
		fmt.Fprintf(e.stderr, "admitctl replay: %v\n", err)
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
	if err := rp.AddLog(ctx, in); err != nil {
		var re *shadow.RecordError
		if !errors.As(err, &re) {
			fmt.Fprintf(e.stderr, "admitctl replay: %s: %v\n", name, err)
		}
		return 1
	}
	rp.Finish()
	rep := rp.Report()
	if rep.Skipped > 0 {
		more := ""
		if rep.Skipped > maxBadLinesShown {
			more = fmt.Sprintf(", %d not shown", rep.Skipped-maxBadLinesShown)
		}
		fmt.Fprintf(e.stderr, "%s: %d malformed line(s) skipped%s; the report covers the other %d\n", name, rep.Skipped, more, rep.Records)
	}
	if *format == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(jsonReport{ReplayReport: rep, BadLines: rep.Skipped}); err != nil {
			return 1
		}
		return 0
	}
	if err := rep.WriteText(e.stdout); err != nil {
		return 1
	}
	return 0
}

// jsonReport is the report of --format json: the replay's, and the count
// of malformed lines skipped.
type jsonReport struct {
	shadow.ReplayReport
	BadLines int64 `json:"bad_lines"`
}
