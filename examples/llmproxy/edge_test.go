package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

// recorder is a fake upstream that records every request it receives, as
// it received it, and answers OpenAI-shaped bodies: a models listing, a
// model, a chat completion with usage (any usage: see setUsage), or, for a
// streaming chat request,
// an endless fast stream of chunks until the caller goes away.
type recorder struct {
	URL string // base URL with the /v1 prefix

	mu    sync.Mutex
	seen  []seenRequest
	usage *string // the usage member of chat completions; nil: a small honest one
}

// seenRequest is one request as the upstream received it.
type seenRequest struct {
	Method, RequestURI string
	Header             http.Header
}

func newRecorder(t testing.TB) *recorder {
	t.Helper()
	rec := &recorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	rec.URL = "http://" + ln.Addr().String() + "/v1"
	return rec
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.seen = append(rec.seen, seenRequest{Method: r.Method, RequestURI: r.RequestURI, Header: r.Header.Clone()})
	rec.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o-mini","object":"model"}]}`)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models/big":
		// An answer far larger than the socket buffers.
		_, _ = fmt.Fprintf(w, `{"id":"big","object":"model","padding":%q}`, strings.Repeat("p", 32<<20))
	case r.Method == http.MethodGet:
		_, _ = fmt.Fprintf(w, `{"id":%q,"object":"model"}`, strings.TrimPrefix(r.URL.Path, "/v1/models/"))
	case strings.Contains(string(body), `"stream":true`):
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := []byte(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` +
			strings.Repeat("word ", 200) + `"}}]}` + "\n\n")
		rc := http.NewResponseController(w)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	default:
		usage := `{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}`
		rec.mu.Lock()
		if rec.usage != nil {
			usage = *rec.usage
		}
		rec.mu.Unlock()
		answer := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]`
		if usage != "" {
			answer += `,"usage":` + usage
		}
		_, _ = io.WriteString(w, answer+"}")
	}
}

// setUsage makes chat completions report usage (a JSON value, or "" for no
// usage member at all).
func (rec *recorder) setUsage(usage string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.usage = &usage
}

// requests returns what the upstream received so far.
func (rec *recorder) requests() []seenRequest {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]seenRequest(nil), rec.seen...)
}

// edgePolicy writes a policy file with the given policies, tenants (key
// "sk-test-<tenant>"), lines added to the identity section and top-level
// extra, and points the proxy at it and at the upstream rec.
func edgePolicy(t testing.TB, rec *recorder, policies string, tenants []string, identity, extra string) func(*options) {
	t.Helper()
	var b strings.Builder
	b.WriteString("version: 1\npolicies:\n" + policies + "\ntenants:\n")
	for _, tn := range tenants {
		b.WriteString("  " + tn + ":\n    api_keys: [" + apikey.Sum(testKey(tn)).String() + "]\n")
	}
	b.WriteString("identity:\n  anonymous: deny\n" + identity + extra)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return func(o *options) {
		o.configPath = path
		o.gw.Upstream = rec.URL
		o.gw.UpstreamKey = "sk-upstream-secret"
	}
}

const rpmPolicy = "  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1000, per: 1m}\n"

// rawRequest sends request bytes as they are on a new connection to the
// proxy and reads one response.
func rawRequest(t testing.TB, s *server, request string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%.80q: %v", request, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A model id in the path is forwarded only when it is plainly a model id:
// every encoding of a separator, a dot segment, a backslash, a parameter
// or a look-alike is a 404 from the gateway, and the upstream receives
// nothing. The upstream path is rebuilt from the route, without the
// client's query.
func TestEncodedPathsNeverReachTheUpstream(t *testing.T) {
	rec := newRecorder(t)
	s := startProxy(t, edgePolicy(t, rec, rpmPolicy, []string{"a"}, "", ""))
	get := func(target string) (*http.Response, string) {
		return rawRequest(t, s, "GET "+target+" HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer "+testKey("a")+"\r\nConnection: close\r\n\r\n")
	}
	for _, target := range []string{
		"/v1/models/..%2F..%2Fadmin%2Fusers",
		"/v1/models/..%2f..%2fadmin%2fusers",
		"/v1/models/%2e%2e",
		"/v1/models/%2E%2E%2Fadmin",
		"/v1/models/%2e",
		"/v1/models/..",
		"/v1/models/.",
		"/v1/models/..%252F..%252Fadmin",
		"/v1/models/%252e%252e",
		"/v1/models/%25",
		"/v1/models/%2541",
		"/v1/models/..%5C..%5Cadmin",
		`/v1/models/..\..\admin`,
		`/v1/models/gpt-4o\`,
		"/v1/models/gpt-4o;admin",
		"/v1/models/gpt-4o%3Bx=1",
		"/v1/models/gpt-4o%3F",
		"/v1/models/gpt-4o%23frag",
		"/v1/models/%E2%80%A4%E2%80%A4",
		"/v1/models/%EF%BC%8E%EF%BC%8E",
		"/v1/models/%EF%BC%8Fadmin",
		"/v1/models/%C0%AE%C0%AE",
		"/v1/models/a%00b",
		"/v1/models/a%0d%0aX-Injected:%201",
		"/v1/models/a%20b",
		"/v1/models/" + strings.Repeat("a", 257),
		"/v1/models/../../admin/users",
		"/v1/models/x/y",
		"/v1/models/",
		"/v1/admin/users",
		"/admin/users",
		"/v1/files",
		"/v1//models",
		"//v1/models",
		"/v1/models/../../../v1/models",
		"/v1/chat/completions/../../models",
		"/V1/models",
		"/metrics",
	} {
		before := len(rec.requests())
		resp, body := get(target)
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: status %d; want 404 from the gateway (body %.200s)", target, resp.StatusCode, body)
		}
		if !strings.Contains(body, `"error"`) {
			t.Errorf("GET %s: body %.200s is not an OpenAI-shaped error", target, body)
		}
		if got := rec.requests()[before:]; len(got) != 0 {
			t.Errorf("GET %s reached the upstream as %s", target, got[0].RequestURI)
		}
	}
	for target, want := range map[string]string{
		"/v1/models":                             "/v1/models",
		"/v1/models?after=../../admin":           "/v1/models",
		"/v1/models/gpt-4o-mini":                 "/v1/models/gpt-4o-mini",
		"/v1/models/gpt%2D4o":                    "/v1/models/gpt-4o",
		"/v1/models/ft:gpt-4o-mini:acme::x1":     "/v1/models/ft:gpt-4o-mini:acme::x1",
		"/v1/models/" + strings.Repeat("a", 256): "/v1/models/" + strings.Repeat("a", 256),
	} {
		before := len(rec.requests())
		resp, body := get(target)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: status %d; want 200 (body %.200s)", target, resp.StatusCode, body)
			continue
		}
		got := rec.requests()[before:]
		if len(got) != 1 || got[0].RequestURI != want {
			t.Errorf("GET %s reached the upstream as %+v; want once as %s", target, got, want)
		}
	}
}

// No header that can carry the client's key reaches the upstream: the
// configured key header, the common credential headers, cookies; only
// the upstream key does.
func TestClientCredentialsNeverReachTheUpstream(t *testing.T) {
	rec := newRecorder(t)
	s := startProxy(t, edgePolicy(t, rec, rpmPolicy, []string{"a"}, "  api_key_headers: [X-Proxy-Key]\n", ""))
	key := testKey("a")
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	hdr := []string{
		"X-Proxy-Key", key, "X-Api-Key", key + "-x", "Api-Key", key + "-api", "Proxy-Authorization", "Basic " + key,
		"Cookie", "session=" + key, "X-Auth-Token", key, "Openai-Organization", "org-" + key, "X-Custom-Auth", key,
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/models"} {
		var resp *http.Response
		var b []byte
		if path == "/v1/models" {
			req, _ := http.NewRequest(http.MethodGet, s.URL+path, nil)
			for i := 0; i < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			var err error
			if resp, err = http.DefaultClient.Do(req); err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		} else {
			resp, b = post(t, s, path, "", chat, hdr...)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s with X-Proxy-Key: status %d: %s", path, resp.StatusCode, b)
		}
	}
	seen := rec.requests()
	if len(seen) != 2 {
		t.Fatalf("the upstream received %d requests; want 2", len(seen))
	}
	for _, r := range seen {
		if got := r.Header.Get("Authorization"); got != "Bearer sk-upstream-secret" {
			t.Errorf("%s: upstream Authorization = %q; want the upstream key", r.RequestURI, got)
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, key) {
					t.Errorf("%s: the client's key reached the upstream in %s: %q", r.RequestURI, k, v)
				}
			}
		}
	}
}

// The metrics and the rollout report are served on the operator listener
// only, at the policy file's metrics.path; the API listener has the probes
// and nothing about other tenants. metrics.listen is honoured, and
// metrics.enabled: false serves neither.
func TestOperatorEndpointsOnlyOnTheOperatorListener(t *testing.T) {
	rec := newRecorder(t)
	status := func(url string) int {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	s := startProxy(t, edgePolicy(t, rec, rpmPolicy, []string{"a"}, "", "metrics: {path: /internal/prom}\n"))
	if resp, b := post(t, s, "/v1/chat/completions", testKey("a"), `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	for _, p := range []string{"/metrics", "/internal/prom", "/debug/rollout", "/debug/pprof/", "/debug/vars"} {
		if st := status(s.URL + p); st != http.StatusNotFound {
			t.Errorf("API listener GET %s: status %d; want 404", p, st)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if st := status(s.URL + p); st != http.StatusOK {
			t.Errorf("API listener GET %s: status %d; want 200", p, st)
		}
	}
	if s.OpsURL == "" || s.OpsURL == s.URL {
		t.Fatalf("operator listener %q; want one apart from the API listener %s", s.OpsURL, s.URL)
	}
	if st := status(s.OpsURL + "/internal/prom"); st != http.StatusOK {
		t.Errorf("operator GET /internal/prom: status %d; want 200", st)
	}
	if n := scrape(t, s, "admission_decisions_total", "policy", "rpm"); n < 1 {
		t.Errorf("operator metrics count %v decisions of rpm; want at least 1", n)
	}
	if st := status(s.OpsURL + "/debug/rollout"); st != http.StatusOK {
		t.Errorf("operator GET /debug/rollout: status %d; want 200", st)
	}
	if st := status(s.OpsURL + "/metrics"); st != http.StatusNotFound {
		t.Errorf("operator GET /metrics with metrics.path /internal/prom: status %d; want 404", st)
	}

	// metrics.listen names the operator address when no flag does.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	fromFile := startProxy(t, edgePolicy(t, rec, rpmPolicy, []string{"a"}, "", "metrics: {listen: \""+addr+"\"}\n"),
		func(o *options) { o.metricsAddr = "" })
	if fromFile.OpsURL != "http://"+addr {
		t.Errorf("with metrics.listen %s: operator listener %q", addr, fromFile.OpsURL)
	} else if st := status(fromFile.OpsURL + "/metrics"); st != http.StatusOK {
		t.Errorf("metrics.listen: GET /metrics: status %d; want 200", st)
	}

	// A metrics.path that would be a pattern elsewhere is an exact path.
	odd := startProxy(t, edgePolicy(t, rec, rpmPolicy, []string{"a"}, "", "metrics: {path: \"/debug/rollout {x}\"}\n"))
	if st := status(odd.OpsURL + "/debug/rollout%20%7Bx%7D"); st != http.StatusOK {
		t.Errorf("metrics.path with a space and braces: status %d; want 200", st)
	}

	off := startProxy(t, edgePolicy(t, rec, rpmPolicy, []string{"a"}, "", "metrics: {enabled: false}\n"))
	if off.OpsURL != "" {
		t.Errorf("with metrics.enabled false: operator listener %s", off.OpsURL)
	}
	for _, p := range []string{"/metrics", "/debug/rollout"} {
		if st := status(off.URL + p); st != http.StatusNotFound {
			t.Errorf("metrics disabled: API GET %s: status %d; want 404", p, st)
		}
	}
}

