package httpadmit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/httpadmit"
)

// A per-tenant bucket of 2 requests per minute in front of a handler; the
// caller is identified by an API key whose hash is in the table.
func Example() {
	clock := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-tenant", Key: []admission.KeyPart{admission.KeyTenant},
		Algorithm: admission.TokenBucket, Limit: 2, Per: time.Minute,
	}}}, admission.WithClock(clock))
	mw, _ := httpadmit.New(ctl, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
		Keys: httpadmit.KeyTable{httpadmit.HashKey("sk-demo"): {Tenant: "demo"}},
	}))
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, key := range []string{"sk-demo", "sk-demo", "sk-demo", "sk-wrong"} {
		req := httptest.NewRequest("GET", "/v1/items", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(strings.TrimSpace(fmt.Sprint(rec.Code, " ", rec.Header().Get("RateLimit"), " ", rec.Header().Get("Retry-After"))))
	}
	// Output:
	// 200 "per-tenant";r=1;t=30
	// 200 "per-tenant";r=0;t=60
	// 429 "per-tenant";r=0;t=60 30
	// 401
}
