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
	rp, err := shadow.NewReplayer(shadow.ReplayConfig{MaxTenants: *maxTenants, TopTenants: *top}, cands...)
	if err != nil {
		fmt.Fprintf(e.stderr, "admitctl replay: %v\n", err)
		return 1
	}
	var in io.Reader = e.stdin
	name := *logPath
	if name == "-" {
		name = "stdin"
	} else {
		f, err := os.Open(*logPath)
		if err != nil {
			fmt.Fprintf(e.stderr, "admitctl replay: %v\n", err)
			return 1
		}
		defer f.Close()
		in = f
	}
	sum, err := replayLog(ctx, rp, in, func(re *shadow.RecordError, n int64) error {
		if *strict {
			fmt.Fprintf(e.stderr, "%s:%d: %v\n", name, re.Line, re.Err)
			return re
		}
		if n <= maxBadLinesShown {
			fmt.Fprintf(e.stderr, "%s:%d: %v (line skipped)\n", name, re.Line, re.Err)
		}
		return nil
	})
	if err != nil {
		var re *shadow.RecordError
		if !errors.As(err, &re) {
			fmt.Fprintf(e.stderr, "admitctl replay: %s: %v\n", name, err)
		}
		return 1
	}
	if sum.bad > 0 {
		more := ""
		if sum.bad > maxBadLinesShown {
			more = fmt.Sprintf(", %d not shown", sum.bad-maxBadLinesShown)
		}
		fmt.Fprintf(e.stderr, "%s: %d malformed line(s) skipped%s; the report covers the other %d\n", name, sum.bad, more, sum.records)
	}
	rp.Finish()
	rep := rp.Report()
	if *format == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(jsonReport{ReplayReport: rep, BadLines: sum.bad}); err != nil {
			return 1
		}
		return 0
	}
	if err := writeReport(e.stdout, rep, sum); err != nil {
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

// logSummary is what replayLog saw of the log besides the replay itself.
type logSummary struct {
	records, bad int64
	// tokens and cost report whether any record carries an estimate of
	// that unit: without one, the columns of refused tokens or cost say
	// nothing.
	tokens, cost bool
}

// replayLog reads the request log r into rp. On a malformed line it calls
// bad with the problem and the count of malformed lines so far: nil skips
// the line, an error stops the reading with that error. The log is read
// and parsed on its own goroutine, a few batches of records ahead of the
// replay.
func replayLog(ctx context.Context, rp *shadow.Replayer, r io.Reader, bad func(re *shadow.RecordError, n int64) error) (logSummary, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const batchSize, batches = 1024, 4
	type batch struct {
		recs []shadow.Record
		bad  []*shadow.RecordError // the malformed lines among them, in order
		err  error                 // after them: io.EOF, or what stopped the reading
	}
	free, full := make(chan *batch, batches), make(chan *batch, batches)
	for range batches {
		free <- &batch{recs: make([]shadow.Record, batchSize)}
	}
	go func() {
		defer close(full)
		lr := shadow.NewLogReader(r)
		for {
			var b *batch
			select {
			case b = <-free:
			case <-ctx.Done():
				return
			}
			n := 0
			b.bad, b.err = b.bad[:0], nil
			for n < batchSize && b.err == nil {
				err := lr.Read(&b.recs[n])
				var re *shadow.RecordError
				switch {
				case errors.As(err, &re):
					b.bad = append(b.bad, re)
				case err != nil:
					b.err = err
				default:
					n++
				}
			}
			b.recs = b.recs[:n]
			full <- b
			if b.err != nil {
				return
			}
		}
	}()
	var sum logSummary
	for b := range full {
		for _, re := range b.bad {
			sum.bad++
			if err := bad(re, sum.bad); err != nil {
				return sum, err
			}
		}
		for i := range b.recs {
			rec := &b.recs[i]
			sum.tokens = sum.tokens || rec.Tokens != 0
			sum.cost = sum.cost || rec.Cost != 0
			rp.Add(rec)
		}
		sum.records += int64(len(b.recs))
		switch {
		case errors.Is(b.err, io.EOF):
			return sum, nil
		case b.err != nil:
			return sum, b.err
		}
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		b.recs = b.recs[:batchSize]
		free <- b
	}
	return sum, ctx.Err()
}
