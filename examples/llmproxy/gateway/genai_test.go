package gateway_test

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/weights"
)

// TestGenAIMetrics: a chat completion, a streamed one and one for a model
// the prices do not name, each in a sampled trace, through a traced
// gateway. The GenAI metrics, read back through a manual reader, carry
// the convention's names and attributes (the unnamed model as "other",
// the tenant nowhere), the input and output tokens the upstream reported,
// the stream's time to first and per output token, the failed request's
// error.type, and exemplars from the requests' traces.
func TestGenAIMetrics(t *testing.T) {
	f, err := config.Parse("genai.yaml", []byte(`
policies:
  - {name: tpm, key: [tenant], algorithm: token_bucket, unit: tokens, limit: 100000, per: 1m}
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
	up := httptest.NewServer(upstream.New(upstream.Config{}))
	t.Cleanup(up.Close)
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	gw, err := gateway.New(ctl, est, f, gateway.Config{
		Upstream: up.URL + "/v1",
	}, gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), gateway.WithTracerProvider(tp), gateway.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	srv := httptest.NewServer(gw.Handler(e))

	traces := map[string]bool{}
	traceparent := func(i byte) string {
		id := strings.Repeat(hex.EncodeToString([]byte{0x7a, i}), 8)
		traces[id] = true
		return "00-" + id + "-00f067aa0ba902b7-01"
	}
	for i, stream := range []bool{false, true} {
		if status, body := post(t, srv.URL, stream, "Traceparent", traceparent(byte(i))); status != 200 {
			t.Fatalf("stream=%v: %d %s", stream, status, body)
		}
	}
	status, _, err := sendModel(srv.URL, "Acme-Secret-Model-7", "Traceparent", traceparent(9))
	if err != nil || status != 404 {
		t.Fatalf("unknown model: %d, %v; want the upstream's 404", status, err)
	}
	srv.Close() // every handler has returned: everything is recorded

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	type point struct {
		count uint64
		sum   float64
	}
	got := map[string]point{} // "name{attributes}" → count, sum
	exemplars := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if !strings.HasPrefix(m.Name, "gen_ai.") {
				continue
			}
			add := func(attrs attribute.Set, count uint64, sum float64, exTraces [][]byte) {
				var keys []string
				for _, kv := range attrs.ToSlice() {
					keys = append(keys, string(kv.Key)+"="+kv.Value.Emit())
					if strings.Contains(string(kv.Key), "tenant") || kv.Value.Emit() == "acme" {
						t.Errorf("%s has the tenant as an attribute: %s", m.Name, kv.Key)
					}
				}
				got[m.Name+"{"+strings.Join(keys, ",")+"}"] = point{count, sum}
				for _, id := range exTraces {
					exemplars++
					if !traces[hex.EncodeToString(id)] {
						t.Errorf("%s: exemplar of trace %x, not one of the requests'", m.Name, id)
					}
				}
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					var ids [][]byte
					for _, ex := range dp.Exemplars {
						ids = append(ids, ex.TraceID)
					}
					add(dp.Attributes, dp.Count, float64(dp.Sum), ids)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					var ids [][]byte
					for _, ex := range dp.Exemplars {
						ids = append(ids, ex.TraceID)
					}
					add(dp.Attributes, dp.Count, dp.Sum, ids)
				}
			default:
				t.Errorf("%s is a %T; want a histogram", m.Name, m.Data)
			}
		}
	}
	const attrs = "gen_ai.operation.name=chat,gen_ai.provider.name=openai,gen_ai.request.model=gpt-4o"
	for key, want := range map[string]uint64{
		"gen_ai.client.token.usage{" + attrs + ",gen_ai.token.type=input}":                                                                 2,
		"gen_ai.client.token.usage{" + attrs + ",gen_ai.token.type=output}":                                                                2,
		"gen_ai.server.request.duration{" + attrs + "}":                                                                                    2,
		"gen_ai.server.time_to_first_token{" + attrs + "}":                                                                                 1,
		"gen_ai.server.time_per_output_token{" + attrs + "}":                                                                               1,
		"gen_ai.server.request.duration{error.type=404,gen_ai.operation.name=chat,gen_ai.provider.name=openai,gen_ai.request.model=other}": 1,
	} {
		if got[key].count != want {
			t.Errorf("%s count = %d; want %d", key, got[key].count, want)
		}
	}
	if p := got["gen_ai.client.token.usage{"+attrs+",gen_ai.token.type=output}"]; p.sum != 10 {
		t.Errorf("output tokens = %v; want 10 (5 per request)", p.sum)
	}
	if len(got) != 6 {
		t.Errorf("GenAI series = %v; want the 6 above", got)
	}
	if exemplars == 0 {
		t.Error("no GenAI histogram carries an exemplar")
	}
}

// sendModel sends a chat completion for model as acme, with extra
// headers, and returns the status and body.
func sendModel(url, model string, hdr ...string) (int, string, error) {
	return sendBody(url, `{"model":"`+model+`","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, hdr...)
}
