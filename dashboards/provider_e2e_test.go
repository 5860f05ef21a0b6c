package dashboards_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/weights"
)

// gatewayPolicy guards the simulated provider with an upstream store
// whose concurrency cap adapts, and sorts requests into classes.
var gatewayPolicy = `
stores:
  openai: {kind: upstream, adaptive_concurrency: {min: 2}}
classes: {priorities: {interactive: 10, batch: 1}, default: interactive}
policies:
  - name: provider-rpm
    store: openai
    key: [model]
    algorithm: sliding_window
    limit: 100000
    per: 1m
    queue: {size: 100, timeout: 10s, shares: [{class: interactive, percent: 70}]}
  - {name: provider-cap, store: openai, key: [model], algorithm: concurrency, limit: 16}
tenants:
  acme: {api_keys: [` + apikey.Sum("sk-acme").String() + `]}
identity: {anonymous: deny}
`

// startGateway runs an llmproxy gateway in front of the simulated
// provider (which reports its limits and, on request, refuses with 429),
// sends it a request every 100 ms until the test ends, one in five
// refused by the provider, and returns the address of its metrics for
// Prometheus to scrape: the provider row's series.
func startGateway(t *testing.T) string {
	t.Helper()
	sim := upstream.New(upstream.Config{Limits: upstream.Limits{Requests: 1_000_000, Tokens: 100_000_000, Window: time.Minute}})
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	f, err := config.Parse("gateway.yaml", []byte(gatewayPolicy))
	if err != nil {
		t.Fatal(err)
	}
	prov, err := gateway.NewProviders(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config, prov.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Provider.Shutdown(context.Background()) })
	est, _ := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	gw, err := gateway.New(ctl, est, f, gateway.Config{
		Upstream: up.URL + "/v1", ForwardHeaders: []string{"X-Sim-*"},
	}, gateway.WithProviders(prov), gateway.WithMeterProvider(prom.Provider), gateway.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ms := &http.Server{Handler: prom.Handler, ReadHeaderTimeout: 5 * time.Second}
	go ms.Serve(l)
	t.Cleanup(func() { ms.Close() })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ { // until the test ends
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer sk-acme")
			req.Header.Set("Content-Type", "application/json")
			if i%5 == 4 {
				req.Header.Set("X-Sim-Fault", "429")
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	})
	t.Cleanup(func() { close(stop); wg.Wait() })
	return l.Addr().String()
}
