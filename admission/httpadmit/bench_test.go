package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

var okBody = []byte("ok\n")

func benchHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"text/plain"}
		_, _ = w.Write(okBody)
	})
}

func benchRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/v1/items/42", nil)
	r.Pattern = "GET /v1/items/{id}"
	r.RemoteAddr = "192.0.2.10:51234"
	r.Header.Set("Authorization", "Bearer sk-bench-0123456789abcdef0123456789abcdef")
	return r
}

// BenchmarkMiddleware measures admit and settle of one token-bucket policy
// keyed by tenant through the net/http middleware: API key lookup by hash,
// client address, operation from the route pattern, the decision, the
// limit headers, the handler and the settlement.
func BenchmarkMiddleware(b *testing.B) {
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-tenant", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Second,
	}}})
	if err != nil {
		b.Fatal(err)
	}
	r := benchRequest()
	mw, err := httpadmit.New(ctl, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
		Keys: httpadmit.KeyTable{apikey.Sum("sk-bench-0123456789abcdef0123456789abcdef"): {Tenant: "acme", KeyID: "key_1"}},
	}))
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Handler(benchHandler())
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || w.Header().Get("RateLimit") == "" {
		b.Fatalf("status %d, headers %v", w.Code, w.Header())
	}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		w.Body.Reset()
		h.ServeHTTP(w, r)
	}
	reportCPU(b, cpu)
}

// BenchmarkPeerBareHandler is the peer of BenchmarkMiddleware: the same
// handler, request and recorder without the middleware.
func BenchmarkPeerBareHandler(b *testing.B) {
	r := benchRequest()
	h := benchHandler()
	w := httptest.NewRecorder()
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		w.Body.Reset()
		h.ServeHTTP(w, r)
	}
	reportCPU(b, cpu)
}

// cpuTime returns the CPU time the process has used, GC included.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op: the process CPU time per operation, which a
// busy shared machine inflates far less than the wall-clock ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 && start > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}
