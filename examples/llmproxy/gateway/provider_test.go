package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/config"
	budget "github.com/sluicehq/sluice/admission/upstream"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/weights"
)

// providerFile guards the simulated provider's requests per model with an
// upstream store whose static budget is far above the provider's: only
// what the gateway learns keeps it inside.
func providerFile(stores string) string {
	return `
stores:
` + stores + `
policies:
  - name: provider-rpm
    store: openai
    key: [model]
    algorithm: sliding_window
    limit: 1000
    per: 1m
    queue: {size: 10, timeout: 10s}
tenants:
  acme: {api_keys: [` + apikey.Sum("sk-acme").String() + `]}
identity: {anonymous: deny}
`
}

// providerGateway is a gateway in front of sim with the policy file src.
type providerGateway struct {
	url    string
	gw     *gateway.Gateway
	ctl    *admission.Controller
	prov   *gateway.Providers
	reader *sdkmetric.ManualReader
}

func newProviderGateway(t *testing.T, sim *upstream.Server, src string, clk admission.Clock) *providerGateway {
	t.Helper()
	return newProviderGatewayOn(t, sim, src, clk, nil)
}

// newProviderGatewayOn is newProviderGateway with the upstream stores'
// static budgets on static (nil: in memory) and the gateway's Config
// changed by mods.
func newProviderGatewayOn(t *testing.T, sim http.Handler, src string, clk admission.Clock, static backend.Store, mods ...func(*gateway.Config)) *providerGateway {
	t.Helper()
	f, err := config.Parse("providers.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	prov, err := gateway.NewProviders(f, static)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config, append(prov.Options(), admission.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	est, _ := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	reader := sdkmetric.NewManualReader()
	cfg := gateway.Config{Upstream: up.URL + "/v1", ForwardHeaders: []string{"X-Sim-*"}}
	for _, m := range mods {
		m(&cfg)
	}
	gw, err := gateway.New(ctl, est, f, cfg, gateway.WithProviders(prov), gateway.WithClock(clk), gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), gateway.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &providerGateway{url: srv.URL, gw: gw, ctl: ctl, prov: prov, reader: reader}
}

// send sends a chat completion as acme, with extra headers, and returns
// the status and body.
func send(url string, stream bool, hdr ...string) (int, string, error) {
	body := `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	if stream {
		body = `{"model":"gpt-4o","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}
	return sendBody(url, body, hdr...)
}

// sendBody sends a chat completion body as acme, with extra headers, and
// returns the status and body of the answer.
func sendBody(url, body string, hdr ...string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-acme")
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// post is send, failing the test when the request fails.
func post(t *testing.T, url string, stream bool, hdr ...string) (int, string) {
	t.Helper()
	status, body, err := send(url, stream, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return status, body
}

// answer is what a request sent in the background got.
type answer struct {
	status int
	body   string
	err    error
}

// queuedThen sends a request in the background, waits until it waits in
// the gateway's queue, checks the provider has not seen it (it has seen
// seen requests), advances the clock by d and returns the answer.
func queuedThen(t *testing.T, pg *providerGateway, sim *upstream.Server, seen int64, clk *admissiontest.Clock, d time.Duration, hdr ...string) (int, string) {
	t.Helper()
	done := make(chan answer, 1)
	go func() {
		status, body, err := send(pg.url, false, hdr...)
		done <- answer{status, body, err}
	}()
	waitFor(t, "the request waiting in the queue", func() bool {
		queued := 0
		for _, p := range pg.ctl.Stats() {
			queued += p.Queued
		}
		return queued == 1
	})
	if n := sim.Requests(); n != seen {
		t.Errorf("the provider saw %d requests while one waited; want %d", n, seen)
	}
	clk.Advance(d)
	a := <-done // the advance dispatched or timed out the one waiter
	if a.err != nil {
		t.Fatal(a.err)
	}
	return a.status, a.body
}

// sumCounter returns the counter's value per value of the attribute key.
func sumCounter(t *testing.T, r *sdkmetric.ManualReader, name, key string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value(attribute.Key(key))
					out[v.AsString()] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value(attribute.Key(key))
					out[v.AsString()] += p.Value
				}
			}
		}
	}
	return out
}

