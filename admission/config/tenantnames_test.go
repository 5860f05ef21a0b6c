package config_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
)

// TestTenantNamesAsTheDirectoryReadsThem refuses, with their paths, the
// tenant names and key users of a file that a tenant directory refuses
// (config.CheckEntries, pgdir's key rows): names that reach logs and
// labels are printable and bounded, and admitctl check does not pass a
// file that admitctl db import then refuses.
func TestTenantNamesAsTheDirectoryReadsThem(t *testing.T) {
	const pol = "policies:\n  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 60, per: 1m}\n"
	const hash = "sha256:0000000000000000000000000000000000000000000000000000000000000001"
	for _, tc := range []struct {
		name, file, path string
	}{
		{"newline in tenant", pol + "tenants:\n  \"acme\\nevil\": {}\n", "tenants.acme\nevil"},
		{"NUL in tenant", pol + "tenants:\n  \"a\\0b\": {}\n", "tenants.a\x00b"},
		{"long tenant", pol + "tenants:\n  " + strings.Repeat("t", 129) + ": {}\n", "tenants." + strings.Repeat("t", 129)},
		{"control in user", pol + "tenants:\n  acme:\n    api_keys:\n      - {hash: " + hash + ", user: \"bob\\x1b[2J\"}\n", "tenants.acme.api_keys[0].user"},
		{"long user", pol + "tenants:\n  acme:\n    api_keys:\n      - {hash: " + hash + ", user: " + strings.Repeat("u", 129) + "}\n", "tenants.acme.api_keys[0].user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("p.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("Parse accepted the file")
			}
			es := err.(config.Errors)
			if len(es) != 1 || es[0].Path != tc.path || es[0].Line == 0 {
				t.Errorf("Parse = %q; want one error at %q with its line", err, tc.path)
			}
		})
	}
	// Names the directory accepts stay accepted.
	ok := pol + "tenants:\n  \"Acme Corp. (EU)\":\n    api_keys:\n      - {hash: " + hash + ", user: \"Bob O'Neil\"}\n"
	if _, err := config.Parse("p.yaml", []byte(ok)); err != nil {
		t.Errorf("Parse(printable names) = %v", err)
	}
}
