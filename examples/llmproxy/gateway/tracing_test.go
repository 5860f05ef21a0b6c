package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/weights"
)

// acmeGateway serves a gateway under the one policy given, in front of
// the upstream at upstreamURL, for the tenant acme (key sk-acme; no
// anonymous callers), with opts and a discarding logger. The servers
// stop with the test; closing the returned one first waits for every
// handler.
func acmeGateway(t *testing.T, policy, upstreamURL string, opts ...gateway.Option) *httptest.Server {
	t.Helper()
	return acmeGatewayConfig(t, policy, gateway.Config{Upstream: upstreamURL + "/v1"}, opts...)
}

// acmeGatewayConfig is acmeGateway with the gateway's configuration cfg.
func acmeGatewayConfig(t *testing.T, policy string, cfg gateway.Config, opts ...gateway.Option) *httptest.Server {
	t.Helper()
	f, err := config.Parse("acme.yaml", []byte(`
policies: [`+policy+`]
tenants:
  acme: {api_keys: [`+apikey.Sum("sk-acme").String()+`]}
identity: {anonymous: deny}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	est, _ := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	gw, err := gateway.New(ctl, est, f, cfg,
		append([]gateway.Option{gateway.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	srv := httptest.NewServer(gw.Handler(e))
	t.Cleanup(srv.Close)
	return srv
}

// TestServerSpanNames: a server span is named by the route matched,
// never by the path or method a client sent, and the probes have none.
func TestServerSpanNames(t *testing.T) {
	up := httptest.NewServer(upstream.New(upstream.Config{}))
	t.Cleanup(up.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := acmeGateway(t, "{name: rpm, key: [tenant], algorithm: token_bucket, limit: 1000, per: 1m}", up.URL, gateway.WithTracerProvider(tp))
	for _, rq := range []struct{ method, path string }{
		{"GET", "/v1/models/gpt-4o"},
		{"GET", "/v1/secret-tenant-path/8f3a9c"},
		{"BREW", "/v1/models"},
		{"GET", "/healthz"},
		{"GET", "/readyz"},
	} {
		req, _ := http.NewRequest(rq.method, srv.URL+rq.path, nil)
		req.Header.Set("Authorization", "Bearer sk-acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	srv.Close() // every handler, and its span, has ended
	var names []string
	for _, s := range rec.Ended() {
		if strings.HasPrefix(s.SpanKind().String(), "server") {
			names = append(names, s.Name())
		}
	}
	if want := []string{"GET /v1/models/{id}", "GET", "HTTP"}; !slices.Equal(names, want) {
		t.Errorf("server spans %q; want %q", names, want)
	}
}
