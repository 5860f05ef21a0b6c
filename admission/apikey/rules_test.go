package apikey_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/apikey"
)

// TestRulesIdentify runs the shared identity rules over a plain header
// getter, as both transports do.
func TestRulesIdentify(t *testing.T) {
	acme := apikey.Identity{Tenant: "acme", KeyID: "key_1"}
	long := strings.Repeat("k", apikey.MaxKeyLen+1)
	keys := apikey.Table{apikey.Sum("sk-good"): acme, apikey.Sum(long): acme}
	for _, tt := range []struct {
		name    string
		rules   apikey.Rules
		headers map[string]string
		want    apikey.Identity
		err     error
	}{
		{"bearer", apikey.Rules{Keys: keys}, map[string]string{"Authorization": "Bearer sk-good"}, acme, nil},
		{"bearer any case", apikey.Rules{Keys: keys}, map[string]string{"Authorization": "bearer  sk-good "}, acme, nil},
		{"key header", apikey.Rules{Keys: keys}, map[string]string{"X-Api-Key": "sk-good"}, acme, nil},
		{"basic is no key", apikey.Rules{Keys: keys}, map[string]string{"Authorization": "Basic sk-good"}, apikey.Identity{Tenant: "anonymous"}, nil},
		{"unknown", apikey.Rules{Keys: keys}, map[string]string{"X-Api-Key": "sk-bad"}, apikey.Identity{}, apikey.ErrUnknownKey},
		{"no table", apikey.Rules{}, map[string]string{"X-Api-Key": "sk-good"}, apikey.Identity{}, apikey.ErrUnknownKey},
		{"over MaxKeyLen", apikey.Rules{Keys: keys}, map[string]string{"X-Api-Key": long}, apikey.Identity{}, apikey.ErrUnknownKey},
		{"configured header", apikey.Rules{Keys: keys, KeyHeaders: []string{"x-key"}}, map[string]string{"x-key": "sk-good", "X-Api-Key": "sk-bad"}, acme, nil},
		{"anonymous", apikey.Rules{Keys: keys, AnonymousTenant: "guest"}, nil, apikey.Identity{Tenant: "guest"}, nil},
		{"required", apikey.Rules{Keys: keys, RequireKey: true}, nil, apikey.Identity{}, apikey.ErrNoCredentials},
		{"tenant claim matches", apikey.Rules{Keys: keys, TenantHeader: "t"}, map[string]string{"X-Api-Key": "sk-good", "t": "acme"}, acme, nil},
		{"tenant claim differs", apikey.Rules{Keys: keys, TenantHeader: "t"}, map[string]string{"X-Api-Key": "sk-good", "t": "globex"}, apikey.Identity{}, apikey.ErrTenantMismatch},
		{"anonymous claims a tenant", apikey.Rules{Keys: keys, TenantHeader: "t"}, map[string]string{"t": "acme"}, apikey.Identity{}, apikey.ErrTenantMismatch},
		{"tenant claim absent", apikey.Rules{Keys: keys, TenantHeader: "t"}, map[string]string{"X-Api-Key": "sk-good"}, acme, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.rules.Identify(func(name string) string { return tt.headers[name] })
			if got != tt.want || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Errorf("Identify(%v) = %+v, %v; want %+v, %v", tt.headers, got, err, tt.want, tt.err)
			}
		})
	}
}
