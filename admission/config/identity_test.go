package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
)

const onePolicy = "version: 1\npolicies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 10, per: 1m}\n"

func TestEdgeSections(t *testing.T) {
	f, err := config.Parse("default.yaml", []byte(onePolicy))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Identity.FailedAuth, (config.FailedAuth{Enabled: true, Limit: 20, Per: time.Minute, MaxAddresses: 65536}); got != want {
		t.Errorf("default identity.failed_auth = %+v; want %+v", got, want)
	}
	f, err = config.Parse("set.yaml", []byte(onePolicy+"identity:\n  failed_auth: {enabled: false, limit: 5, per: 10m, max_addresses: 1000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Identity.FailedAuth, (config.FailedAuth{Limit: 5, Per: 10 * time.Minute, MaxAddresses: 1000}); got != want {
		t.Errorf("identity.failed_auth = %+v; want %+v", got, want)
	}
	f, err = config.Parse("http.yaml", []byte(onePolicy+"http: {body_timeout: 5s}\n"))
	if err != nil || f.HTTP.BodyTimeout != 5*time.Second {
		t.Errorf("http.body_timeout 5s: %v, %v", f.HTTP.BodyTimeout, err)
	}
	for src, want := range map[string]string{
		"identity:\n  failed_auth: {limit: 0}\n":         "identity.failed_auth.limit",
		"identity:\n  failed_auth: {per: 0s}\n":          "identity.failed_auth.per",
		"identity:\n  failed_auth: {max_addresses: 0}\n": "identity.failed_auth.max_addresses",
		"identity:\n  failed_auth: {limits: 3}\n":        "identity.failed_auth.limits: unknown key",
		"identity:\n  failed_auth: {enabled: maybe}\n":   "identity.failed_auth.enabled",
	} {
		_, err := config.Parse("bad.yaml", []byte(onePolicy+src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want an error at %s", src, err, want)
		}
	}
}
