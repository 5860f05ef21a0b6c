package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfiguredSecretsNotEchoed plants a password in a malformed URL of
// each kind admitctl reads (the policy file's webhook, loadgen's target,
// db's connection string) and finds it in no output, while the URL is
// still shown, redacted.
func TestConfiguredSecretsNotEchoed(t *testing.T) {
	const password = "hunter2pw"
	const bad = "http://alice:" + password + "@127.0.0.1:9x/"
	policy := filepath.Join(t.TempDir(), "p.yaml")
	doc := "policies:\n  - {name: spend, key: tenant, unit: cost, algorithm: quota, period: month, limit: 500M, warn: [80%]}\n" +
		"budgets:\n  webhook: {url: \"" + bad + "\", secret_env: SLUICE_WEBHOOK_SECRET}\n"
	if err := os.WriteFile(policy, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("acme sk-acme\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dsn := "postgres://alice:" + password + "@127.0.0.1:9x/sluice"
	for _, tt := range []struct {
		args []string
		want string // the URL as shown
	}{
		{[]string{"check", policy}, "http://alice:xxxxx@127.0.0.1:9x/"},
		{[]string{"db", "-dsn", "postgres://127.0.0.1:1/x", "-f", policy, "tenant", "list"}, "http://alice:xxxxx@127.0.0.1:9x/"},
		{[]string{"db", "-dsn", dsn, "tenant", "list"}, "postgres://alice:xxxxx@127.0.0.1:9x/sluice"},
		{[]string{"loadgen", "--target", bad, "--keys", keys, "--count", "1"}, "http://alice:xxxxx@127.0.0.1:9x/"},
	} {
		code, out, errs := runArgs("", tt.args...)
		if code == 0 || strings.Contains(out+errs, password) || !strings.Contains(errs, tt.want) {
			t.Errorf("admitctl %s = %d\nstdout: %s\nstderr: %s\nwant it refused, showing %s and never the password",
				strings.Join(tt.args, " "), code, out, errs, tt.want)
		}
	}
}
