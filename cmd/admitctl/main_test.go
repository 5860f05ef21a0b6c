package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runArgs(stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

func TestCheckExample(t *testing.T) {
	code, out, errs := runArgs("", "check", "../../examples/policies/example.yaml")
	if code != 0 {
		t.Fatalf("check example.yaml = %d; stderr:\n%s", code, errs)
	}
	for _, want := range []string{
		"OK: 6 policies, 2 plans, 2 tenants, 3 API keys",
		"PLAN", "premium", "tenant:globex",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	// One row per plan and policy: the premium bucket is 600 with burst 100.
	var premium string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "premium ") && strings.Contains(l, "tenant-rpm") {
			premium = strings.Join(strings.Fields(l), " ")
		}
	}
	if want := "premium tenant-rpm enforce token_bucket requests tenant 600 100 1m -"; premium != want {
		t.Errorf("premium tenant-rpm row = %q; want %q", premium, want)
	}
}

func TestCheckBroken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("policies:\n  - name: a\n    algorithm: token_bucket\n    limit: 0\n    per: 1m\n    colour: blue\n"), 0o644)
	code, out, errs := runArgs("", "check", path)
	if code != 1 || out != "" {
		t.Fatalf("check bad.yaml = %d, stdout %q; want 1 and nothing", code, out)
	}
	for _, want := range []string{path + ":4:12: policies[0].limit: must be > 0, got 0", path + `:6:5: policies[0].colour: unknown key "colour"`, "2 problem(s)"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if code, _, _ := runArgs("", "check", filepath.Join(t.TempDir(), "missing.yaml")); code != 1 {
		t.Errorf("check missing file = %d; want 1", code)
	}
	if code, _, _ := runArgs("", "check"); code != 2 {
		t.Errorf("check without a file = %d; want 2", code)
	}
}

func TestCheckNamedStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redis.yaml")
	os.WriteFile(path, []byte("policies:\n  - {name: a, algorithm: token_bucket, limit: 5, per: 1s, store: redis, on_store_error: local, replicas: 3}\n"), 0o644)
	code, out, errs := runArgs("", "check", path)
	if code != 0 || !strings.Contains(out, "stores the program must register: redis") {
		t.Errorf("check with a named store = %d, %q, %q; want 0 and the store listed", code, out, errs)
	}
}

func TestHashKey(t *testing.T) {
	const want = "sha256:e441e10e484da43fa24e869bb226e626905ba748647185f3d0cccd011c2e0b1c\n"
	if code, out, _ := runArgs("", "hash-key", "sk-example-acme-1"); code != 0 || out != want {
		t.Errorf("hash-key KEY = %d, %q; want 0, %q", code, out, want)
	}
	if code, out, errs := runArgs("sk-example-acme-1\n", "hash-key"); code != 0 || out != want || !strings.Contains(errs, "key_e441e10e484d") {
		t.Errorf("hash-key < KEY = %d, %q, %q; want 0, %q and the key id", code, out, errs, want)
	}
	if code, _, _ := runArgs("", "hash-key"); code != 2 {
		t.Errorf("hash-key with no input = %d; want 2", code)
	}
	// A key that looks like a flag goes after --.
	dash := "sha256:2491456786e2f980156bb6d6932d5f25deea5b8b234c1a89766ff9280ab1f280\n"
	if code, out, _ := runArgs("", "hash-key", "--", "-k"); code != 0 || out != dash {
		t.Errorf("hash-key -- -k = %d, %q; want 0, %q", code, out, dash)
	}
	if code, out, _ := runArgs("", "hash-key", "-k"); code != 2 || out != "" {
		t.Errorf("hash-key -k = %d, %q; want 2 and nothing", code, out)
	}
}

func TestUsage(t *testing.T) {
	if code, _, errs := runArgs("", "frobnicate"); code != 2 || !strings.Contains(errs, "check [-q] FILE") {
		t.Errorf("unknown command = %d, %q", code, errs)
	}
	if code, out, _ := runArgs("", "help"); code != 0 || !strings.Contains(out, "hash-key [KEY]") {
		t.Errorf("help = %d, %q", code, out)
	}
}

// TestCheckUnpriced: check names the models the policies match that have
// no price, and says whether they are refused or charged the fallback.
func TestCheckUnpriced(t *testing.T) {
	const policies = `policies:
  - name: spend
    algorithm: quota
    unit: cost
    period: month
    limit: 100M
    match: {models: [gpt-4o-mini, o1-pro, "ft:gpt-4o-mini-2024-07-18:org:custom:id", my-llm]}
  - name: tpm
    algorithm: token_bucket
    unit: tokens
    limit: 100k
    per: 1m
    match: {models: [my-llm, llama-3.3-70b, openai/gpt-4.1]}
`
	tests := []struct {
		name, prices string
		want         []string
		not          []string
	}{
		{"refuse", "", []string{
			"prices: 2 model(s) the policies name have no price; their requests are refused (prices.unpriced: refuse):",
			"my-llm policies[0].match.models[3]", "llama-3.3-70b policies[1].match.models[1]",
		}, []string{"o1-pro", "ft:gpt-4o-mini", "gpt-4.1"}},
		{"fallback", "prices: {fallback: {input: 10, output: 30}}\n", []string{
			"their requests are charged the fallback price, $10 in and $30 out per million tokens (prices.fallback):", "my-llm", "llama-3.3-70b",
		}, nil},
		{"priced", "prices: {models: {my-llm: {input: 1, output: 2}, llama: {input: 0.5, output: 0.5}}}\n", []string{
			"prices: every model the policies name has a price; requests for other models are refused (prices.unpriced: refuse)",
		}, []string{"my-llm"}},
		{"only the file's", "prices: {builtin: false, models: {my-llm: {input: 1, output: 2}}}\n", []string{
			"prices: 5 model(s)", "gpt-4o-mini", "o1-pro", "ft:gpt-4o-mini-2024-07-18:org:custom:id", "llama-3.3-70b", "openai/gpt-4.1",
		}, []string{" my-llm "}},
	}
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "prices.yaml")
		os.WriteFile(path, []byte(policies+tt.prices), 0o644)
		code, out, errs := runArgs("", "check", path)
		if code != 0 {
			t.Fatalf("%s: check = %d; stderr:\n%s", tt.name, code, errs)
		}
		// Compare with the columns' padding folded to one space.
		var lines []string
		for _, l := range strings.Split(out, "\n") {
			lines = append(lines, " "+strings.Join(strings.Fields(l), " ")+" ")
		}
		out = strings.Join(lines, "\n")
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: check output lacks %q:\n%s", tt.name, w, out)
			}
		}
		for _, w := range tt.not {
			if strings.Contains(out, w) {
				t.Errorf("%s: check output names %q:\n%s", tt.name, w, out)
			}
		}
	}
}

// Without a policy that counts cost, prices decide nothing: check says
// nothing about them, even for models without a price.
func TestCheckUnpricedWithoutCostPolicies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	os.WriteFile(path, []byte("policies:\n  - {name: tpm, algorithm: token_bucket, unit: tokens, limit: 100k, per: 1m, match: {models: [my-llm]}}\n"), 0o644)
	code, out, errs := runArgs("", "check", path)
	if code != 0 || strings.Contains(out, "prices:") {
		t.Errorf("check = %d, stdout:\n%s\nstderr:\n%s\nwant 0 and no prices line", code, out, errs)
	}
}
