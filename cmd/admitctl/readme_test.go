package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestREADMEReplayFigures checks the replay figures README.md quotes are
// what admitctl prints today: the output of its example command, line by
// line (a line the README cuts with "..." by its beginning), and the
// queued candidate's figures.
func TestREADMEReplayFigures(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)

	const cmd = "$ admitctl replay --log examples/replay/sample.jsonl \\\n    --config examples/replay/current.yaml --config examples/replay/candidate.yaml\n"
	i := strings.Index(readme, cmd)
	if i < 0 {
		t.Fatalf("README.md no longer quotes the command\n%s", cmd)
	}
	quoted, _, ok := strings.Cut(readme[i+len(cmd):], "```")
	if !ok {
		t.Fatal("README.md: the replay example's block does not end")
	}
	// The README's paths are the repository's; the test runs in cmd/admitctl.
	t.Chdir("../..")
	code, out, errs := runArgs("", "replay", "--log", "examples/replay/sample.jsonl", "--config", "examples/replay/current.yaml", "--config", "examples/replay/candidate.yaml")
	if code != 0 {
		t.Fatalf("replay = %d: %s", code, errs)
	}
	got := strings.Split(out, "\n")
	n := 0
	for line := range strings.Lines(quoted) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		n++
		prefix, cut := strings.CutSuffix(line, "...")
		found := false
		for _, g := range got {
			if g == line || cut && strings.HasPrefix(g, prefix) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README.md quotes the line\n%s\nwhich admitctl replay no longer prints; it prints:\n%s", line, out)
		}
	}
	if n < 5 {
		t.Errorf("README.md: %d lines of replay output quoted; want the whole example", n)
	}

	code, out, errs = runArgs("", "replay", "--log", "examples/replay/sample.jsonl", "--config", "examples/replay/current.yaml", "--config", "examples/replay/queued.yaml", "--format", "json")
	if code != 0 {
		t.Fatalf("replay = %d: %s", code, errs)
	}
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	now := findPolicy(t, rep.Report, "examples/replay/current.yaml", "tenant-concurrency")
	q := findPolicy(t, rep.Report, "examples/replay/queued.yaml", "tenant-concurrency")
	want := fmt.Sprintf("sees %d rejections instead of %d (%d for a full queue, %d timed out) and %d requests admitted instead of %d",
		q.Rejected, now.Rejected, q.Reasons["queue_full"], q.Reasons["queue_timeout"], q.Admitted, now.Admitted)
	if !strings.Contains(strings.Join(strings.Fields(readme), " "), want) {
		t.Errorf("README.md lacks the queued example's figures: %q", want)
	}
}