// stalledStream opens a streaming chat request on a raw connection with
// a small receive buffer and never reads the answer.
func stalledStream(t testing.TB, s *server, key string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	t.Cleanup(func() { conn.Close() })
	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
	return conn
}

// Clients that stop reading their streams are cut once a write waits
// longer than the client write timeout, and their concurrency permits are
// released: a cap of 2 admits new requests after 2 stalled streams.
func TestStalledClientsAreCutAndReleaseTheirPermits(t *testing.T) {
	rec := newRecorder(t)
	s := startProxy(t, edgePolicy(t, rec, `
  - {name: conc, key: [tenant], algorithm: concurrency, limit: 2}
`, []string{"a"}, "", ""), func(o *options) { o.gw.ClientWriteTimeout = 200 * time.Millisecond })
	start := time.Now()
	for range 2 {
		stalledStream(t, s, testKey("a"))
	}
	eventually(t, 5*time.Second, "both stalled streams reach the upstream", func() bool { return len(rec.requests()) == 2 })
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	var resp *http.Response
	eventually(t, 5*time.Second, "a new request is admitted", func() bool {
		resp, _ = post(t, s, "/v1/chat/completions", testKey("a"), chat)
		return resp.StatusCode == http.StatusOK
	})
	eventually(t, 5*time.Second, "both stalled streams are cut", func() bool {
		return scrape(t, s, "llmproxy_client_cancels_total", "reason", "during_stream") == 2
	})
	t.Logf("2 stalled streams cut and their permits released %v after they started (client write timeout 200ms)", time.Since(start).Round(time.Millisecond))
	if v := scrape(t, s, "admission_inflight", "policy", "conc"); v != 0 {
		t.Errorf("conc in flight = %v; want 0 once the streams are cut and the last request done", v)
	}
}

