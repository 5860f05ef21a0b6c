package main

import (
	"compress/gzip"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP metrics receiver on loopback: it decodes
// every export request and keeps the last value of each admission decision
// counter, by its attributes.
type otlpReceiver struct {
	*httptest.Server
	mu        sync.Mutex
	requests  int
	decisions map[string]int64 // "policy=… mode=… decision=… reason=…" → cumulative count
	bad       []string         // what the receiver could not decode
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{decisions: map[string]int64{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *otlpReceiver) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(why string) {
		rc.mu.Lock()
		rc.bad = append(rc.bad, why)
		rc.mu.Unlock()
		http.Error(w, why, http.StatusBadRequest)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/metrics" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		fail(r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type"))
		return
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, 8<<20)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			fail(err.Error())
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		fail(err.Error())
		return
	}
	var req colmetricpb.ExportMetricsServiceRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		fail(err.Error())
		return
	}
	rc.mu.Lock()
	rc.requests++
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				if m.GetName() != "admission.decisions" {
					continue
				}
				if !m.GetSum().GetIsMonotonic() {
					rc.bad = append(rc.bad, "admission.decisions is not a monotonic sum")
				}
				for _, dp := range m.GetSum().GetDataPoints() {
					rc.decisions[attrKey(dp.GetAttributes())] = dp.GetAsInt()
				}
			}
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// attrKey writes the attributes that identify a decision series.
func attrKey(kvs []*commonpb.KeyValue) string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return "policy=" + m["policy"] + " mode=" + m["mode"] + " decision=" + m["decision"] + " reason=" + m["reason"]
}

// waitFor waits, with no deadline (the exporter pushes at its own pace),
// until the receiver's counters hold want; it fails at once when an
// export was undecodable or a counter has gone past its figure (they only
// grow), and, when done is set (the push is known to be over), if they
// do not hold want at the first look.
func (rc *otlpReceiver) waitFor(t *testing.T, done bool, want map[string]int64) {
	t.Helper()
	eventually(t, 5*time.Second, "the exported decisions", func() bool {
		rc.mu.Lock()
		ok, over := len(rc.bad) == 0, false
		for k, v := range want {
			ok = ok && rc.decisions[k] == v
			over = over || rc.decisions[k] > v
		}
		got, bad, n := maps.Clone(rc.decisions), rc.bad, rc.requests
		rc.mu.Unlock()
		if !ok && (done || over || len(bad) > 0) {
			t.Fatalf("after %d export requests the receiver has decisions %v (undecodable: %q); want %v", n, got, bad, want)
		}
		return ok
	})
}

// otlpTraffic sends three requests from tenant a through a policy of two
// per minute and returns the counters the receiver must end up with.
func otlpTraffic(t *testing.T, s *server) map[string]int64 {
	t.Helper()
	for i, want := range []int{200, 200, 429} {
		if resp, b := post(t, s, "/v1/chat/completions", testKey("a"), smallChat); resp.StatusCode != want {
			t.Fatalf("request %d: status %d; want %d: %s", i+1, resp.StatusCode, want, b)
		}
	}
	return map[string]int64{
		"policy=rpm mode=enforce decision=admitted reason=none": 2,
		"policy=rpm mode=enforce decision=rejected reason=rate": 1,
	}
}

const otlpPolicy = `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 2, per: 1m}
`

