package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/replay"
	"github.com/sluicehq/sluice/shadow/requestlog"
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
	top := fs.Int("top", replay.DefaultTopTenants, "tenants listed per policy")
	maxTenants := fs.Int("max-tenants", shadow.DefaultMaxTenants, "tenants counted by name; the rest are "+shadow.OtherTenant)
	strict := fs.Bool("strict", false, "stop at the first malformed line (exit status 1) instead of skipping it")
	htmlPath := fs.String("html", "", "also write the report as a self-contained HTML `FILE` (charts over time per candidate and policy)")
	threshold := fs.Float64("threshold", shadow.DefaultThreshold, "the refused share drawn on the HTML report's charts")
	suggest := fs.Bool("suggest", false, "per policy of each candidate, the smallest limit (and burst) under which at most --target of its requests would be rejected, as YAML (and in the HTML report)")
	target := fs.Float64("target", replay.DefaultSuggestTarget, "the share of requests --suggest lets a policy reject")
	ignoreTop := fs.Int("ignore-top", 0, "--suggest leaves out the `N` tenants with the most requests")
	reorder := fs.Duration("reorder", 0, "how late a line may come in the log and still be replayed at its own time: a request log written by the gateway or requestlog.Writer has a request's line when it ended, so give the longest request plus queue wait (memory holds that much traffic); 0 replays lines in file order")
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
	if *threshold <= 0 || *threshold >= 1 || *target <= 0 || *target >= 1 {
		problems = append(problems, "--threshold and --target must be shares in (0, 1)")
	}
	if *ignoreTop < 0 {
		problems = append(problems, "--ignore-top must be >= 0")
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

	var cands []replay.Candidate
	failed := false
	for _, path := range configs {
		f, _, ok := loadPolicyFile(e.stderr, path)
		if !ok {
			failed = true
			continue
		}
		if f.Directory.Source == config.DirectoryPostgres {
			// The plans and tenant overrides the gateways enforce are in
			// the database: without them every tenant would be decided by
			// the policies alone.
			fmt.Fprintf(e.stderr, "%s: directory.source postgres: the replay cannot read the database's plans and tenant overrides; "+
				"replay a copy of the file with directory.source file and the plans and tenants admitctl db export prints\n", path)
			failed = true
			continue
		}
		cands = append(cands, replay.Candidate{Name: path, Config: f.Config})
	}
	if failed {
		return 1
	}
	name := *logPath
	if name == "-" {
		name = "stdin"
	}
	var bad int64 // malformed lines so far
	cfg := replay.Config{MaxTenants: *maxTenants, TopTenants: *top, Reorder: *reorder, OnRecordError: func(re *requestlog.RecordError) error {
		if *strict {
			fmt.Fprintf(e.stderr, "%s:%d: %v\n", name, re.Line, re.Err)
			return re
		}
		if bad++; bad <= maxBadLinesShown {
			fmt.Fprintf(e.stderr, "%s:%d: %v (line skipped)\n", name, re.Line, re.Err)
		}
		return nil
	}}
	rp, err := replay.NewReplayer(cfg, cands...)
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
	} else if *suggest {
		// Suggesting reads the log several times: keep a copy of stdin.
		spool, err := spoolStdin(e.stdin)
		if err != nil {
			fmt.Fprintf(e.stderr, "admitctl replay: %v\n", err)
			return 1
		}
		defer os.Remove(spool.Name())
		defer spool.Close()
		in = spool
		*logPath = spool.Name()
	}
	if err := rp.AddLog(ctx, in); err != nil {
		var re *requestlog.RecordError
		if !errors.As(err, &re) {
			fmt.Fprintf(e.stderr, "admitctl replay: %s: %v\n", name, err)
		}
		return 1
	}
	rp.Finish()
	rep := rp.Report()
	if rep.Reordered > 0 {
		fmt.Fprintf(e.stderr, "%s: %d line(s) out of time order, up to %s late; replay with --reorder %s to place them at their own time\n",
			name, rep.Reordered, rep.Lateness, (rep.Lateness+*reorder).Round(time.Second)+time.Second)
	}
	if rep.Skipped > 0 {
		more := ""
		if rep.Skipped > maxBadLinesShown {
			more = fmt.Sprintf(", %d not shown", rep.Skipped-maxBadLinesShown)
		}
		fmt.Fprintf(e.stderr, "%s: %d malformed line(s) skipped%s; the report covers the other %d\n", name, rep.Skipped, more, rep.Records)
	}
	var suggestions []replay.Suggestion
	if *suggest {
		// The malformed lines were reported by the replay: skip them.
		scfg := replay.SuggestConfig{Target: *target, IgnoreTop: *ignoreTop, Replay: cfg}
		scfg.Replay.OnRecordError = func(*requestlog.RecordError) error { return nil }
		open := func() (io.ReadCloser, error) { return os.Open(*logPath) }
		for _, c := range cands {
			s, err := replay.Suggest(ctx, open, c, scfg)
			if err != nil {
				fmt.Fprintf(e.stderr, "admitctl replay: --suggest: %s: %v\n", c.Name, err)
				return 1
			}
			suggestions = append(suggestions, s...)
		}
	}
	if *htmlPath != "" {
		if err := writeHTMLReport(*htmlPath, rep, replay.HTMLOptions{Threshold: *threshold, Suggestions: suggestions}); err != nil {
			fmt.Fprintf(e.stderr, "admitctl replay: %v\n", err)
			return 1
		}
	}
	out := &stickyWriter{w: e.stdout}
	if *format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(jsonReport{Report: rep, BadLines: rep.Skipped, Suggestions: suggestions}); out.err == nil {
			out.err = err
		}
	} else {
		if err := rep.WriteText(out); out.err == nil {
			out.err = err
		}
		if *suggest {
			writeSuggestions(out, suggestions)
		}
	}
	if out.err != nil {
		fmt.Fprintf(e.stderr, "admitctl replay: writing the report: %v\n", out.err)
		return 1
	}
	return 0
}

