package main

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/admission/oteltrace"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

// traceReceiver is an OTLP/HTTP trace receiver on loopback: it decodes
// the collector's protobuf export requests and keeps their spans.
type traceReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	bad   []string
}

func newTraceReceiver(t *testing.T) *traceReceiver {
	t.Helper()
	rc := &traceReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req collectortrace.ExportTraceServiceRequest
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 8<<20))
		if err == nil && (r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf") {
			err = io.ErrUnexpectedEOF
		}
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if err != nil {
			rc.bad = append(rc.bad, r.URL.Path+": "+err.Error())
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				rc.spans = append(rc.spans, ss.GetSpans()...)
			}
		}
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// inTrace returns the received spans of the trace id.
func (rc *traceReceiver) inTrace(id []byte) []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rc.spans {
		if bytes.Equal(s.GetTraceId(), id) {
			out = append(out, s)
		}
	}
	return out
}

// recordingUpstream is the simulated provider behind a loopback server
// that keeps the headers of every request it received.
type recordingUpstream struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
}

func newRecordingUpstream(t *testing.T) *recordingUpstream {
	t.Helper()
	sim := upstream.New(upstream.Config{OutputTokens: 12})
	up := &recordingUpstream{}
	up.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.mu.Lock()
		up.headers = append(up.headers, r.Header.Clone())
		up.mu.Unlock()
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	return up
}

// TestTraceThroughGateway: the official SDK sends a chat completion, a
// streamed one too, with a sampled traceparent, baggage and its tenant
// key; the proxy exports, over OTLP/HTTP with --otlp-traces, a server
// span in that trace (child of the client's span, named by its route)
// with the admission decisions and the settlement as events, and a client
// span for the upstream call, whose traceparent the upstream received.
// The upstream gets the provider's key only: never the tenant's key, nor
// the baggage. A client's 16 KiB User-Agent is cut on the span.
func TestTraceThroughGateway(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	rc := newTraceReceiver(t)
	up := newRecordingUpstream(t)
	const tenantKey, providerKey = "sk-demo-globex", "sk-provider-secret"
	s := startProxy(t, func(o *options) {
		o.traces = rc.URL
		o.gw.Upstream = up.URL + "/v1"
		o.gw.UpstreamKey = providerKey
	})
	if s.tracesTo != rc.URL+"/v1/traces" {
		t.Errorf("traces go to %q; want %q", s.tracesTo, rc.URL+"/v1/traces")
	}
	var banner strings.Builder
	s.banner(&banner)
	if !strings.Contains(banner.String(), "traces exported over OTLP/HTTP to "+rc.URL+"/v1/traces") {
		t.Errorf("the banner does not say where traces go:\n%s", banner.String())
	}

	modes := []bool{false, true}
	ids := func(i int) (traceID, parent []byte) {
		return bytes.Repeat([]byte{0x4b, byte(i + 1)}, 8), bytes.Repeat([]byte{0x51, byte(i + 1)}, 4)
	}
	ctx := ctxT(t, 30*time.Second)
	for i, stream := range modes {
		traceID, parent := ids(i)
		tp := "00-" + hex.EncodeToString(traceID) + "-" + hex.EncodeToString(parent) + "-01"
		c := sdk(s, tenantKey, option.WithHeader("traceparent", tp), option.WithHeader("baggage", "tenant.key="+tenantKey),
			option.WithHeader("User-Agent", strings.Repeat("u", 16<<10)))
		if stream {
			st := c.Chat.Completions.NewStreaming(ctx, chatParams("Hello"))
			for st.Next() {
			}
			if err := st.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
		} else if _, err := c.Chat.Completions.New(ctx, chatParams("Hello")); err != nil {
			t.Fatalf("chat: %v", err)
		}
	}
	// A server span ends when its handler returns, which may be after the
	// client read the last byte: the server is drained first.
	if err := s.e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.traces.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	up.mu.Lock()
	received := up.headers
	up.mu.Unlock()
	if len(received) != len(modes) {
		t.Fatalf("the upstream received %d requests; want %d", len(received), len(modes))
	}
	for i, stream := range modes {
		traceID, parent := ids(i)

		var server, client *tracepb.Span
		for _, sp := range rc.inTrace(traceID) {
			switch sp.GetKind() {
			case tracepb.Span_SPAN_KIND_SERVER:
				server = sp
			case tracepb.Span_SPAN_KIND_CLIENT:
				client = sp
			}
		}
		if server == nil || client == nil {
			t.Fatalf("stream=%v: spans of trace %x: server %v, client %v; want both (bad exports: %q)", stream, traceID, server != nil, client != nil, rc.bad)
		}
		if server.GetName() != "POST /v1/chat/completions" || !bytes.Equal(server.GetParentSpanId(), parent) {
			t.Errorf("stream=%v: server span %q, parent %x; want POST /v1/chat/completions, parent %x", stream, server.GetName(), server.GetParentSpanId(), parent)
		}
		if ua := attrs(server.GetAttributes())["user_agent.original"]; len(ua) != MaxSpanAttributeBytes {
			t.Errorf("stream=%v: the server span keeps %d bytes of a 16 KiB User-Agent; want %d", stream, len(ua), MaxSpanAttributeBytes)
		}
		if !bytes.Equal(client.GetParentSpanId(), server.GetSpanId()) {
			t.Errorf("stream=%v: client span's parent %x; want the server span %x", stream, client.GetParentSpanId(), server.GetSpanId())
		}
		decisions, settled := 0, 0
		for _, ev := range server.GetEvents() {
			a := attrs(ev.GetAttributes())
			switch ev.GetName() {
			case oteltrace.EventName:
				decisions++
				if a["sluice.tenant"] != "globex" || a["sluice.outcome"] == "" || a["sluice.policy"] == "" {
					t.Errorf("stream=%v: decision event %v; want tenant globex, a policy and an outcome", stream, a)
				}
			case gateway.SettledEvent:
				settled++
				if a[string(gateway.KeySettledTokens)] == "" || a["sluice.cost.settled.output_tokens"] != "int_value:12" {
					t.Errorf("stream=%v: settlement event %v; want the tokens settled, 12 output tokens", stream, a)
				}
			}
		}
		if decisions < 2 || settled != 1 {
			t.Errorf("stream=%v: server span has %d decision events and %d settlements; want every policy's and one", stream, decisions, settled)
		}

		h := received[i]
		want := "00-" + hex.EncodeToString(traceID) + "-" + hex.EncodeToString(client.GetSpanId()) + "-01"
		if got := h.Get("Traceparent"); got != want {
			t.Errorf("stream=%v: upstream traceparent %q; want %q (the client span's)", stream, got, want)
		}
		if got := h.Get("Authorization"); got != "Bearer "+providerKey {
			t.Errorf("stream=%v: upstream Authorization %q; want the provider's key", stream, got)
		}
		for k, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, tenantKey) {
					t.Errorf("stream=%v: the upstream received the tenant's key in %s", stream, k)
				}
			}
		}
		if h.Get("Baggage") != "" {
			t.Errorf("stream=%v: the upstream received baggage %q", stream, h.Get("Baggage"))
		}
	}
}

