package gateway_test

import (
	"context"
	"encoding/hex"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// genAIPolicy is the policy of the GenAI tests' gateway.
const genAIPolicy = "{name: tpm, key: [tenant], algorithm: token_bucket, unit: tokens, limit: 100000, per: 1m}"

// TestGenAIMetrics: a chat completion, a streamed one and one for a model
// the prices do not name, each in a sampled trace, through a traced
// gateway. The GenAI metrics, read back through a manual reader, carry
// the convention's names and attributes (the unnamed model as "other",
// the tenant nowhere), the model the upstream answered with, the input
// and output tokens the upstream reported,
// the stream's time to first and per output token, the failed request's
// error.type, and exemplars from the requests' traces.
func TestGenAIMetrics(t *testing.T) {
	up := httptest.NewServer(upstream.New(upstream.Config{}))
	t.Cleanup(up.Close)
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := acmeGateway(t, genAIPolicy, up.URL,
		gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), gateway.WithTracerProvider(tp))

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
	const attrs = "gen_ai.operation.name=chat,gen_ai.provider.name=openai,gen_ai.request.model=gpt-4o,gen_ai.response.model=gpt-4o"
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

// TestGenAIResponseModelAndTokenTypes: an upstream answers with a dated
// model of its own and a usage that details cached input and reasoning
// output tokens, plainly and as a stream, then with a model name no
// model has. Each request's server span carries the answered model as
// the upstream wrote it (gen_ai.response.model) and its tokens by type
// (gen_ai.usage.*); the metrics carry the answered model's family only.
// The hostile name reaches neither.
func TestGenAIResponseModelAndTokenTypes(t *testing.T) {
	const usage = `"usage":{"prompt_tokens":8,"completion_tokens":5,"total_tokens":13,` +
		`"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":3}}`
	answers := []string{
		`{"id":"c1","object":"chat.completion","model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` + usage + `}`,
		"data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hi\"}}]}\n\n" +
			"data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[]," + usage + "}\n\n" +
			"data: [DONE]\n\n",
		`{"id":"c3","object":"chat.completion","model":"gpt-4o <script>","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` + usage + `}`,
	}
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		a := answers[min(int(n.Add(1))-1, len(answers)-1)]
		if strings.HasPrefix(a, "data:") {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		_, _ = io.WriteString(w, a)
	}))
	t.Cleanup(up.Close)
	reader := sdkmetric.NewManualReader()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := acmeGateway(t, genAIPolicy, up.URL,
		gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), gateway.WithTracerProvider(tp))
	for i, stream := range []bool{false, true, false} {
		if status, body := post(t, srv.URL, stream); status != 200 {
			t.Fatalf("request %d: %d %s", i, status, body)
		}
	}
	srv.Close() // every handler, and its span, has ended

	var spans []map[string]string
	for _, s := range rec.Ended() {
		if s.SpanKind() != trace.SpanKindServer {
			continue
		}
		m := map[string]string{}
		for _, kv := range s.Attributes() {
			if strings.HasPrefix(string(kv.Key), "gen_ai.") {
				m[string(kv.Key)] = kv.Value.Emit()
			}
		}
		spans = append(spans, m)
	}
	tokens := map[string]string{
		"gen_ai.usage.input_tokens": "8", "gen_ai.usage.output_tokens": "5",
		"gen_ai.usage.cache_read.input_tokens": "4", "gen_ai.usage.reasoning.output_tokens": "3",
	}
	for i, model := range []string{"gpt-4o-2024-08-06", "gpt-4o-mini-2024-07-18", ""} {
		want := maps.Clone(tokens)
		if model != "" {
			want["gen_ai.response.model"] = model
		}
		if i >= len(spans) || !maps.Equal(spans[i], want) {
			t.Errorf("server span %d has %v; want %v", i, spans[i:min(i+1, len(spans))], want)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{} // the request durations by answered model
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "gen_ai.server.request.duration" {
				for _, dp := range d.DataPoints {
					v, _ := dp.Attributes.Value("gen_ai.response.model")
					got[v.Emit()] += dp.Count
				}
			}
		}
	}
	if want := map[string]uint64{"gpt-4o": 2, "": 1}; !maps.Equal(got, want) {
		t.Errorf("gen_ai.server.request.duration by gen_ai.response.model = %v; want %v", got, want)
	}
}
