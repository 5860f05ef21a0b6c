package gateway_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"google.golang.org/genai"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	budget "github.com/sluicehq/sluice/admission/upstream"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/internal/syncbuf"
	"github.com/sluicehq/sluice/weights"
)

const (
	gemini          = "gemini-2.5-flash"
	geminiUpstream  = "gemini-upstream-key"
	geminiMaxBody   = 64 << 10
	geminiKeyHeader = "X-Goog-Api-Key"
)

// geminiStack is a gateway serving the Gemini API in front of the
// simulator, which records what it received; the gateway logs at debug
// level into logs.
type geminiStack struct {
	URL  string
	sim  *upstream.Server
	clk  *admissiontest.Clock
	prov *gateway.Providers
	logs syncbuf.Buffer
	mu   sync.Mutex
	hdr  []http.Header
	urls []string
}

// seen returns the headers and URLs of the upstream requests so far.
func (s *geminiStack) seen() ([]http.Header, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.hdr...), append([]string(nil), s.urls...)
}

// geminiGateway serves policy for tenants a (keyA) and b (keyB) on a fake
// clock, with the upstream stores the policy declares; tune, when given,
// edits the gateway's and the simulator's configurations.
func geminiGateway(t *testing.T, policy string, tune ...func(*gateway.Config, *upstream.Config)) *geminiStack {
	t.Helper()
	keys := "tenants:\n  a: {api_keys: [" + apikey.Sum(keyA).String() + "]}\n  b: {api_keys: [" + apikey.Sum(keyB).String() + "]}\n"
	f, err := config.Parse("gemini.yaml", []byte(policy+keys+"identity: {anonymous: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := &geminiStack{clk: admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))}
	if s.prov, err = gateway.NewProviders(f, nil); err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config, append(s.prov.Options(), admission.WithClock(s.clk))...)
	if err != nil {
		t.Fatal(err)
	}
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter, MaxBodyBytes: geminiMaxBody})
	if err != nil {
		t.Fatal(err)
	}
	simCfg := upstream.Config{OutputTokens: 5}
	cfg := gateway.Config{ForwardHeaders: []string{"X-Sim-*"}}
	for _, f := range tune {
		f(&cfg, &simCfg)
	}
	s.sim = upstream.New(simCfg)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hdr = append(s.hdr, r.Header.Clone())
		s.urls = append(s.urls, r.URL.String())
		s.mu.Unlock()
		s.sim.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	cfg.Upstream, cfg.UpstreamKey = up.URL+"/v1", "sk-openai-upstream"
	cfg.Gemini = gateway.Gemini{Upstream: up.URL + "/v1beta", Key: geminiUpstream}
	log := slog.New(slog.NewTextHandler(&s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	gw, err := gateway.New(ctl, est, f, cfg, gateway.WithLogger(log), gateway.WithProviders(s.prov), gateway.WithClock(s.clk))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// client is the official SDK pointed at the gateway with key (its API key
// backend), sending hdr; it does not retry unless retry says how.
func (s *geminiStack) client(t *testing.T, key string, hdr http.Header, retry *genai.HTTPRetryOptions) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(ctxT(t, 10*time.Second), &genai.ClientConfig{
		APIKey: key, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: s.URL, Headers: hdr, RetryOptions: retry},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// post sends body to path (with its query) with hdr and returns the
// answer.
func (s *geminiStack) post(t *testing.T, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return roundTrip(t, req)
}

// googleError reads an error body of Google's shape.
func googleError(t *testing.T, b []byte) genai.APIError {
	t.Helper()
	var v struct{ Error *genai.APIError }
	if err := json.Unmarshal(b, &v); err != nil || v.Error == nil || v.Error.Code == 0 || v.Error.Status == "" || v.Error.Message == "" {
		t.Fatalf("body %s is not a Google error (%v)", b, err)
	}
	return *v.Error
}

// retryDelay returns the retryDelay of e's RetryInfo detail, or "".
func retryDelay(e genai.APIError) string {
	for _, d := range e.Details {
		if d["@type"] == "type.googleapis.com/google.rpc.RetryInfo" {
			s, _ := d["retryDelay"].(string)
			return s
		}
	}
	return ""
}

const geminiPolicies = `
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1000, per: 1m}
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
`

// The SDK's GenerateContent, plain and streamed (alt=sse), and
// CountTokens through the gateway: a call with thinking and a cached
// prompt is settled at exactly the usage its usageMetadata reports
// (prompt, cached included, plus candidates plus thoughts), as the
// tokens remaining after a countTokens call (requests only) show. The
// upstream gets the gateway's key in x-goog-api-key and the path rebuilt
// from the route and the model, never the tenant's key.
func TestGeminiSDKSettlesUsage(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			s := geminiGateway(t, geminiPolicies)
			c := s.client(t, keyA, http.Header{"X-Sim-Reasoning-Tokens": {"40"}, "X-Sim-Cached-Tokens": {"8"}}, nil)
			ctx := ctxT(t, 10*time.Second)
			cfg := &genai.GenerateContentConfig{MaxOutputTokens: 100, SystemInstruction: genai.NewContentFromText("Answer in one sentence.", "")}
			var last *genai.GenerateContentResponse
			var text strings.Builder
			if stream {
				chunks := 0
				for r, err := range c.Models.GenerateContentStream(ctx, gemini, genai.Text("Why is the sky blue?"), cfg) {
					if err != nil {
						t.Fatal(err)
					}
					chunks++
					text.WriteString(r.Text())
					last = r
				}
				if chunks < 2 {
					t.Errorf("%d chunks; want the stream's chunks", chunks)
				}
			} else {
				r, err := c.Models.GenerateContent(ctx, gemini, genai.Text("Why is the sky blue?"), cfg)
				if err != nil {
					t.Fatal(err)
				}
				text.WriteString(r.Text())
				last = r
			}
			u := last.UsageMetadata
			if text.Len() == 0 || u == nil || u.CandidatesTokenCount != 5 || u.ThoughtsTokenCount != 40 || u.CachedContentTokenCount != 8 || u.PromptTokenCount == 0 {
				t.Fatalf("answer %q, usage %+v: want 5 tokens of text, 40 of thoughts, 8 cached", text.String(), u)
			}
			if h := last.SDKHTTPResponse.Headers; h.Get("X-Ratelimit-Remaining-Tokens") == "" {
				t.Errorf("the admitted answer has no limit headers: %v", h)
			}

			n, err := c.Models.CountTokens(ctx, gemini, genai.Text("Why is the sky blue?"), nil)
			if err != nil || n.TotalTokens == 0 {
				t.Fatalf("CountTokens = %+v, %v", n, err)
			}
			used := int64(u.PromptTokenCount + u.CandidatesTokenCount + u.ThoughtsTokenCount)
			if got, want := n.SDKHTTPResponse.Headers.Get("X-Ratelimit-Remaining-Tokens"), strconv.FormatInt(100_000-used, 10); got != want {
				t.Errorf("tokens remaining after the call = %s; want %s (usage %+v)", got, want, u)
			}

			hs, urls := s.seen()
			wantURLs := []string{"/v1beta/models/" + gemini + ":generateContent", "/v1beta/models/" + gemini + ":countTokens"}
			if stream {
				wantURLs[0] = "/v1beta/models/" + gemini + ":streamGenerateContent?alt=sse"
			}
			if len(urls) != 2 || urls[0] != wantURLs[0] || urls[1] != wantURLs[1] {
				t.Errorf("upstream URLs %q; want %q", urls, wantURLs)
			}
			for i, h := range hs {
				if h.Get(geminiKeyHeader) != geminiUpstream || h.Get("Authorization") != "" {
					t.Errorf("upstream request %d: x-goog-api-key %q, authorization %q; want the gateway's key only", i, h.Get(geminiKeyHeader), h.Get("Authorization"))
				}
				for k, vs := range h {
					if strings.Contains(strings.Join(vs, ","), keyA) {
						t.Errorf("upstream request %d: the tenant's key went upstream in %s", i, k)
					}
				}
			}
		})
	}
}