// stickyWriter writes to w until a write fails, then keeps that error
// and writes nothing more.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

// writeSuggestions prints each candidate's suggestions as a YAML snippet.
func writeSuggestions(w io.Writer, all []replay.Suggestion) {
	for i, s := range all {
		if i == 0 || all[i-1].Candidate != s.Candidate {
			fmt.Fprintf(w, "\n# %s: the smallest limits under which each policy, enforced alone, rejects at most %.1f%% of its requests", s.Candidate, s.Target*100)
			if len(s.Ignored) > 0 {
				names := make([]string, len(s.Ignored))
				for i, t := range s.Ignored {
					names[i] = commentName(t)
				}
				fmt.Fprintf(w, " (leaving out %s)", strings.Join(names, ", "))
			}
			fmt.Fprint(w, "\npolicies:\n")
		}
		fmt.Fprint(w, s.YAML())
	}
}

// commentName returns tenant as it can stand in a YAML comment: itself
// when every rune is printable, else quoted with Go escapes, so that no
// line break YAML knows (U+0085, U+2028, U+2029 among them) ends the
// comment and puts the rest of the name into the policy file.
func commentName(tenant string) string {
	if strings.IndexFunc(tenant, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return tenant
	}
	return strconv.Quote(tenant)
}

// writeHTMLReport writes the HTML report to path, replacing it whole.
func writeHTMLReport(path string, rep replay.Report, opt replay.HTMLOptions) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".report-*.html")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := errors.Join(rep.WriteHTML(tmp, opt), tmp.Chmod(0o644), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// spoolStdin copies r to a temporary file and returns it, read from the
// start.
func spoolStdin(r io.Reader) (*os.File, error) {
	f, err := os.CreateTemp("", "admitctl-replay-*.jsonl")
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// jsonReport is the report of --format json: the replay's, and the count
// of malformed lines skipped.
type jsonReport struct {
	replay.Report
	BadLines    int64               `json:"bad_lines"`
	Suggestions []replay.Suggestion `json:"suggestions,omitempty"`
}