// A client that does not read a large plain answer is cut too, and the
// permit it holds released: end to end, over loopback TCP, with no bound
// on how long that takes (the gateway package's test of the same name
// times the cut to the nanosecond, in a testing/synctest bubble).
func TestStalledReaderOfAPlainAnswerIsCut(t *testing.T) {
	rec := newRecorder(t)
	s := startProxy(t, edgePolicy(t, rec, `
  - {name: conc, key: [tenant], algorithm: concurrency, limit: 1}
`, []string{"a"}, "", ""), func(o *options) { o.gw.ClientWriteTimeout = 200 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(conn, "GET /v1/models/big HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer %s\r\n\r\n", testKey("a"))
	eventually(t, 5*time.Second, "the large answer is asked for", func() bool { return len(rec.requests()) == 1 })
	eventually(t, 30*time.Second, "the next request is admitted", func() bool {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/v1/models/gpt-4o", nil)
		req.Header.Set("Authorization", "Bearer "+testKey("a"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if v := scrape(t, s, "admission_inflight", "policy", "conc"); v != 0 {
		t.Errorf("conc in flight = %v; want 0 once the stalled reader is cut", v)
	}
}

// readUntilClosed reads the answer on conn and then waits for the
// connection to end, returning the status line.
func readUntilClosed(t testing.TB, conn net.Conn) string {
	t.Helper()
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the %s answer the connection is not closed: %v", resp.Status, err)
	}
	return resp.Status
}

// A body sent at one byte a second is cut once the body read timeout has
// passed; a request with an unknown key is refused before its body is
// read, and its connection closed rather than drained; so is a body
// declared too large. End to end, over loopback TCP, with no bound on how
// long that takes: the gateway package's test of the same name times the
// cut and the closing on a testing/synctest bubble's clock.
func TestSlowAndUnwantedBodies(t *testing.T) {
	rec := newRecorder(t)
	dial := func(s *server) net.Conn {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	head := func(key string, length int) string {
		return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", key, length)
	}

	t.Run("one byte a second", func(t *testing.T) {
		s := startProxy(t, edgePolicy(t, rec, rpmPolicy, []string{"a"}, "", ""), func(o *options) { o.gw.BodyReadTimeout = 300 * time.Millisecond })
		conn := dial(s)
		io.WriteString(conn, head(testKey("a"), 100)+"{")
		go func() {
			for range 10 {
				time.Sleep(time.Second)
				if _, err := io.WriteString(conn, " "); err != nil {
					return
				}
			}
		}()
		if status := readUntilClosed(t, conn); !strings.HasPrefix(status, "408") {
			t.Errorf("slow body: answer %s; want 408", status)
		}
		if n := len(rec.requests()); n != 0 {
			t.Errorf("the upstream received %d requests; want 0", n)
		}
	})

	// A long body read timeout: the connection must end at once, not when
	// it expires.
	s := startProxy(t, edgePolicy(t, rec, rpmPolicy, []string{"a"}, "", ""), func(o *options) { o.gw.BodyReadTimeout = time.Minute })
	for _, tc := range []struct {
		name, head, status string
	}{
		{"unknown key", head("sk-unknown", 1000), "401"},
		{"no key", strings.Replace(head("", 1000), "Authorization: Bearer \r\n", "", 1), "401"},
		{"declared too large", head(testKey("a"), 64<<20), "413"},
		{"headers too large", strings.Replace(head(testKey("a"), 10), "Host: proxy", "Host: proxy\r\nX-Pad: "+strings.Repeat("p", 2*MaxHeaderBytes), 1), "431"},
	} {
		conn := dial(s)
		io.WriteString(conn, tc.head)
		if status := readUntilClosed(t, conn); !strings.HasPrefix(status, tc.status) {
			t.Errorf("%s: answer %s; want %s", tc.name, status, tc.status)
		}
	}
}

// logLines returns the lines written to the log so far.
func logLines(b *syncbuf.Buffer) []string {
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

// A model name over MaxModelBytes or with control characters is refused
// with 400 before pricing; a rejected request with a megabyte model name
// writes no log line over 4 KiB.
func TestModelNamesAndLogLinesAreBounded(t *testing.T) {
	rec := newRecorder(t)
	var log syncbuf.Buffer
	s := startProxy(t, edgePolicy(t, rec, `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 8, per: 1h}
`, []string{"a"}, "", ""), func(o *options) {
		o.logLevel, o.logOutput = "info", &log
	})
	chat := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
	}
	huge := strings.Repeat("m", 1_000_000) // a megabyte, within the 1 MiB body limit
	for _, model := range []string{huge, strings.Repeat("m", 257), `gpt\n4o`, `gpt\u0000`, `gpt\u001b[31m`, `gpt\u0085`} {
		resp, b := post(t, s, "/v1/chat/completions", testKey("a"), chat(model))
		checkError(t, fmt.Sprintf("model %.20q", model), resp, b, http.StatusBadRequest, "invalid_model")
	}
	if resp, b := post(t, s, "/v1/chat/completions", testKey("a"), chat(strings.Repeat("m", 256))); resp.StatusCode != http.StatusOK {
		t.Errorf("a 256-byte model name: status %d: %s", resp.StatusCode, b)
	}
	// The request rate is decided before the body is read: the six refused
	// names and the two admitted requests use up the limit of eight; the
	// megabyte name then gets 429 without its body being read.
	post(t, s, "/v1/chat/completions", testKey("a"), chat("gpt-4o-mini"))
	for range 3 {
		if resp, b := post(t, s, "/v1/chat/completions", testKey("a"), chat(huge)); resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("a megabyte model name over the limit: status %d: %.200s", resp.StatusCode, b)
		}
	}
	if resp, b := post(t, s, "/v1/chat/completions", testKey("a"), chat("gpt-4o-mini")); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("over the limit: status %d: %.200s", resp.StatusCode, b)
	}
	eventually(t, 5*time.Second, "the rejection is logged", func() bool { return strings.Contains(log.String(), `"decision":"rejected"`) })
	for i, l := range logLines(&log) {
		if len(l) > 4<<10 {
			t.Errorf("log line %d is %d bytes; want at most 4 KiB: %.200s", i, len(l), l)
		}
	}
	if n := len(rec.requests()); n != 2 {
		t.Errorf("the upstream received %d requests; want the 2 admitted", n)
	}
}

// Failed authentication is throttled per client address: after the
// allowance, an address gets 429 before its key is looked at, valid keys
// included; other addresses keep theirs. Behind a trusted proxy the
// address is the forwarded client's, IPv6 grouped by /64.
func TestFailedAuthenticationIsThrottled(t *testing.T) {
	rec := newRecorder(t)
	s := startProxy(t, edgePolicy(t, rec, rpmPolicy, []string{"a"},
		"  trusted_proxies: [127.0.0.1]\n  failed_auth: {limit: 5, per: 1h, max_addresses: 1000}\n", ""))
	get := func(key, from string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/v1/models", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if from != "" {
			req.Header.Set("X-Forwarded-For", from)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, from := range []string{"", "203.0.113.7", "2001:db8::1"} {
		for i := range 5 {
			key := fmt.Sprintf("sk-guess-%d", i)
			if i == 4 {
				key = "" // a missing key is a failure too
			}
			if st := get(key, from).StatusCode; st != http.StatusUnauthorized {
				t.Fatalf("from %q: failure %d: status %d; want 401", from, i+1, st)
			}
		}
		resp := get("sk-guess-6", from)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Errorf("from %q: sixth failure: status %d, Retry-After %q; want 429 with Retry-After", from, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if st := get(testKey("a"), from).StatusCode; st != http.StatusTooManyRequests {
			t.Errorf("from %q: a valid key after the allowance: status %d; want 429 before the key is looked at", from, st)
		}
	}
	// Other addresses have their own allowance; the same /64 does not.
	for from, want := range map[string]int{
		"203.0.113.8":     http.StatusUnauthorized,
		"2001:db8::2":     http.StatusTooManyRequests,
		"2001:db8:0:1::1": http.StatusUnauthorized,
		// An untrusted hop named by the client does not change the
		// address: the last hop before the trusted proxy counts.
		"198.51.100.1, 203.0.113.7": http.StatusTooManyRequests,
	} {
		if st := get("sk-guess-x", from).StatusCode; st != want {
			t.Errorf("from %q: status %d; want %d", from, st, want)
		}
	}
	if st := get(testKey("a"), "203.0.113.8").StatusCode; st != http.StatusOK {
		t.Errorf("a valid key from an address with failures left: status %d; want 200", st)
	}
	if n := scrape(t, s, "llmproxy_auth_failures_total"); n != 17 {
		t.Errorf("auth failures = %v; want 17", n)
	}
	if n := scrape(t, s, "llmproxy_auth_throttled_total"); n != 8 {
		t.Errorf("auth throttled = %v; want 8", n)
	}
}
