package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/weights"
)

// admitctl prices lists every built-in entry with its prices, month and
// provider page, the unverified ones marked.
func TestPricesList(t *testing.T) {
	code, out, errs := runArgs("", "prices")
	if code != 0 {
		t.Fatalf("prices = %d: %s", code, errs)
	}
	lines := strings.Split(out, "\n")
	for _, l := range weights.BuiltinPrices() {
		found := false
		for _, line := range lines {
			f := strings.Fields(line)
			if len(f) >= 9 && f[0] == l.Model && f[7] == l.Since && f[8] == l.Source && (len(f) == 10) == l.Unverified {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no line for %s (since %s, %s, unverified %v) in:\n%s", l.Model, l.Since, l.Source, l.Unverified, out)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), " claude-opus-4-5 5 0.5 6.25 10 25 50% ") {
		t.Errorf("claude-opus-4-5's prices are not listed as 5 in, 0.5 cache read, 6.25 cache write, 10 one-hour cache write, 25 out:\n%s", out)
	}
}

// With --request-log, the models seen in traffic that have no price are
// listed with their request counts (a newer family among them: no older
// family prices it), and the exit status is 1; with a policy file that
// prices them, they are priced (by an entry, or flagged as charged the
// fallback) and the status is 0. Malformed lines are counted and
// skipped.
func TestPricesRequestLog(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "requests.jsonl")
	line := func(model string) string {
		return `{"time":"2026-01-01T00:00:00Z","tenant":"a","operation":"POST /v1/chat/completions","model":"` + model + `","tokens":10}` + "\n"
	}
	data := line("gpt-4o-2024-08-06") + line("claude-opus-4-6") + line("claude-opus-4-6") + line("gpt-5.2") + line("in-house-llm") + "not json\n" + line("claude-sonnet-4-5-20250929")
	if err := os.WriteFile(log, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runArgs("", "prices", "--request-log", log)
	if code != 1 {
		t.Fatalf("prices --request-log = %d; want 1 (unpriced models seen): %s%s", code, out, errs)
	}
	_, traffic, _ := strings.Cut(out, log+": ")
	traffic = strings.Join(strings.Fields(traffic), " ")
	for _, want := range []string{
		"5 model(s) seen",
		"3 model(s) with no price",
		`"claude-opus-4-6" 2 request(s)`,
		`"gpt-5.2" 1 request(s)`,
		`"in-house-llm" 1 request(s)`,
	} {
		if !strings.Contains(traffic, want) {
			t.Errorf("output lacks %q:\n%s", want, traffic)
		}
	}
	for _, priced := range []string{"gpt-4o-2024-08-06", "claude-sonnet-4-5"} {
		if strings.Contains(traffic, priced) {
			t.Errorf("%s is priced, yet listed:\n%s", priced, traffic)
		}
	}
	if !strings.Contains(errs, "1 malformed line(s) skipped") {
		t.Errorf("stderr %q; want the malformed line counted", errs)
	}

	cfg := filepath.Join(dir, "policy.yaml")
	policy := `policies:
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 100M}
prices:
  unpriced: fallback
  fallback: {input: 10, output: 30}
  models:
    claude-opus-4-6: {input: 5, output: 25}
    gpt-5.2: {input: 1.75, output: 14}
`
	if err := os.WriteFile(cfg, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runArgs("", "prices", "--config", cfg, "--request-log", log)
	if code != 0 || !strings.Contains(out, "1 model(s) charged the fallback price") || !strings.Contains(out, `"in-house-llm"`) || strings.Contains(out, "with no price") {
		t.Errorf("with the policy file's prices: %d\n%s%s; want in-house-llm on the fallback, nothing unpriced", code, out, errs)
	}
}
