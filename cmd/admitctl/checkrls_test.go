package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckRLS: check-rls reads envoyproxy/ratelimit's files as sluice-rls
// does, lists the policies they become, and names every problem.
func TestCheckRLS(t *testing.T) {
	code, out, errs := runArgs("", "check-rls", "../../admission/envoyrls/testdata/ratelimit")
	if code != 0 {
		t.Fatalf("check-rls on the examples = %d; stderr:\n%s", code, errs)
	}
	if want := "OK: 10 domains (edge_proxy_per_ip, example4, example4_nested, example6, example7, example8, example9, internal, messaging, mongo_cps), 15 limits"; !strings.Contains(out, want) {
		t.Errorf("output does not contain %q:\n%s", want, out)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 9 {
			rows[f[0]] = strings.Join(f[1:], " ")
		}
	}
	for policy, want := range map[string]string{
		"POLICY": "MODE ALGORITHM UNIT LIMIT PER QUEUE STORE ON_STORE_ERROR",
		"messaging/message_type=marketing/to_number": "enforce fixed_window hits 5 24h - memory open",
		"example6/service/user=user-a":               "shadow fixed_window hits 10 1s - memory open",
		"example9/key1=value*":                       "enforce fixed_window hits 20 1m - memory open",
	} {
		if rows[policy] != want {
			t.Errorf("row %s = %q; want %q", policy, rows[policy], want)
		}
	}
	if code, out, _ := runArgs("", "check-rls", "-q", "../../admission/envoyrls/testdata/ratelimit"); code != 0 || out != "" {
		t.Errorf("check-rls -q = %d, %q; want 0 and nothing", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: a\ndescriptors:\n  - {key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}\n  - {key: k}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runArgs("", "check-rls", bad)
	if code != 1 {
		t.Fatalf("check-rls on a bad file = %d; want 1", code)
	}
	for _, want := range []string{
		`descriptors[0].rate_limit.unit: must be second, minute, hour, day or week, got "fortnight"`,
		`descriptors[1]: duplicate descriptor k`,
		"2 problem(s); the configuration was not accepted",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr does not contain %q:\n%s", want, errs)
		}
	}
}
