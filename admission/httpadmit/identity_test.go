package httpadmit_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/httpadmit"
)

// TestIdentifyIsTheSharedRules: IdentityConfig.Identify applies the
// identity rules of apikey.Rules to request headers, with the same
// answers a gRPC call's metadata gets: configured header names in any
// case, Bearer tokens, and a key over apikey.MaxKeyLen unknown.
func TestIdentifyIsTheSharedRules(t *testing.T) {
	acme := httpadmit.Identity{Tenant: "acme", KeyID: "key_acme"}
	long := strings.Repeat("k", apikey.MaxKeyLen+1)
	keys := apikey.Table{apikey.Sum("sk-acme"): acme, apikey.Sum(long): acme}
	for _, tt := range []struct {
		name    string
		ic      httpadmit.IdentityConfig
		headers map[string]string
		want    httpadmit.Identity
		err     error
	}{
		{"bearer", httpadmit.IdentityConfig{Keys: keys}, map[string]string{"Authorization": "Bearer sk-acme"}, acme, nil},
		{"x-api-key", httpadmit.IdentityConfig{Keys: keys}, map[string]string{"X-API-Key": "sk-acme"}, acme, nil},
		{"configured lower-case header", httpadmit.IdentityConfig{Keys: keys, KeyHeaders: []string{"x-proxy-key"}}, map[string]string{"X-Proxy-Key": "sk-acme"}, acme, nil},
		{"key source first", httpadmit.IdentityConfig{Keys: apikey.Table{}, KeySource: keys}, map[string]string{"X-Api-Key": "sk-acme"}, acme, nil},
		{"unknown", httpadmit.IdentityConfig{Keys: keys}, map[string]string{"X-Api-Key": "sk-other"}, httpadmit.Identity{}, httpadmit.ErrUnknownKey},
		{"over MaxKeyLen", httpadmit.IdentityConfig{Keys: keys}, map[string]string{"Authorization": "Bearer " + long}, httpadmit.Identity{}, httpadmit.ErrUnknownKey},
		{"anonymous", httpadmit.IdentityConfig{Keys: keys}, nil, httpadmit.Identity{Tenant: "anonymous"}, nil},
		{"required", httpadmit.IdentityConfig{Keys: keys, RequireKey: true}, nil, httpadmit.Identity{}, httpadmit.ErrNoCredentials},
	} {
		r := httptest.NewRequest("GET", "/v1/x", nil)
		for k, v := range tt.headers {
			r.Header.Set(k, v)
		}
		got, err := tt.ic.Identify(r)
		if got != tt.want || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
			t.Errorf("%s: Identify = %+v, %v; want %+v, %v", tt.name, got, err, tt.want, tt.err)
		}
	}
}
