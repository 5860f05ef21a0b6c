package httpadmit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

// A per-tenant bucket of 2 requests per minute in front of a handler; the
// caller is identified by an API key whose hash is in the table.
func Example() {
	clock := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-tenant", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.TokenBucket, Limit: 2, Per: time.Minute,
	}}}, admission.WithClock(clock))
	mw, _ := httpadmit.New(ctl, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
		Keys: httpadmit.KeyTable{apikey.Sum("sk-demo"): {Tenant: "demo"}},
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

// A service with its own sessions identifies callers itself: the
// identity comes from the server-side session, never from a header the
// client fills in. An unknown session is a 401.
func ExampleWithIdentity() {
	sessions := map[string]httpadmit.Identity{"s-1": {Tenant: "acme", User: "alice"}}
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-user", Key: []limits.KeyPart{limits.KeyTenant, limits.KeyUser},
		Algorithm: limits.FixedWindow, Limit: 1, Per: time.Hour,
	}}})
	mw, _ := httpadmit.New(ctl, httpadmit.WithIdentity(func(r *http.Request) (httpadmit.Identity, error) {
		c, err := r.Cookie("session")
		if err != nil {
			return httpadmit.Identity{}, httpadmit.ErrNoCredentials
		}
		id, ok := sessions[c.Value]
		if !ok {
			return httpadmit.Identity{}, errors.New("unknown session")
		}
		return id, nil
	}))
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, session := range []string{"s-1", "s-1", "s-forged"} {
		req := httptest.NewRequest("GET", "/v1/claims", nil)
		req.AddCookie(&http.Cookie{Name: "session", Value: session})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(session, rec.Code)
	}
	// Output:
	// s-1 200
	// s-1 429
	// s-forged 401
}

// A rejection handler writes the service's own JSON body; the headers
// and the status are the middleware's (SetRejectionHeaders): Retry-After,
// Retry-After-Ms, the limit fields, and the quota status the service
// configured.
func ExampleWithRejectionHandler() {
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "daily", Algorithm: limits.Quota, Limit: 1, Period: limits.PeriodDay,
	}}}, admission.WithClock(admissiontest.NewClock(time.Date(2026, 1, 1, 18, 0, 0, 0, time.UTC))))
	mw, _ := httpadmit.New(ctl, httpadmit.WithQuotaStatus(http.StatusTooManyRequests), httpadmit.WithRetryAfterMs(true),
		httpadmit.WithRejectionHandler(func(w http.ResponseWriter, r *http.Request, rej *admission.Rejection) {
			status := httpadmit.SetRejectionHeaders(w, r, rej)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "limit_reached", "policy": rej.Policy, "reason": rej.Reason.String()})
		}))
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/claims", nil))
		fmt.Println(rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("Retry-After-Ms"), rec.Header().Get("RateLimit"))
		fmt.Print(rec.Body.String())
	}
	// Output:
	// 200   "daily";r=0;t=21600
	// 429 21600 21600000 "daily";r=0;t=21600
	// {"error":"limit_reached","policy":"daily","reason":"quota"}
}

// With WithRetryAfterMs a wait of 0.2 s reads Retry-After: 1 (whole
// seconds, rounded up) and Retry-After-Ms: 200.
func ExampleWithRetryAfterMs() {
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "rps", Algorithm: limits.TokenBucket, Limit: 5, Per: time.Second, Burst: 1,
	}}}, admission.WithClock(admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	mw, _ := httpadmit.New(ctl, httpadmit.WithRetryAfterMs(true))
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/claims", nil))
		fmt.Println(strings.TrimSpace(fmt.Sprint(rec.Code, " ", rec.Header().Get("Retry-After"), " ", rec.Header().Get("Retry-After-Ms"))))
	}
	// Output:
	// 200
	// 429 1 200
}

// A request that waited 1.02 s in a queue tells its client so.
func ExampleSetQueueTiming() {
	h := http.Header{}
	limitheaders.SetQueueTiming(h, 1020*time.Millisecond)
	fmt.Println(h.Get("Server-Timing"))
	// Output:
	// queue;dur=1020
}