// attrs returns an event's attributes: a string as is, another value in
// its protobuf text form ("int_value:12").
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		if s := kv.GetValue().GetStringValue(); s != "" {
			m[kv.GetKey()] = s
		} else {
			m[kv.GetKey()] = strings.ReplaceAll(kv.GetValue().String(), " ", "")
		}
	}
	return m
}

// TestRejectionLogJoinsTrace: a request refused by its tenant's limit,
// sent with a traceparent, is logged by the decision log with the trace
// id of its server span, which the exported span shares.
func TestRejectionLogJoinsTrace(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	rc := newTraceReceiver(t)
	var logs syncbuf.Buffer
	s := startProxy(t, withPolicy(t, `
  - {name: per-tenant, key: [tenant], algorithm: fixed_window, limit: 1, per: 1h}
`, []string{"a"}, ""), func(o *options) {
		o.traces = rc.URL
		o.logLevel = "info"
		o.logOutput = &logs
	})
	traceID := bytes.Repeat([]byte{0x3c, 0x09}, 8)
	tp := "00-" + hex.EncodeToString(traceID) + "-" + hex.EncodeToString(bytes.Repeat([]byte{0x22}, 8)) + "-01"
	c := sdk(s, testKey("a"), option.WithHeader("traceparent", tp))
	ctx := ctxT(t, 30*time.Second)
	if _, err := c.Chat.Completions.New(ctx, chatParams("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Chat.Completions.New(ctx, chatParams("second")); err == nil {
		t.Fatal("the second request was admitted; want a 429")
	}
	if err := s.e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.traces.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	var rejected *tracepb.Span
	for _, sp := range rc.inTrace(traceID) {
		for _, ev := range sp.GetEvents() {
			if ev.GetName() == oteltrace.EventName && attrs(ev.GetAttributes())["sluice.outcome"] == "rejected" {
				rejected = sp
			}
		}
	}
	if rejected == nil {
		t.Fatalf("no exported span of trace %x has the rejection", traceID)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "per-tenant") && strings.Contains(l, "rejected") {
			line = l
		}
	}
	if !strings.Contains(line, hex.EncodeToString(traceID)) || !strings.Contains(line, hex.EncodeToString(rejected.GetSpanId())) {
		t.Errorf("decision log line %q; want trace_id %x and span_id %x", line, traceID, rejected.GetSpanId())
	}
}
