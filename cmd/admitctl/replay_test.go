package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shadow/replay"
)

const (
	sampleLog = "../../examples/replay/sample.jsonl"
	current   = "../../examples/replay/current.yaml"
	candidate = "../../examples/replay/candidate.yaml"
)

func TestReplayTable(t *testing.T) {
	code, out, errs := runArgs("", "replay", "--log", sampleLog, "--config", current, "--config", candidate)
	if code != 0 {
		t.Fatalf("replay = %d; stderr:\n%s", code, errs)
	}
	want, err := os.ReadFile("testdata/replay_sample.golden")
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("replay output:\n%s\nwant (testdata/replay_sample.golden):\n%s", out, want)
	}
}

func TestReplayJSON(t *testing.T) {
	code, out, errs := runArgs("", "replay", "--log", sampleLog, "--config", current, "--config", candidate, "--format", "json", "--top", "2")
	if code != 0 {
		t.Fatalf("replay --format json = %d; stderr:\n%s", code, errs)
	}
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not a report: %v\n%s", err, out)
	}
	if rep.Records != 974 || len(rep.Candidates) != 2 || rep.Candidates[1].Candidate != candidate {
		t.Fatalf("report: %d records, %d candidates", rep.Records, len(rep.Candidates))
	}
	for _, c := range rep.Candidates {
		if c.Admitted+c.Rejected != c.Requests {
			t.Errorf("%s: admitted %d + rejected %d != %d", c.Candidate, c.Admitted, c.Rejected, c.Requests)
		}
		for _, p := range c.Policies {
			if len(p.Tenants) > 2 {
				t.Errorf("%s %s: %d top tenants with --top 2", c.Candidate, p.Policy, len(p.Tenants))
			}
		}
	}
	found := false
	for _, p := range rep.Candidates[1].Policies {
		if p.Policy != "tenant-concurrency" {
			continue
		}
		found = true
		if p.WouldReject == 0 || p.Tenants[0].Tenant != "noisy" {
			t.Errorf("candidate's shadow concurrency cap: %+v", p)
		}
	}
	if !found {
		t.Errorf("no tenant-concurrency policy in the candidate's report: %+v", rep.Candidates[1].Policies)
	}
}

// The log can come from stdin, for loadgen | replay.
func TestReplayStdin(t *testing.T) {
	data, err := os.ReadFile(sampleLog)
	if err != nil {
		t.Fatal(err)
	}
	_, fromFile, _ := runArgs("", "replay", "--log", sampleLog, "--config", current)
	code, fromStdin, errs := runArgs(string(data), "replay", "--log", "-", "--config", current)
	if code != 0 || fromStdin != fromFile {
		t.Errorf("replay --log - = %d, %q (stderr %q); want the file's output", code, fromStdin, errs)
	}
}

func TestReplayExitCodes(t *testing.T) {
	dir := t.TempDir()
	badLog := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(badLog, []byte(`{"time":"2026-01-01T00:00:00Z","tenant":"a"}`+"\n\n"+`{"time":"2026-01-01T00:00:01Z","tenant":"a","tokens":-1}`+"\n"), 0o644)
	badConfig := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badConfig, []byte("policies:\n  - name: a\n    algorithm: token_bucket\n    limit: 0\n    per: 1m\n"), 0o644)
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"replay"}, 2, "--log is required"},
		{[]string{"replay", "--log", sampleLog}, 2, "at least one --config is required"},
		{[]string{"replay", "--log", sampleLog, "--config", current, "--format", "xml"}, 2, `--format must be table or json, not "xml"`},
		{[]string{"replay", "--log", sampleLog, "--config", current, "extra"}, 2, "unexpected arguments"},
		{[]string{"replay", "--colour"}, 2, "flag provided but not defined"},
		{[]string{"replay", "--log", filepath.Join(dir, "missing.jsonl"), "--config", current}, 1, "no such file"},
		{[]string{"replay", "--log", badLog, "--config", current, "--strict"}, 1, badLog + ":3: tokens: must be >= 0, got -1\n"},
		{[]string{"replay", "--log", sampleLog, "--config", badConfig}, 1, "policies[0].limit: must be > 0"},
		{[]string{"replay", "--log", sampleLog, "--config", filepath.Join(dir, "missing.yaml")}, 1, "missing.yaml"},
	}
	for _, tt := range tests {
		code, out, errs := runArgs("", tt.args...)
		if code != tt.code || !strings.Contains(errs, tt.stderr) {
			t.Errorf("%v = %d, stderr %q; want %d and %q", tt.args, code, errs, tt.code, tt.stderr)
		}
		if out != "" {
			t.Errorf("%v wrote %q to stdout", tt.args, out)
		}
	}
}

// A candidate whose plans and tenants live in PostgreSQL is refused: the
// replay cannot see them and would decide every tenant by the policies
// alone, without the plans and overrides the gateways enforce.
func TestReplayDirectoryPostgres(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pg.yaml")
	os.WriteFile(path, []byte("version: 1\ndirectory:\n  source: postgres\npolicies:\n  - name: a\n    key: tenant\n    algorithm: token_bucket\n    limit: 10\n    per: 1m\n"), 0o644)
	code, out, errs := runArgs("", "replay", "--log", sampleLog, "--config", path)
	if code != 1 || !strings.Contains(errs, path+": directory.source postgres") || !strings.Contains(errs, "admitctl db export") {
		t.Errorf("replay of a postgres-directory candidate = %d, stderr %q; want 1 and why", code, errs)
	}
	if out != "" {
		t.Errorf("stdout %q; want none", out)
	}
}

// failWriter fails every write, as a closed pipe or a full disk does.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// A report that cannot be written is an error said on stderr, status 1.
func TestReplayWriteError(t *testing.T) {
	for _, format := range []string{"table", "json"} {
		var errb bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: failWriter{}, stderr: &errb}
		code := run(context.Background(), e, []string{"replay", "--log", sampleLog, "--config", current, "--format", format})
		if code != 1 || !strings.Contains(errb.String(), "no space left on device") {
			t.Errorf("--format %s to a failing stdout = %d, stderr %q; want 1 and the error", format, code, errb.String())
		}
	}
}
