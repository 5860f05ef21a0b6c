package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckListsPrices: with a cost policy, check -prices lists the price of
// every model the prices section or a policy names, cache writes and the
// batch discount included, and the fallback.
func TestCheckListsPrices(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.yaml")
	os.WriteFile(path, []byte(`policies:
  - {name: spend, algorithm: quota, unit: cost, period: month, limit: 100M, match: {models: [gpt-4o-mini, my-llm, claude-sonnet-4-5]}}
prices:
  fallback: {input: 10, output: 30}
  models:
    llama-3.3-70b: {input: 0.59, output: 0.79, batch_discount: 0.25}
    claude-sonnet-4: {input: 3, output: 15, cached_input: 0.3, cache_write: 3.75}
  aliases:
    prod-llama: llama-3.3-70b
`), 0o644)
	code, out, errs := runArgs("", "check", "-prices", path)
	if code != 0 {
		t.Fatalf("check = %d; stderr:\n%s", code, errs)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	for _, want := range []string{
		"MODEL INPUT CACHED_INPUT CACHE_WRITE CACHE_WRITE_1H OUTPUT BATCH_DISCOUNT SOURCE",
		// The file's entry replaces the built-in one whole: no discount.
		"claude-sonnet-4 3 0.3 3.75 - 15 - listed",
		// A newer family is never priced by an older one's entry: the
		// built-in claude-sonnet-4-5, with its discount.
		"claude-sonnet-4-5 3 0.3 3.75 6 15 50% listed",
		"gpt-4o-mini 0.15 0.075 - - 0.6 50% listed",
		"llama-3.3-70b 0.59 - - - 0.79 25% listed",
		"my-llm 10 - - - 30 - fallback",
		"prod-llama 0.59 - - - 0.79 25% alias of llama-3.3-70b",
		"(fallback) 10 - - - 30 - prices.fallback",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("check output lacks the row %q:\n%s", want, out)
		}
	}
}
