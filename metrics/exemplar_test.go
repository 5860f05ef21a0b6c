package metrics_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/promtest"
	"github.com/sluicehq/sluice/metrics"
)

// TestExemplarOfRejectionOnPrometheus: a request sent under a sampled span
// times out in a queue (a 429); a real Prometheus with exemplar storage
// scrapes the OpenMetrics exposition, and query_exemplars returns that
// request's trace id on the queue-wait histogram.
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
	}}}, admission.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", prom.Handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

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
	traceID := span.SpanContext().TraceID().String()

	p := promtest.Start(t, promtest.Config{Targets: []string{l.Addr().String()}, Exemplars: true})
	// Prometheus scrapes on its own schedule: ask until the exemplar is
	// there, with no deadline (a scrape that never comes is ended by the
	// test timeout; the last answer is logged every 10 queries).
	for i := 1; ; i++ {
		last, err := p.QueryExemplars(context.Background(), `admission_queue_wait_seconds_bucket{policy="inflight",decision="timeout"}`)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range last {
			for _, e := range s.Exemplars {
				if e.Labels["trace_id"] == traceID && e.Labels["span_id"] == span.SpanContext().SpanID().String() {
					return
				}
			}
		}
		if i%10 == 0 {
			t.Logf("query_exemplars: still no exemplar with trace_id %s; got %+v", traceID, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
