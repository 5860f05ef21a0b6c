package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// logFile writes lines as a request log and returns its path.
func logFile(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func rec(sec int, tenant, extra string) string {
	return fmt.Sprintf(`{"time":"2026-01-01T00:00:%02dZ","tenant":%q%s}`, sec, tenant, extra)
}

// TestReplayBadLines: malformed lines are named with their line numbers
// and skipped, the report covers the rest and says how many were skipped;
// --strict stops at the first with status 1 and no report.
func TestReplayBadLines(t *testing.T) {
	log := logFile(t,
		rec(0, "a", ""),
		"",
		rec(1, "a", `,"tokens":-1`),
		rec(2, "a", ""),
		`{"time":"2026-01-01T00:00:03Z","tenant":`,
		rec(4, "b", `,"colour":"blue"`),
		rec(5, "b", ""),
	)
	code, out, errs := runArgs("", "replay", "--log", log, "--config", current)
	wantErr := log + ":3: tokens: must be >= 0, got -1 (line skipped)\n" +
		log + ":5: truncated JSON record (40 bytes) (line skipped)\n" +
		log + ":6: unknown field \"colour\" (line skipped)\n" +
		log + ": 3 malformed line(s) skipped; the report covers the other 3\n"
	if code != 0 || errs != wantErr {
		t.Errorf("replay = %d, stderr:\n%s\nwant 0 and:\n%s", code, errs, wantErr)
	}
	if !strings.HasPrefix(out, "replayed 3 requests over 5s through 1 candidate(s); 3 malformed line(s) skipped\n") {
		t.Errorf("report:\n%s", out)
	}

	code, out, errs = runArgs("", "replay", "--log", log, "--config", current, "--strict")
	if want := log + ":3: tokens: must be >= 0, got -1\n"; code != 1 || out != "" || errs != want {
		t.Errorf("replay --strict = %d, stdout %q, stderr %q; want 1, nothing and %q", code, out, errs, want)
	}

	code, out, _ = runArgs("", "replay", "--log", log, "--config", current, "--format", "json")
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.BadLines != 3 || rep.Records != 3 {
		t.Errorf("replay --format json = %d, %v: %d bad lines, %d records; want 3 and 3", code, err, rep.BadLines, rep.Records)
	}
}

// A log of garbage names the first lines one by one, then counts.
func TestReplayManyBadLines(t *testing.T) {
	lines := []string{rec(0, "a", "")}
	for range 50 {
		lines = append(lines, "not json")
	}
	code, _, errs := runArgs("", "replay", "--log", logFile(t, lines...), "--config", current)
	if n := strings.Count(errs, "(line skipped)"); code != 0 || n != maxBadLinesShown ||
		!strings.Contains(errs, ":21: ") || strings.Contains(errs, ":22: ") ||
		!strings.Contains(errs, "50 malformed line(s) skipped, 30 not shown; the report covers the other 1") {
		t.Errorf("replay = %d, %d lines named; stderr:\n%s", code, n, errs)
	}
}

// TestReplayColumns: the refused tokens and cost columns appear only for
// logs whose records estimate them.
func TestReplayColumns(t *testing.T) {
	tests := []struct {
		name, extra string
		golden      string
	}{
		{"requests only", "", "replay_requests_only.golden"},
		{"tokens", `,"tokens":100`, "replay_tokens.golden"},
		{"cost", `,"cost":7`, "replay_cost.golden"},
	}
	// Run where the candidate lies, so that its name, and the table's
	// widths, are the same on every run.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	const cfg = "two.yaml"
	if err := os.WriteFile(cfg, []byte("policies:\n  - {name: two-at-once, key: [tenant], algorithm: concurrency, limit: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lines []string
			for i := range 6 {
				lines = append(lines, rec(i, "a", `,"duration":"10s"`+tt.extra))
			}
			code, out, errs := runArgs(strings.Join(lines, "\n"), "replay", "--log", "-", "--config", cfg)
			if code != 0 || errs != "" {
				t.Fatalf("replay = %d, stderr %q", code, errs)
			}
			goldenFile(t, filepath.Join(wd, "testdata", tt.golden), out)
		})
	}
}

// A candidate file with a typo gets the same answer as from check.
func TestReplayConfigSuggests(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(cfg, []byte("policies:\n  - {name: a, algorithm: token_bucket, limit: 1, per: 1s, key: [tennant]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runArgs("", "replay", "--log", sampleLog, "--config", cfg)
	if want := `unknown key part "tennant"; did you mean "tenant"?`; code != 1 || out != "" || !strings.Contains(errs, want) {
		t.Errorf("replay = %d, stdout %q, stderr %q; want 1, nothing and %q", code, out, errs, want)
	}
}
