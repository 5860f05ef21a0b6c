package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// A request's class comes from the policy file, and the client's header
// only for the keys it lists: with one request a minute on a shared
// queue served by priority, a request of the default class (interactive)
// that arrives after a batch one is served first, although it claims to
// be batch: its key may not choose. The listed key's batch request
// waits for the next refill.
func TestClassFromTrustedSources(t *testing.T) {
	src := `
classes:
  priorities: {interactive: 10, batch: 1}
  default: interactive
  from_header: {name: X-Priority, values: {batch: batch}, keys: [ci]}
policies:
  - {name: shared-rpm, algorithm: token_bucket, limit: 1, per: 1m, queue: {size: 10, timeout: 1h}}
tenants:
  acme: {api_keys: [{hash: "` + apikey.Sum("sk-acme").String() + `", id: ci}]}
  other: {api_keys: [` + apikey.Sum("sk-other").String() + `]}
identity: {anonymous: deny}
`
	clk := admissiontest.NewClock(time.Now())
	pg := newProviderGateway(t, upstream.New(upstream.Config{}), src, clk)
	// Whatever happens, the queue times out before the servers close.
	t.Cleanup(func() { clk.Advance(2 * time.Hour) })
	if status, body := post(t, pg.url, false); status != 200 {
		t.Fatalf("first request: %d %s", status, body)
	}
	waitQueued := func(n int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d requests waiting in the queue", n), func() bool {
			st := pg.ctl.Stats()
			return len(st) > 0 && st[0].Queued == n
		})
	}
	background := func(hdr ...string) chan answer {
		done := make(chan answer, 1)
		go func() {
			status, body, err := send(pg.url, false, hdr...)
			done <- answer{status, body, err}
		}()
		return done
	}
	batch := background("X-Priority", "batch")
	waitQueued(1)
	claimed := background("Authorization", "Bearer sk-other", "X-Priority", "batch")
	waitQueued(2)
	// After each refill, the next request served must be want, while
	// other, when not nil, still waits. A refill of one serves exactly one
	// waiter, so one of the two answers; no timeout is needed (a nil
	// other never answers).
	next := func(what string, want, other chan answer) {
		t.Helper()
		clk.Advance(time.Minute)
		select {
		case a := <-want:
			if a.err != nil || a.status != 200 {
				t.Fatalf("the %s request: %d %s %v", what, a.status, a.body, a.err)
			}
		case a := <-other:
			t.Fatalf("the batch request was served before the interactive one (%d): the header of a key that may not choose was believed, or no class was set", a.status)
		}
	}
	next("interactive", claimed, batch)
	waitQueued(1)
	next("batch", batch, nil)
}

// With adaptive_concurrency on an upstream store, every answer's time to
// first byte feeds the cap of its concurrency policy, which the gauges
// report with the time to first byte it follows.
func TestAdaptiveConcurrencyGauges(t *testing.T) {
	src := `
stores:
  openai: {kind: upstream, adaptive_concurrency: {min: 2}}
policies:
  - {name: provider-cap, store: openai, key: [model], algorithm: concurrency, limit: 8, queue: {size: 10, timeout: 10s}}
tenants:
  acme: {api_keys: [` + apikey.Sum("sk-acme").String() + `]}
identity: {anonymous: deny}
`
	clk := admissiontest.NewClock(time.Now())
	pg := newProviderGateway(t, upstream.New(upstream.Config{}), src, clk)
	for range 3 {
		if status, body := post(t, pg.url, false, "X-Sim-Latency", "20ms"); status != 200 {
			t.Fatalf("%d %s", status, body)
		}
	}
	if got := sumCounter(t, pg.reader, "llmproxy.provider.concurrency.limit", "group"); got["gpt-4o"] < 2 || got["gpt-4o"] > 8 {
		t.Errorf("llmproxy.provider.concurrency.limit by group = %v; want gpt-4o in [2, 8]", got)
	}
	ttfb := gaugeFloat(t, pg.reader, "llmproxy.provider.ttfb", "average")
	if ttfb["short"] < 0.02 || ttfb["baseline"] < 0.02 {
		t.Errorf("llmproxy.provider.ttfb by average = %v; want at least the 20ms the provider took", ttfb)
	}
}

// gaugeFloat returns a float gauge's value per value of the attribute
// key.
func gaugeFloat(t *testing.T, r *sdkmetric.ManualReader, name, key string) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[float64]); ok && m.Name == name {
				for _, p := range g.DataPoints {
					v, _ := p.Attributes.Value(attribute.Key(key))
					out[v.AsString()] += p.Value
				}
			}
		}
	}
	return out
}