// The gateway learns the provider's budget from its headers, on streams
// too, and keeps inside it: with two requests a second allowed, the
// third request waits in the queue until the provider's budget refills
// rather than meet its 429.
func TestProviderBudgetLearned(t *testing.T) {
	for _, stream := range []bool{false, true} {
		clk := admissiontest.NewClock(time.Now())
		sim := upstream.New(upstream.Config{OutputTokens: 3, Limits: upstream.Limits{Requests: 2, Window: time.Second}}, upstream.WithClock(clk))
		pg := newProviderGateway(t, sim, providerFile("  openai: {kind: upstream}"), clk)
		for i := range 2 {
			if status, body := post(t, pg.url, stream); status != 200 {
				t.Fatalf("stream %v, request %d: status %d: %s", stream, i, status, body)
			}
		}
		groups := pg.prov.Store("openai").Groups(clk.Now())
		if len(groups) != 1 || groups[0].Group != "gpt-4o" || groups[0].Figures[budget.Requests].Limit != 2 || groups[0].Figures[budget.Requests].Remaining != 0 {
			t.Errorf("stream %v: learned %+v; want gpt-4o's requests limit 2, none left", stream, groups)
		}
		if g := sumCounter(t, pg.reader, "llmproxy.provider.budget.limit", "dimension"); g["requests"] != 2 {
			t.Errorf("stream %v: budget limit gauge %v; want requests 2", stream, g)
		}
		if status, body := queuedThen(t, pg, sim, 2, clk, time.Second); status != 200 {
			t.Errorf("stream %v: the request that waited: status %d: %s", stream, status, body)
		}
		if sim.Limited() != 0 {
			t.Errorf("stream %v: the provider refused %d requests; want none", stream, sim.Limited())
		}
	}
}

