package httpadmit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/oteltrace"
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

// benchMiddleware returns next behind a middleware with one token-bucket
// policy keyed by tenant and the API key of benchRequest, opts added,
// after serving r once.
func benchMiddleware(tb testing.TB, next http.Handler, r *http.Request, opts ...httpadmit.Option) (http.Handler, *httptest.ResponseRecorder) {
	tb.Helper()
	return benchTraced(tb, nil, next, r, opts...)
}

// benchTraced is benchMiddleware served under an otelhttp server span
// from tp, the controller's decisions recorded on it by
// oteltrace.Observer; with a nil tp it is benchMiddleware, untraced.
func benchTraced(tb testing.TB, tp trace.TracerProvider, next http.Handler, r *http.Request, opts ...httpadmit.Option) (http.Handler, *httptest.ResponseRecorder) {
	tb.Helper()
	var ctlOpts []admission.Option
	if tp != nil {
		ctlOpts = append(ctlOpts, admission.WithObserver(oteltrace.Observer{}))
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-tenant", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Second,
	}}}, ctlOpts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ctl.Close() })
	mw, err := httpadmit.New(ctl, append([]httpadmit.Option{httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
		Keys: httpadmit.KeyTable{apikey.Sum("sk-bench-0123456789abcdef0123456789abcdef"): {Tenant: "acme", KeyID: "key_1"}},
	})}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	h := mw.Handler(next)
	if tp != nil {
		h = otelhttp.NewHandler(h, "service", otelhttp.WithTracerProvider(tp),
			otelhttp.WithPropagators(propagation.TraceContext{}), otelhttp.WithMeterProvider(noop.NewMeterProvider()))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || w.Header().Get("RateLimit") == "" {
		tb.Fatalf("status %d, headers %v", w.Code, w.Header())
	}
	return h, w
}

// BenchmarkMiddleware measures admit and settle of one token-bucket policy
// keyed by tenant through the net/http middleware: API key lookup by hash,
// client address, operation from the route pattern, the decision, the
// limit headers, the identity in the request's context, the handler and
// the settlement.
func BenchmarkMiddleware(b *testing.B) {
	r := benchRequest()
	h, w := benchMiddleware(b, benchHandler(), r)
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		w.Body.Reset()
		h.ServeHTTP(w, r)
	}
	reportCPU(b, cpu)
}

// BenchmarkMiddlewareTracing is BenchmarkMiddleware as a traced service
// runs it: "no-tracer" is BenchmarkMiddleware itself; the others serve
// it under an otelhttp server span (W3C trace context) with the
// decisions recorded on it by oteltrace.Observer, from a tracer provider
// whose sampler records nothing ("never-sample") or every request
// ("always-sample", its spans batched to an exporter that discards
// them). The difference to no-tracer is the cost per request of tracing.
func BenchmarkMiddlewareTracing(b *testing.B) {
	for _, bc := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: no tracer
	}{
		{"no-tracer", nil},
		{"never-sample", sdktrace.NeverSample()},
		{"always-sample", sdktrace.AlwaysSample()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var tp trace.TracerProvider
			if bc.sampler != nil {
				sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(bc.sampler), sdktrace.WithBatcher(discardSpans{}))
				b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
				tp = sdk
			}
			r := benchRequest()
			h, w := benchTraced(b, tp, benchHandler(), r)
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				w.Body.Reset()
				h.ServeHTTP(w, r)
			}
			reportCPU(b, cpu)
		})
	}
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// middlewareAllocs is the number of allocations of an admitted request
// through the middleware, the handler's aside: one holding the context
// value (the identity, the ticket, the snapshot), the limit headers'
// values and the handler's copy of the request (http.Request.WithContext),
// and the limit headers' text.
const middlewareAllocs = 2

// TestMiddlewareAllocs pins the allocations of one admitted request
// through the middleware to a handler that allocates nothing, with and
// without the ticket in the context: the identity and the ticket reach
// the handler without an allocation of their own.
func TestMiddlewareAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []httpadmit.Option
	}{
		{"identity", nil},
		{"identity and ticket", []httpadmit.Option{httpadmit.WithTicketInContext()}},
	} {
		var id httpadmit.Identity
		var ticket bool
		stub := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, _ = httpadmit.IdentityFrom(r.Context())
			_, ticket = httpadmit.TicketFrom(r.Context())
		})
		r := benchRequest()
		h, w := benchMiddleware(t, stub, r, tc.opts...)
		if want := (httpadmit.Identity{Tenant: "acme", KeyID: "key_1"}); id != want || ticket != (tc.opts != nil) {
			t.Fatalf("%s: handler saw identity %+v and ticket %v; want %+v and %v", tc.name, id, ticket, want, tc.opts != nil)
		}
		if got := testing.AllocsPerRun(100, func() { h.ServeHTTP(w, r) }); got != middlewareAllocs {
			t.Errorf("%s: allocations per admitted request = %v; want %d", tc.name, got, middlewareAllocs)
		}
	}
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
