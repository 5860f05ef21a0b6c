package metrics_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/promtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/metrics"
)

// TestExemplarOfRejectionOnPrometheus: a request sent under a sampled span
// times out in a queue (a 429), and another, under another span, is
// refused at once by a rate limit; a real Prometheus with exemplar
// storage scrapes the OpenMetrics exposition, and query_exemplars returns
// the first request's trace id on the queue-wait histogram and on the
// refusals' retry hints, and the second's on the retry hints: every
// refusal, queued or not, leads to its trace.
func TestExemplarOfRejectionOnPrometheus(t *testing.T) {
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Provider.Shutdown(context.Background()) })
	obs, err := metrics.New(metrics.WithMeterProvider(prom.Provider))
	if err != nil {
		t.Fatal(err)
	}
	// The system clock: the queue's timeout has only to fire, no bound
	// is put on when.
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 1,
		Queue: limits.Queue{Size: 1, Timeout: 20 * time.Millisecond},
	}, {
		Name: "hourly", Key: []limits.KeyPart{limits.KeyTenant}, Match: limits.Match{Operations: []string{"rated"}},
		Algorithm: limits.TokenBucket, Limit: 1, Per: time.Hour,
	}}}, admission.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })

	addr := serveMetrics(t, prom)

	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	holder, err := ctl.Admit(context.Background(), admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Done()
	ctx, span := tp.Tracer("test").Start(context.Background(), "POST /v1/chat/completions")
	_, err = ctl.Admit(ctx, admission.Request{Tenant: "a"})
	span.End()
	if !errors.Is(err, admission.ErrQueueTimeout) {
		t.Fatalf("queued request: err = %v; want a queue timeout", err)
	}

	first, err := ctl.Admit(context.Background(), admission.Request{Tenant: "b", Operation: "rated"})
	if err != nil {
		t.Fatal(err)
	}
	first.Done()
	rctx, rspan := tp.Tracer("test").Start(context.Background(), "POST /v1/chat/completions")
	_, err = ctl.Admit(rctx, admission.Request{Tenant: "b", Operation: "rated"})
	rspan.End()
	var rej *admission.Rejection
	if !errors.As(err, &rej) || rej.Policy != "hourly" || rej.Reason != admission.ReasonRate {
		t.Fatalf("second rated request: err = %v; want a rate refusal by hourly", err)
	}

	p := promtest.Start(t, promtest.Config{Targets: []string{addr}, Exemplars: true})
	sc, rsc := span.SpanContext(), rspan.SpanContext()
	p.AwaitExemplar(t, `admission_queue_wait_seconds_bucket{policy="inflight",decision="timeout"}`, sc.TraceID().String(), sc.SpanID().String())
	p.AwaitExemplar(t, `admission_refusal_retry_after_seconds_bucket{policy="inflight",decision="timeout"}`, sc.TraceID().String(), sc.SpanID().String())
	p.AwaitExemplar(t, `admission_refusal_retry_after_seconds_bucket{policy="hourly",decision="rejected"}`, rsc.TraceID().String(), rsc.SpanID().String())
}

// TestExemplarsOfStoreLeaseAndAccuracyOnPrometheus: a request sent under
// a sampled span is admitted by a concurrency policy and a token policy
// on a real Redis, and settled in its context with fewer tokens than
// estimated. A real Prometheus with exemplar storage finds that
// request's trace and span ids on the store's call latency (the
// admission's script call), on the permit's hold time and on the
// estimate's accuracy.
func TestExemplarsOfStoreLeaseAndAccuracyOnPrometheus(t *testing.T) {
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Provider.Shutdown(context.Background()) })
	obs, err := metrics.New(metrics.WithMeterProvider(prom.Provider))
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(client, redisstore.Config{Timeout: 10 * time.Second}, redisstore.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	tenant := []limits.KeyPart{limits.KeyTenant}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "inflight", Key: tenant, Algorithm: limits.Concurrency, Limit: 4, Store: "redis"},
		{Name: "tpm", Key: tenant, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Minute, Store: "redis"},
	}}, admission.WithObserver(obs), admission.WithStore("redis", st))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	addr := serveMetrics(t, prom)

	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "POST /v1/chat/completions")
	tk, err := ctl.Admit(ctx, admission.Request{Tenant: "a", Tokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	tk.SettleContext(ctx, admission.Usage{Tokens: 80, TokensKnown: true})
	span.End()

	p := promtest.Start(t, promtest.Config{Targets: []string{addr}, Exemplars: true})
	for _, expr := range []string{
		`admission_store_duration_seconds_bucket{store="redis",outcome="ok",op=~"acquire|batch"}`,
		`admission_lease_duration_seconds_bucket{policy="inflight"}`,
		`admission_estimate_accuracy_bucket{policy="tpm"}`,
	} {
		p.AwaitExemplar(t, expr, span.SpanContext().TraceID().String(), span.SpanContext().SpanID().String())
	}
}

// serveMetrics serves prom's exposition at /metrics on a loopback port
// until the test ends, and returns its address.
func serveMetrics(t *testing.T, prom *metrics.Prometheus) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", prom.Handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}