// The gateway pushes its decision counters, with their attributes, to the
// receiver --otlp-endpoint names, every --otlp-interval.
func TestOTLPPushPeriodic(t *testing.T) {
	rc := newOTLPReceiver(t)
	s := startProxy(t, withPolicy(t, otlpPolicy, []string{"a"}, ""), func(o *options) {
		o.otlp = otlpSettings{endpoint: rc.URL, interval: 50 * time.Millisecond}
	})
	if !strings.Contains(s.metrics.otlp, rc.URL+"/v1/metrics") {
		t.Errorf("push destination = %q; want %s/v1/metrics", s.metrics.otlp, rc.URL)
	}
	rc.waitFor(t, false, otlpTraffic(t, s))
	// The scrape goes on beside the push, with the same figures.
	resp, err := http.Get(s.OpsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := `admission_decisions_total{decision="rejected",mode="enforce",policy="rpm",reason="rate"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, body)
	}
}

// With an interval far beyond the test, the figures arrive only because
// shutdown pushes them: what the gateway counted before it stopped is not
// lost.
func TestOTLPFlushOnShutdown(t *testing.T) {
	rc := newOTLPReceiver(t)
	s := startProxy(t, withPolicy(t, otlpPolicy, []string{"a"}, ""), func(o *options) {
		o.otlp = otlpSettings{endpoint: rc.URL, interval: time.Hour}
	})
	want := otlpTraffic(t, s)
	rc.mu.Lock()
	early := rc.requests
	rc.mu.Unlock()
	if early != 0 {
		t.Fatalf("%d export requests before shutdown with a 1h interval", early)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	rc.waitFor(t, true, want) // shutdown returned: the push is done
}

// The standard variables name the receiver when the flag does not, and
// the flag wins over them.
func TestOTLPEndpointPrecedence(t *testing.T) {
	flagRC, metricsEnvRC, baseEnvRC := newOTLPReceiver(t), newOTLPReceiver(t), newOTLPReceiver(t)
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "50") // milliseconds; read by the periodic reader
	t.Setenv(otlpEndpointEnv, baseEnvRC.URL)      // the exporter appends /v1/metrics
	tests := []struct {
		name       string
		flag       string
		metricsEnv string
		want, idle []*otlpReceiver
	}{
		{"base variable", "", "", []*otlpReceiver{baseEnvRC}, []*otlpReceiver{flagRC, metricsEnvRC}},
		{"metrics variable over base", "", metricsEnvRC.URL + "/v1/metrics", []*otlpReceiver{metricsEnvRC}, []*otlpReceiver{flagRC, baseEnvRC}},
		{"flag over both", flagRC.URL, metricsEnvRC.URL + "/v1/metrics", []*otlpReceiver{flagRC}, []*otlpReceiver{metricsEnvRC, baseEnvRC}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(otlpMetricsEndpointEnv, tt.metricsEnv) // empty counts as unset, for the exporter too
			for _, rc := range append(tt.want, tt.idle...) {
				rc.mu.Lock()
				rc.requests, rc.decisions = 0, map[string]int64{}
				rc.mu.Unlock()
			}
			s := startProxy(t, withPolicy(t, otlpPolicy, []string{"a"}, ""), func(o *options) { o.otlp.endpoint = tt.flag })
			want := otlpTraffic(t, s)
			for _, rc := range tt.want {
				rc.waitFor(t, false, want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			for _, rc := range tt.idle {
				rc.mu.Lock()
				n := rc.requests
				rc.mu.Unlock()
				if n != 0 {
					t.Errorf("a receiver not chosen got %d export requests", n)
				}
			}
		})
	}
}

// Without the flag or the variables nothing is pushed; a flag that is not
// an http(s) URL, or a negative interval, stops the start.
func TestOTLPSettings(t *testing.T) {
	t.Setenv(otlpEndpointEnv, "")
	t.Setenv(otlpMetricsEndpointEnv, "")
	s := startProxy(t)
	if s.metrics.otlp != "" {
		t.Errorf("push destination without flag or variables = %q; want none", s.metrics.otlp)
	}
	for _, tt := range []struct {
		set  otlpSettings
		want string
	}{
		{otlpSettings{endpoint: "127.0.0.1:4318"}, "--otlp-endpoint"},
		{otlpSettings{endpoint: "grpc://127.0.0.1:4317"}, "--otlp-endpoint"},
		{otlpSettings{endpoint: "http://"}, "--otlp-endpoint"},
		{otlpSettings{endpoint: "http://127.0.0.1:4318", interval: -time.Second}, "--otlp-interval"},
	} {
		_, err := start(options{addr: "127.0.0.1:0", metricsAddr: "127.0.0.1:0", cut: "all", otlp: tt.set})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("start with %+v: %v; want an error naming %s", tt.set, err, tt.want)
		}
	}
	for in, want := range map[string]string{
		"http://127.0.0.1:4318":              "http://127.0.0.1:4318/v1/metrics",
		"http://127.0.0.1:4318/":             "http://127.0.0.1:4318/v1/metrics",
		"https://collector:4318/otlp/v1/put": "https://collector:4318/otlp/v1/put",
	} {
		if got, err := otlpEndpointURL(in); err != nil || got != want {
			t.Errorf("otlpEndpointURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
