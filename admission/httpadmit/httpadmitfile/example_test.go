package httpadmitfile_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
)

// A policy file's identity section gives the middleware its key table;
// a reloaded file replaces policies and keys in one step.
func Example() {
	file := func(limit int) *config.File {
		f, err := config.Parse("policies.yaml", fmt.Appendf(nil, `
policies:
  - {name: rpm, key: tenant, algorithm: fixed_window, limit: %d, per: 1h}
tenants:
  acme: {api_keys: [%s]}
identity: {anonymous: deny}
`, limit, apikey.Sum("sk-acme")))
		if err != nil {
			panic(err)
		}
		return f
	}
	f := file(1)
	ctl, _ := admission.New(f.Config)
	mw, _ := httpadmit.New(ctl, httpadmitfile.Options(f)...)
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := httpadmit.IdentityFrom(r.Context())
		fmt.Fprint(w, id.Tenant)
	}))
	get := func(key string) {
		r := httptest.NewRequest("GET", "/v1/items", nil)
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Body.String()[:min(w.Body.Len(), 4)])
	}
	get("")        // no key, and the file requires one
	get("sk-acme") // acme's first request of the hour
	get("sk-acme") // over the limit of 1
	if err := (httpadmitfile.Middleware{Middleware: mw}).Apply(file(10)); err != nil {
		fmt.Println(err)
	}
	get("sk-acme") // the reloaded limit, with the partition kept
	// Output:
	// 401 {"ty
	// 200 acme
	// 429 {"ty
	// 200 acme
}