// A provider 429 the gateway could not foresee (another client spent the
// account's budget) is absorbed: the request waits for the provider's
// retry-after and is retried once, and the client gets its answer. When
// the caller's deadline is shorter than the pause, it is refused at once
// with the gateway's own 429; and with the provider refusing every time,
// the second 429 reaches the client.
func TestProviderThrottleAbsorbed(t *testing.T) {
	clk := admissiontest.NewClock(time.Now())
	sim := upstream.New(upstream.Config{OutputTokens: 3, Limits: upstream.Limits{Requests: 1, Window: time.Second}}, upstream.WithClock(clk))
	direct := httptest.NewServer(sim)
	defer direct.Close()
	pg := newProviderGateway(t, sim, providerFile("  openai: {kind: upstream}"), clk)
	spend := func() {
		resp, err := http.Post(direct.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	// The provider refuses, with a retry-after of 1s: the request waits
	// for it in the queue, and is then served.
	spend()
	if status, body := queuedThen(t, pg, sim, 2, clk, time.Second); status != 200 {
		t.Fatalf("absorbed: status %d: %s", status, body)
	}
	if sim.Limited() != 1 {
		t.Fatalf("the provider refused %d requests; want the one absorbed", sim.Limited())
	}

	// A caller who cannot wait that long is refused by the gateway at once.
	clk.Advance(time.Second)
	spend()
	status, body := post(t, pg.url, false, "X-Stainless-Timeout", "0.05")
	if status != 429 || strings.Contains(body, "upstream API is rate limiting") {
		t.Errorf("hopeless: status %d: %s; want the gateway's own 429", status, body)
	}

	// A provider that refuses the retry too: its 429 reaches the client.
	clk.Advance(time.Second)
	seen := sim.Requests() + 1
	status, body = queuedThen(t, pg, sim, seen, clk, time.Second, "X-Sim-Fault", "429")
	if status != 429 || !strings.Contains(body, "upstream API is rate limiting") {
		t.Errorf("refused twice: status %d: %s; want the provider's 429 passed through", status, body)
	}
	got := sumCounter(t, pg.reader, "llmproxy.provider.throttled", "outcome")
	if want := map[string]int64{"absorbed": 2, "refused": 1, "passed_through": 1}; len(got) != len(want) || got["absorbed"] != 2 || got["refused"] != 1 || got["passed_through"] != 1 {
		t.Errorf("llmproxy.provider.throttled = %v; want %v", got, want)
	}
}

// Without an upstream store the provider's 429 passes through at once,
// as before.
func TestProviderThrottleWithoutStore(t *testing.T) {
	sim := upstream.New(upstream.Config{OutputTokens: 3})
	src := strings.Replace(strings.Replace(providerFile(""), "stores:\n", "", 1), "store: openai", "store: memory", 1)
	pg := newProviderGateway(t, sim, src, admissiontest.NewClock(time.Now()))
	status, body := post(t, pg.url, false, "X-Sim-Fault", "429")
	if status != 429 || !strings.Contains(body, "upstream API is rate limiting") || sim.Requests() != 1 {
		t.Errorf("status %d after %d upstream requests: %s; want the provider's 429 after one", status, sim.Requests(), body)
	}
}

// The stores are registered once: a reload that changes the stores
// section is refused, one that keeps it is installed.
func TestProvidersReload(t *testing.T) {
	sim := upstream.New(upstream.Config{})
	pg := newProviderGateway(t, sim, providerFile("  openai: {kind: upstream}"), admissiontest.NewClock(time.Now()))
	for _, tc := range []struct {
		stores string
		ok     bool
	}{
		{"  openai: {kind: upstream}", true},
		{"  openai: {kind: upstream, pause: 5s}", false},
	} {
		f, err := config.Parse("next.yaml", []byte(providerFile(tc.stores)))
		if err != nil {
			t.Fatal(err)
		}
		if err := pg.gw.Apply(f); (err == nil) != tc.ok {
			t.Errorf("Apply(stores %s) = %v; want ok %v", tc.stores, err, tc.ok)
		}
	}
}

// A file declaring upstream stores needs them built: a gateway given none
// refuses it rather than pass the provider's 429s through unnoticed.
func TestProvidersRequired(t *testing.T) {
	f, err := config.Parse("providers.yaml", []byte(providerFile("  openai: {kind: upstream}")))
	if err != nil {
		t.Fatal(err)
	}
	prov, _ := gateway.NewProviders(f, nil)
	ctl, err := admission.New(f.Config, prov.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	est, _ := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	_, err = gateway.New(ctl, est, f, gateway.Config{Upstream: "http://127.0.0.1:1/v1"})
	if err == nil || !strings.Contains(err.Error(), "WithProviders") {
		t.Errorf("New without Providers = %v; want an error naming WithProviders", err)
	}
}

// A provider 429 the gateway absorbs is one call of the client's, not
// two: the retry does not spend a second step of the session's budget,
// nor count the step twice against a loop policy, nor count the request
// twice against the tenant's own request quota.
func TestProviderThrottleAbsorbedChargesOnce(t *testing.T) {
	clk := admissiontest.NewClock(time.Now())
	sim := upstream.New(upstream.Config{OutputTokens: 3, Limits: upstream.Limits{Requests: 1, Window: time.Second}}, upstream.WithClock(clk))
	direct := httptest.NewServer(sim)
	defer direct.Close()
	src := strings.Replace(providerFile("  openai: {kind: upstream}"), "tenants:", `  - {name: session-steps, key: [tenant, session], unit: steps, algorithm: quota, per: 7d, limit: 2,
     budget: true, max_partitions: 1000, overflow: reject}
  - {name: loops, key: [tenant, session, fingerprint], algorithm: sliding_log, limit: 2, per: 1h,
     max_partitions: 1000, overflow: evict}
  - {name: tenant-calls, key: [tenant], algorithm: quota, per: 7d, limit: 2}
tenants:`, 1)
	pg := newProviderGateway(t, sim, src, clk)
	body := `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"build_status","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"running"}]}`

	// The provider's budget is spent by another client: the first call
	// meets its 429, waits for its retry-after and is retried.
	resp, err := http.Post(direct.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	done := make(chan answer, 1)
	go func() {
		status, b, err := sendBody(pg.url, body, "X-Session-Id", "run-1")
		done <- answer{status, b, err}
	}()
	waitFor(t, "the absorbed request waiting in the queue", func() bool {
		queued := 0
		for _, p := range pg.ctl.Stats() {
			queued += p.Queued
		}
		return queued == 1
	})
	clk.Advance(time.Second)
	if a := <-done; a.err != nil || a.status != 200 {
		t.Fatalf("absorbed call: %d %s %v; want 200", a.status, a.body, a.err)
	}
	if sim.Limited() != 1 {
		t.Fatalf("the provider refused %d requests; want the one absorbed", sim.Limited())
	}

	// The session's second call (the same step again) is its second
	// step, its second repetition and the tenant's second call: all
	// within their limits of 2.
	clk.Advance(time.Second)
	status, b, err := sendBody(pg.url, body, "X-Session-Id", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if status != 200 {
		t.Errorf("second call after one absorbed 429: status %d: %s; want 200 (the absorbed call spent one step)", status, b)
	}
}
