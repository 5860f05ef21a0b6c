package httpadmitfile_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
)

// From a policy file on disk to a running middleware in one call: the
// file's limit of 2 an hour per tenant, its key table, and its metrics
// scraped ahead of the limits.
func ExampleFromFile() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "policies.yaml")
	err = os.WriteFile(path, fmt.Appendf(nil, `version: 1
policies:
  - {name: hourly, key: [tenant], algorithm: token_bucket, limit: 2, per: 1h}
tenants:
  acme: {api_keys: [%s]}
identity: {anonymous: deny}
`, apikey.Sum("sk-acme")), 0o600)
	if err != nil {
		panic(err)
	}

	s, err := httpadmitfile.FromFile(context.Background(), path, httpadmitfile.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err) // a mistake in the file names its line: policies.yaml:3:...
	}
	defer s.Close()
	h := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := httpadmit.IdentityFrom(r.Context())
		fmt.Fprintln(w, "hello", id.Tenant)
	}))

	for _, p := range []string{"/v1/items", "/v1/items", "/v1/items", "/metrics"} {
		r := httptest.NewRequest("GET", p, nil)
		r.Header.Set("Authorization", "Bearer sk-acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(p, w.Code, w.Header().Get("Ratelimit-Policy"))
	}
	// Output:
	// /v1/items 200 "hourly";q=2;w=3600
	// /v1/items 200 "hourly";q=2;w=3600
	// /v1/items 429 "hourly";q=2;w=3600
	// /metrics 200
}