// A rejection reaches the SDK as an APIError in Google's shape: 429
// RESOURCE_EXHAUSTED with a RetryInfo detail and Retry-After, which the
// SDK retries when told to (its retry codes include 429); an exhausted
// budget is 403 PERMISSION_DENIED without RetryInfo, which it never
// retries.
func TestGeminiSDKRefusals(t *testing.T) {
	s := geminiGateway(t, `
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1, per: 1m}
`)
	ctx := ctxT(t, 10*time.Second)
	var attempts int
	var mu sync.Mutex
	zero, three := 0.0, int32(3)
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		attempts++
		mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	})}
	c, err := genai.NewClient(ctx, &genai.ClientConfig{
		APIKey: keyA, Backend: genai.BackendGeminiAPI, HTTPClient: hc,
		HTTPOptions: genai.HTTPOptions{BaseURL: s.URL, RetryOptions: &genai.HTTPRetryOptions{Attempts: &three, InitialDelay: &zero, MaxDelay: &zero, Jitter: &zero}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Models.GenerateContent(ctx, gemini, genai.Text("Hi"), nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.Models.GenerateContent(ctx, gemini, genai.Text("Hi"), nil)
	var ae genai.APIError
	if !errors.As(err, &ae) || ae.Code != 429 || ae.Status != "RESOURCE_EXHAUSTED" || retryDelay(ae) == "" {
		t.Fatalf("over the rate: %v; want an APIError 429 RESOURCE_EXHAUSTED with a RetryInfo", err)
	}
	if attempts != 1+3 {
		t.Errorf("the SDK made %d attempts; want 1, then 3 for the refused call (it retries 429)", attempts)
	}
	resp, b := s.post(t, "/v1beta/models/"+gemini+":generateContent", `{"contents":[{"parts":[{"text":"Hi"}]}]}`, geminiKeyHeader, keyA)
	e := googleError(t, b)
	d, err := time.ParseDuration(retryDelay(e))
	if resp.StatusCode != 429 || err != nil || d <= 0 || d > time.Minute || resp.Header.Get("Retry-After") == "" {
		t.Errorf("raw 429: status %d, retryDelay %q, Retry-After %q; want a delay within the minute", resp.StatusCode, retryDelay(e), resp.Header.Get("Retry-After"))
	}

	b2 := geminiGateway(t, `
policies:
  - {name: tenant-budget, key: [tenant], algorithm: quota, per: 7d, limit: 1, budget: true}
`)
	c2, err := genai.NewClient(ctx, &genai.ClientConfig{
		APIKey: keyA, Backend: genai.BackendGeminiAPI, HTTPClient: hc,
		HTTPOptions: genai.HTTPOptions{BaseURL: b2.URL, RetryOptions: &genai.HTTPRetryOptions{Attempts: &three, InitialDelay: &zero, MaxDelay: &zero, Jitter: &zero}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Models.GenerateContent(ctx, gemini, genai.Text("Hi"), nil); err != nil {
		t.Fatal(err)
	}
	attempts = 0
	_, err = c2.Models.GenerateContent(ctx, gemini, genai.Text("Hi"), nil)
	if !errors.As(err, &ae) || ae.Code != 403 || ae.Status != "PERMISSION_DENIED" || retryDelay(ae) != "" {
		t.Fatalf("over the budget: %v; want an APIError 403 PERMISSION_DENIED without RetryInfo", err)
	}
	if attempts != 1 {
		t.Errorf("the SDK made %d attempts on the spent budget; want 1", attempts)
	}
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A Gemini 429 (RESOURCE_EXHAUSTED with RetryInfo and QuotaFailure in
// its body, no header) is learned by the upstream store as an OpenAI
// 429's headers are: the model's group is paused for the retry delay and
// holds the quota's figures; the client gets Google's shape with the
// provider's delay.
func TestGeminiUpstreamThrottleLearned(t *testing.T) {
	s := geminiGateway(t, `
stores:
  google: {kind: upstream}
policies:
  - {name: provider-rpm, store: google, key: [model], algorithm: sliding_window, limit: 1000, per: 1m}
`)
	resp, b := s.post(t, "/v1beta/models/"+gemini+":generateContent", `{"contents":[{"parts":[{"text":"Hi"}]}]}`,
		geminiKeyHeader, keyA, "X-Sim-Fault", "429", "X-Sim-Retry-After", "7")
	e := googleError(t, b)
	if resp.StatusCode != 429 || e.Status != "RESOURCE_EXHAUSTED" || retryDelay(e) != "7s" || resp.Header.Get("Retry-After-Ms") != "7000" {
		t.Errorf("provider 429: status %d, %+v, retry-after-ms %q; want RESOURCE_EXHAUSTED, retryDelay 7s", resp.StatusCode, e, resp.Header.Get("Retry-After-Ms"))
	}
	if v := resp.Header.Get("X-Ratelimit-Limit-Tokens"); v != "" {
		t.Errorf("the provider's quota reached the client: x-ratelimit-limit-tokens %s", v)
	}
	groups := s.prov.Store("google").Groups(s.clk.Now())
	if len(groups) != 1 || groups[0].Group != gemini || groups[0].Paused <= 0 || groups[0].Paused > 7*time.Second ||
		groups[0].Figures[budget.Tokens].Limit != 1_000_000 || groups[0].Figures[budget.Tokens].Remaining != 0 {
		t.Errorf("learned %+v; want %s paused for 7s, its token quota of 1,000,000 spent", groups, gemini)
	}
}

// Hostile requests: a model path that could reach another upstream path
// (dot segments, an encoded slash, a method the gateway does not serve),
// a stream without alt=sse, a body over the cap, JSON nested beyond the
// scanner's depth, a missing or wrong key. Each is refused in Google's
// shape before the upstream sees anything. A key sent in the query
// string is accepted, and reaches neither the upstream (URL or headers)
// nor a log line.
func TestGeminiHostile(t *testing.T) {
	s := geminiGateway(t, geminiPolicies)
	body := `{"contents":[{"parts":[{"text":"Hi"}]}]}`
	deep := `{"contents":[{"parts":[{"functionCall":{"name":"f","args":{"a":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}}}]}]}`
	for _, tc := range []struct {
		name, path, body string
		hdr              []string
		status           int
		gstatus          string
	}{
		{"dot segments", "/v1beta/models/..%2F..%2Fv1%2Fchat%2Fcompletions:generateContent", body, []string{geminiKeyHeader, keyA}, 404, "NOT_FOUND"},
		{"encoded slash", "/v1beta/models/gemini-2.5-flash%2Fx:generateContent", body, []string{geminiKeyHeader, keyA}, 404, "NOT_FOUND"},
		{"dot model", "/v1beta/models/..:generateContent", body, []string{geminiKeyHeader, keyA}, 404, "NOT_FOUND"},
		{"long model", "/v1beta/models/" + strings.Repeat("g", 200) + ":generateContent", body, []string{geminiKeyHeader, keyA}, 404, "NOT_FOUND"},
		{"unknown method", "/v1beta/models/" + gemini + ":embedContent", body, []string{geminiKeyHeader, keyA}, 404, "NOT_FOUND"},
		{"stream without sse", "/v1beta/models/" + gemini + ":streamGenerateContent", body, []string{geminiKeyHeader, keyA}, 400, "INVALID_ARGUMENT"},
		{"huge body", "/v1beta/models/" + gemini + ":generateContent", `{"contents":[{"parts":[{"text":"` + strings.Repeat("x", geminiMaxBody) + `"}]}]}`, []string{geminiKeyHeader, keyA}, 413, "INVALID_ARGUMENT"},
		{"deep JSON", "/v1beta/models/" + gemini + ":generateContent", deep, []string{geminiKeyHeader, keyA}, 400, "INVALID_ARGUMENT"},
		{"no key", "/v1beta/models/" + gemini + ":generateContent", body, nil, 401, "UNAUTHENTICATED"},
		{"path beyond the model", "/v1beta/models/" + gemini + ":generateContent/..%2F..%2Fx", body, []string{geminiKeyHeader, keyA}, 404, "NOT_FOUND"},
		{"wrong key", "/v1beta/models/" + gemini + ":generateContent?key=sk-wrong-query-key", body, nil, 401, "UNAUTHENTICATED"},
	} {
		resp, b := s.post(t, tc.path, tc.body, tc.hdr...)
		if e := googleError(t, b); resp.StatusCode != tc.status || e.Code != tc.status || e.Status != tc.gstatus {
			t.Errorf("%s: %d %s; want %d %s in Google's shape", tc.name, resp.StatusCode, b, tc.status, tc.gstatus)
		}
	}
	if _, urls := s.seen(); len(urls) != 0 {
		t.Errorf("the upstream got %q; want nothing", urls)
	}

	const queryKey = keyA
	for _, path := range []string{
		"/v1beta/models/" + gemini + ":generateContent?key=" + queryKey,
		"/v1beta/models/" + gemini + ":streamGenerateContent?alt=sse&key=" + queryKey,
	} {
		if resp, b := s.post(t, path, body); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	hs, urls := s.seen()
	if want := []string{"/v1beta/models/" + gemini + ":generateContent", "/v1beta/models/" + gemini + ":streamGenerateContent?alt=sse"}; len(urls) != 2 || urls[0] != want[0] || urls[1] != want[1] {
		t.Errorf("upstream URLs %q; want %q", urls, want)
	}
	for i, h := range hs {
		for k, vs := range h {
			if strings.Contains(strings.Join(vs, ","), queryKey) {
				t.Errorf("upstream request %d: the tenant's query key went upstream in %s", i, k)
			}
		}
	}
	if logs := s.logs.String(); strings.Contains(logs, queryKey) || strings.Contains(logs, "sk-wrong-query-key") {
		t.Errorf("a key reached the log:\n%s", logs)
	}
}

// A stream whose tenant runs out of tokens as it goes is cut with an
// error event in Google's shape, which the SDK raises as an APIError 429,
// and is charged what it streamed.
func TestGeminiStreamCut(t *testing.T) {
	s := geminiGateway(t, `
policies:
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 30, per: 1m}
`, func(g *gateway.Config, u *upstream.Config) {
		g.ChargeInterval, g.MaxOutputReserve, u.TokensPerSecond = time.Millisecond, 1, 200
	})
	c := s.client(t, keyA, http.Header{"X-Sim-Tokens": {"60"}}, nil)
	var text strings.Builder
	var err error
	for r, e := range c.Models.GenerateContentStream(ctxT(t, 10*time.Second), gemini, genai.Text("hi"), &genai.GenerateContentConfig{MaxOutputTokens: 100}) {
		if e != nil {
			err = e
			break
		}
		text.WriteString(r.Text())
	}
	var ae genai.APIError
	if !errors.As(err, &ae) || ae.Code != 429 || ae.Status != "RESOURCE_EXHAUSTED" {
		t.Fatalf("stream error %v; want an APIError 429 RESOURCE_EXHAUSTED", err)
	}
	if text.Len() == 0 {
		t.Error("no text before the cut")
	}
	resp, b := s.post(t, "/v1beta/models/"+gemini+":countTokens", `{"contents":[{"parts":[{"text":"hi"}]}]}`, geminiKeyHeader, keyA)
	if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" {
		t.Errorf("after the cut: %d, tokens remaining %q (%s); want 0", resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Tokens"), b)
	}
}

// Policies match the Gemini routes by their operation names, and a
// policy keyed by model sees the path's model.
func TestGeminiOperationsAndModels(t *testing.T) {
	s := geminiGateway(t, `
policies:
  - {name: stream-rpm, match: {operations: ["POST /v1beta/models/{model}:streamGenerateContent"]}, key: [tenant], algorithm: token_bucket, limit: 1, per: 1m}
  - {name: model-rpm, match: {operations: ["POST /v1beta/models/{model}:generateContent"]}, key: [tenant, model], algorithm: token_bucket, limit: 1, per: 1m}
`)
	body := `{"contents":[{"parts":[{"text":"Hi"}]}]}`
	for i, tc := range []struct {
		path   string
		status int
	}{
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", 200},
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", 429},
		{"/v1beta/models/gemini-2.5-flash:generateContent", 200},
		{"/v1beta/models/gemini-2.5-pro:generateContent", 200},
		{"/v1beta/models/gemini-2.5-flash:generateContent", 429},
		{"/v1beta/models/gemini-2.5-flash:countTokens", 200},
	} {
		if resp, b := s.post(t, tc.path, body, geminiKeyHeader, keyA); resp.StatusCode != tc.status {
			t.Errorf("request %d, %s: %d %s; want %d", i, tc.path, resp.StatusCode, b, tc.status)
		}
	}
}

// Google's 400 API_KEY_INVALID speaks of the gateway's own key: the
// client gets 502 UNAVAILABLE, never a hint that its key is wrong; the
// upstream's other 4xx pass through.
func TestGeminiUpstreamKeyRefused(t *testing.T) {
	s := geminiGateway(t, geminiPolicies)
	resp, b := s.post(t, "/v1beta/models/"+gemini+":generateContent", `{"contents":[{"parts":[{"text":"Hi"}]}]}`, geminiKeyHeader, keyA, "X-Sim-Fault", "401")
	if e := googleError(t, b); resp.StatusCode != 502 || e.Status != "UNAVAILABLE" || strings.Contains(e.Message, "API key not valid") {
		t.Errorf("upstream key refused: %d %s; want 502 UNAVAILABLE", resp.StatusCode, b)
	}
	resp, b = s.post(t, "/v1beta/models/gemini-unknown:generateContent", `{"contents":[{"parts":[{"text":"Hi"}]}]}`, geminiKeyHeader, keyA)
	if e := googleError(t, b); resp.StatusCode != 404 || e.Status != "NOT_FOUND" || !strings.Contains(e.Message, "gemini-unknown") {
		t.Errorf("unknown model upstream: %d %s; want Google's own 404", resp.StatusCode, b)
	}
}

// A cost quota is settled at the built-in Gemini price of the exact
// usage: the prompt not cached at the input price, the cached part at the
// cached price, candidates and thoughts at the output price; an
// unpriced Gemini model is refused in Google's shape.
func TestGeminiCostSettlesExactly(t *testing.T) {
	s := geminiGateway(t, `
policies:
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 100M}
`)
	resp, b := s.post(t, "/v1beta/models/"+gemini+":generateContent", `{"contents":[{"parts":[{"text":"`+strings.Repeat("Physics, patiently. ", 40)+`"}]}]}`,
		geminiKeyHeader, keyA, "X-Sim-Cached-Tokens", "100", "X-Sim-Reasoning-Tokens", "300")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var r struct {
		UsageMetadata struct{ PromptTokenCount, CachedContentTokenCount, CandidatesTokenCount, ThoughtsTokenCount int64 }
	}
	if err := json.Unmarshal(b, &r); err != nil || r.UsageMetadata.CachedContentTokenCount != 100 {
		t.Fatalf("usage %s (%v): want 100 cached", b, err)
	}
	u := r.UsageMetadata
	// gemini-2.5-flash: $0.30 in, $0.03 cached, $2.50 out per million
	// tokens; micro-dollars rounded up once.
	pico := (u.PromptTokenCount-u.CachedContentTokenCount)*300_000 + u.CachedContentTokenCount*30_000 + (u.CandidatesTokenCount+u.ThoughtsTokenCount)*2_500_000
	cost := (pico + 999_999) / 1_000_000
	resp, b = s.post(t, "/v1beta/models/"+gemini+":countTokens", `{"contents":[{"parts":[{"text":"hi"}]}]}`, geminiKeyHeader, keyA)
	if resp.StatusCode != 200 {
		t.Fatalf("countTokens: %d %s", resp.StatusCode, b)
	}
	if got, want := resp.Header.Get("RateLimit"), `"spend";r=`+strconv.FormatInt(100_000_000-cost, 10)+";"; !strings.HasPrefix(got, want) {
		t.Errorf("after the call, RateLimit = %q; want %s… (cost %d µ$ of usage %+v)", got, want, cost, u)
	}
	resp, b = s.post(t, "/v1beta/models/gemini-unpriced-9:generateContent", `{"contents":[{"parts":[{"text":"hi"}]}]}`, geminiKeyHeader, keyA)
	if e := googleError(t, b); resp.StatusCode != 400 || e.Status != "INVALID_ARGUMENT" || !strings.Contains(e.Message, "price") {
		t.Errorf("unpriced model: %d %s; want 400 INVALID_ARGUMENT about the price", resp.StatusCode, b)
	}
}
