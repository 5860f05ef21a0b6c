package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/apikey"
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

// TestKeyIDNamesOneTenant: a key id names the keys of one tenant. Two
// keys of one tenant may share an id (a rotated key and its successor,
// counted as one credential), but the same id under two tenants would
// put one tenant's key in the other's partitions of a policy keyed by
// key_id, and let it choose a class classes.from_header grants the other.
func TestKeyIDNamesOneTenant(t *testing.T) {
	h1, h2, h3 := apikey.Sum("sk-acme-old"), apikey.Sum("sk-acme-new"), apikey.Sum("sk-globex")
	perKey := "version: 1\npolicies:\n  - {name: per-key, key: [key_id], algorithm: token_bucket, limit: 10, per: 1m}\n"
	f, err := config.Parse("rotate.yaml", fmt.Appendf(nil, "%stenants:\n  acme: {api_keys: [{hash: %q, id: main}, {hash: %q, id: main}]}\n  globex: {api_keys: [{hash: %q, id: other}]}\n", perKey, h1, h2, h3))
	if err != nil {
		t.Fatalf("one tenant's two keys under one id: %v", err)
	}
	if a, b := f.Identity.Keys[h1], f.Identity.Keys[h2]; a.KeyID != "main" || b.KeyID != "main" {
		t.Errorf("key ids = %q, %q; want main, main", a.KeyID, b.KeyID)
	}
	_, err = config.Parse("shared.yaml", fmt.Appendf(nil, "%stenants:\n  acme: {api_keys: [{hash: %q, id: main}]}\n  globex: {api_keys: [{hash: %q}, {hash: %q, id: main}]}\n", perKey, h1, h3, h2))
	if err == nil || !strings.Contains(err.Error(), `key id "main"`) || !strings.Contains(err.Error(), "tenants.") {
		t.Errorf("one key id under two tenants: %v; want an error naming the id and where it was first given", err)
	}
}
