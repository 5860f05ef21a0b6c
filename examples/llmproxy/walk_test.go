package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/oteltrace"
	"github.com/sluicehq/sluice/internal/promtest"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

// TestWalkFromExemplarToTraceToLog follows one rejected request as an
// on-call engineer would. The official SDK sends a chat completion with a
// sampled traceparent while its tenant's only concurrency permit is held:
// it waits in the queue, times out and gets a 429. Then:
//
//   - a real Prometheus with exemplar storage, scraping the proxy's
//     /metrics, returns from query_exemplars an exemplar of the queue-wait
//     histogram with that request's trace id and its server span's id;
//   - the OTLP/HTTP receiver holds that server span, in that trace, with
//     the policy's decision event (outcome timeout);
//   - the decision log's line of that refusal carries the same trace and
//     span ids.
//
// An admitted request sent before, in a trace of its own, is found the
// same way on the gateway's latency histograms: the GenAI request
// duration and the permit's hold time.
func TestWalkFromExemplarToTraceToLog(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	rc := newTraceReceiver(t)
	var logs syncbuf.Buffer
	// The system clock: the queue's timeout has only to fire, no bound is
	// put on when.
	s := startProxy(t, withPolicy(t, `
  - {name: inflight, key: [tenant], algorithm: concurrency, limit: 1, queue: {size: 1, timeout: 50ms}}
`, []string{"a"}, ""), func(o *options) {
		o.traces = rc.URL
		o.logLevel = "info"
		o.logOutput = &logs
	})
	traceparent := func(id []byte) string {
		return "00-" + hex.EncodeToString(id) + "-" + hex.EncodeToString(bytes.Repeat([]byte{0x22}, 8)) + "-01"
	}
	admittedID, rejectedID := bytes.Repeat([]byte{0x5a, 0x01}, 8), bytes.Repeat([]byte{0x5a, 0x02}, 8)
	ctx := ctxT(t, 30*time.Second)

	c := sdk(s, testKey("a"), option.WithHeader("traceparent", traceparent(admittedID)))
	if _, err := c.Chat.Completions.New(ctx, chatParams("admitted")); err != nil {
		t.Fatal(err)
	}
	holder, err := s.ctl.Admit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	c = sdk(s, testKey("a"), option.WithHeader("traceparent", traceparent(rejectedID)))
	_, err = c.Chat.Completions.New(ctx, chatParams("refused"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("request while the permit is held: %v; want a 429", err)
	}
	holder.Done()
	if err := s.e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.traces.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	// The trace: the server span of each request, the refused one with
	// its decision event.
	serverSpan := func(id []byte, outcome string) *tracepb.Span {
		t.Helper()
		for _, sp := range rc.inTrace(id) {
			if sp.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
				continue
			}
			for _, ev := range sp.GetEvents() {
				if a := attrs(ev.GetAttributes()); ev.GetName() == oteltrace.EventName && a["sluice.policy"] == "inflight" && a["sluice.outcome"] == outcome {
					return sp
				}
			}
		}
		t.Fatalf("no server span of trace %x has the %s decision of inflight", id, outcome)
		return nil
	}
	rejected, admitted := serverSpan(rejectedID, "timeout"), serverSpan(admittedID, "admitted")
	if a := attrs(rejected.GetAttributes()); a["http.response.status_code"] != "int_value:429" {
		t.Errorf("refused request's server span has status %s; want 429", a["http.response.status_code"])
	}
	rejTrace, rejSpan := hex.EncodeToString(rejectedID), hex.EncodeToString(rejected.GetSpanId())

	// The exemplars, on a real Prometheus.
	p := promtest.Start(t, promtest.Config{Targets: []string{strings.TrimPrefix(s.OpsURL, "http://")}, Exemplars: true})
	series := p.AwaitExemplar(t, `admission_queue_wait_seconds_bucket{policy="inflight"}`, rejTrace, rejSpan)
	if series["decision"] != "timeout" {
		t.Errorf("the refused request's exemplar is on %v; want the series of decision timeout", series)
	}
	admTrace, admSpan := hex.EncodeToString(admittedID), hex.EncodeToString(admitted.GetSpanId())
	for _, expr := range []string{
		`gen_ai_server_request_duration_seconds_bucket{gen_ai_operation_name="chat"}`,
		`admission_lease_duration_seconds_bucket{policy="inflight"}`,
	} {
		p.AwaitExemplar(t, expr, admTrace, admSpan)
	}

	// The decision log's line.
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && rec["msg"] == "admission decision" && rec["policy"] == "inflight" && rec["decision"] == "timeout" {
			line = rec
		}
	}
	if line["trace_id"] != rejTrace || line["span_id"] != rejSpan {
		t.Errorf("decision log line %v; want trace_id %s and span_id %s", line, rejTrace, rejSpan)
	}
	t.Logf("walk: exemplar on %v → span %s of trace %s → log line %v", series, rejSpan, rejTrace, line)
}
