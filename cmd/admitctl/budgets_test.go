package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckBudgets: check lists the quotas that warn and where the
// warnings go, and says so when a webhook has nothing to send.
func TestCheckBudgets(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"warn and webhook", `budgets: {webhook: {url: "https://hooks.example.com/x", secret_env: HOOK_SECRET}}
policies:
  - {name: monthly, key: tenant, algorithm: quota, period: month, limit: 5M, warn: [95%, 50%]}
  - {name: daily, key: tenant, algorithm: quota, period: day, limit: 1M, soft: true}
`, []string{
			"budgets: warnings once per tenant per period: monthly at 50%, 95%; daily (soft: never refuses) at 100%\n",
			"budgets: warnings are POSTed to https://hooks.example.com/x, signed with the secret in $HOOK_SECRET (at least 16 bytes where the program runs)\n",
		}},
		{"a webhook without warnings", `budgets: {webhook: {url: "https://hooks.example.com/x", secret_env: HOOK_SECRET}}
policies: [{name: rpm, algorithm: token_bucket, limit: 60, per: 1m}]
`, []string{"budgets: warnings once per tenant per period: no quota declares warn or soft: nothing will be sent\n"}},
		{"neither", "policies: [{name: rpm, algorithm: token_bucket, limit: 60, per: 1m}]\n", nil},
	} {
		path := filepath.Join(t.TempDir(), "p.yaml")
		if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runArgs("", "check", path)
		if code != 0 {
			t.Fatalf("%s: check = %d: %s", tc.name, code, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: stdout lacks %q:\n%s", tc.name, w, out)
			}
		}
		if tc.want == nil && strings.Contains(out, "budgets:") {
			t.Errorf("%s: stdout has a budgets line:\n%s", tc.name, out)
		}
	}
}
