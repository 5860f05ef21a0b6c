package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/weights"
)

const (
	keyB        = "sk-embed-b"
	upstreamKey = "sk-ant-upstream"
	claude      = "claude-sonnet-4-5"
	// maxBody is the body cap of the Messages gateway of these tests.
	maxBody = 64 << 10
)

// anthropicStack is a gateway serving the Messages API in front of the
// simulator, which records the headers it received.
type anthropicStack struct {
	URL string
	mu  sync.Mutex
	hdr []http.Header
}

// seen returns the headers of the upstream requests so far.
func (s *anthropicStack) seen() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.hdr...)
}

// anthropicGateway serves policy for tenants a (keyA) and b (keyB), on
// a fake clock unless realClock; tune, when given, edits the gateway's
// and the simulator's configurations.
func anthropicGateway(t *testing.T, policy string, realClock bool, tune ...func(*gateway.Config, *upstream.Config)) *anthropicStack {
	t.Helper()
	keys := "tenants:\n  a: {api_keys: [" + apikey.Sum(keyA).String() + "]}\n  b: {api_keys: [" + apikey.Sum(keyB).String() + "]}\n"
	f, err := config.Parse("messages.yaml", []byte(policy+keys+"identity: {anonymous: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var opts []admission.Option
	if !realClock {
		opts = append(opts, admission.WithClock(admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))))
	}
	ctl, err := admission.New(f.Config, opts...)
	if err != nil {
		t.Fatal(err)
	}
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter, MaxBodyBytes: maxBody})
	if err != nil {
		t.Fatal(err)
	}
	s := &anthropicStack{}
	simCfg := upstream.Config{OutputTokens: 5, AnyModel: true}
	cfg := gateway.Config{ForwardHeaders: []string{"X-Sim-*"}}
	for _, f := range tune {
		f(&cfg, &simCfg)
	}
	sim := upstream.New(simCfg)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hdr = append(s.hdr, r.Header.Clone())
		s.mu.Unlock()
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	cfg.Upstream, cfg.UpstreamKey = up.URL+"/v1", "sk-openai-upstream"
	cfg.Anthropic = gateway.Anthropic{Upstream: up.URL + "/v1", Key: upstreamKey}
	gw, err := gateway.New(ctl, est, f, cfg, gateway.WithLogger(slog.New(slog.DiscardHandler)))
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

// client is the official SDK pointed at the gateway with key; it does
// not retry unless opts say so.
func (s *anthropicStack) client(key string, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL(s.URL + "/"), option.WithAPIKey(key), option.WithMaxRetries(0),
	}, opts...)...)
}

// post sends body to path with key in x-api-key (and no
// anthropic-version) and returns the answer.
func (s *anthropicStack) post(t *testing.T, path, key, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return roundTrip(t, req)
}

// limit returns the anthropic-ratelimit-<unit>-remaining of h, and
// checks its limit and reset figures are there.
func remaining(t *testing.T, h http.Header, unit string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(h.Get("Anthropic-Ratelimit-"+unit+"-Remaining"), 10, 64)
	if err != nil {
		t.Fatalf("anthropic-ratelimit-%s-remaining: %v (headers %v)", unit, err, h)
	}
	if _, err := strconv.ParseInt(h.Get("Anthropic-Ratelimit-"+unit+"-Limit"), 10, 64); err != nil {
		t.Errorf("anthropic-ratelimit-%s-limit: %v", unit, err)
	}
	if _, err := time.Parse(time.RFC3339, h.Get("Anthropic-Ratelimit-"+unit+"-Reset")); err != nil {
		t.Errorf("anthropic-ratelimit-%s-reset %q is not an RFC 3339 instant: %v", unit, h.Get("Anthropic-Ratelimit-"+unit+"-Reset"), err)
	}
	return n
}

// anthropicError reads an error body of Anthropic's shape.
func anthropicError(t *testing.T, b []byte) (typ, msg string) {
	t.Helper()
	var v struct {
		Type  string
		Error *struct{ Type, Message string }
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Type != "error" || v.Error == nil || v.Error.Type == "" || v.Error.Message == "" {
		t.Fatalf("body %s is not an Anthropic error (%v)", b, err)
	}
	return v.Error.Type, v.Error.Message
}

const unitPolicies = `
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1000, per: 1m}
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
  - {name: itpm, key: [tenant], unit: input_tokens, algorithm: token_bucket, limit: 30k, per: 1m}
  - {name: otpm, key: [tenant], unit: output_tokens, algorithm: token_bucket, limit: 8k, per: 1m}
`

func cachedParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model: claude, MaxTokens: 100,
		System: []anthropic.TextBlockParam{{
			Text:         strings.Repeat("You are a patient tutor who explains physics with care. ", 20),
			CacheControl: anthropic.NewCacheControlEphemeralParam(),
		}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Why is the sky blue?"))},
	}
}

// The SDK's messages, plain and streamed, with the prompt cache written
// and read: each is settled at exactly the usage it reports, per unit
// (input_tokens without cache reads, output_tokens, cached reads in
// tokens), as a count_tokens call (requests only, priced nothing) shows
// right after on the fake clock. A slow stream is charged as it goes
// from message_start's prompt figures (so a cache read is never charged
// as input, which a settlement could not take back). The upstream gets
// the gateway's key in
// x-api-key and the SDK's anthropic-version, never the tenant's key.
func TestMessagesSDKSettlesCacheUsage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		cache  string
		slow   bool
	}{
		{"json/cache write", false, "write", false},
		{"json/cache read", false, "read", false},
		{"stream/cache write", true, "write", false},
		{"stream/cache read", true, "read", false},
		{"slow stream/cache read", true, "read", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := anthropicGateway(t, unitPolicies, false, func(g *gateway.Config, u *upstream.Config) {
				if tc.slow {
					g.ChargeInterval, u.TokensPerSecond = time.Millisecond, 100
				}
			})
			var version string
			c := s.client(keyA, option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
				version = r.Header.Get("Anthropic-Version")
				return next(r)
			}))
			ctx := ctxT(t, 10*time.Second)
			var resp *http.Response
			opts := []option.RequestOption{option.WithHeader("X-Sim-Cache", tc.cache), option.WithResponseInto(&resp)}
			var msg anthropic.Message
			if tc.stream {
				st := c.Messages.NewStreaming(ctx, cachedParams(), opts...)
				events := map[string]int{}
				for st.Next() {
					ev := st.Current()
					events[ev.Type]++
					if err := msg.Accumulate(ev); err != nil {
						t.Fatal(err)
					}
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				for _, typ := range []string{"message_start", "content_block_delta", "message_delta", "message_stop"} {
					if events[typ] == 0 {
						t.Errorf("no %s event in the stream: %v", typ, events)
					}
				}
			} else {
				m, err := c.Messages.New(ctx, cachedParams(), opts...)
				if err != nil {
					t.Fatal(err)
				}
				msg = *m
			}
			u := msg.Usage
			if len(msg.Content) == 0 || msg.Content[0].Text == "" || u.OutputTokens != 5 {
				t.Fatalf("message %+v: want 5 tokens of text", msg)
			}
			cached := u.CacheCreationInputTokens
			if tc.cache == "read" {
				cached = u.CacheReadInputTokens
			}
			if cached == 0 || u.CacheCreationInputTokens+u.CacheReadInputTokens != cached || u.InputTokens == 0 {
				t.Fatalf("usage %+v: want the system prompt's cache %s only", u, tc.cache)
			}
			// The admitted answer carries Anthropic's limit headers.
			if resp == nil {
				t.Fatal("no response")
			}
			for _, unit := range []string{"Requests", "Tokens", "Input-Tokens", "Output-Tokens"} {
				remaining(t, resp.Header, unit)
			}

			var probe *http.Response
			n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
				Model:    claude,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Why is the sky blue?"))},
			}, option.WithResponseInto(&probe))
			if err != nil || n.InputTokens == 0 {
				t.Fatalf("count_tokens = %+v, %v", n, err)
			}
			// Anthropic's input limit counts cache writes, not reads.
			input := u.InputTokens + u.CacheCreationInputTokens
			total := u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens + u.OutputTokens
			for _, f := range []struct {
				unit string
				want int64
			}{
				{"Input-Tokens", 30_000 - input},
				{"Output-Tokens", 8_000 - u.OutputTokens},
				{"Tokens", 100_000 - total},
				{"Requests", 1000 - 2},
			} {
				if got := remaining(t, probe.Header, f.unit); got != f.want {
					t.Errorf("after the message, %s remaining = %d; want %d (usage %+v)", f.unit, got, f.want, u)
				}
			}

			hs := s.seen()
			if len(hs) != 2 {
				t.Fatalf("upstream got %d requests; want 2", len(hs))
			}
			for i, h := range hs {
				if h.Get("X-Api-Key") != upstreamKey || version == "" || h.Get("Anthropic-Version") != version || h.Get("Authorization") != "" {
					t.Errorf("upstream request %d: x-api-key %q, anthropic-version %q, authorization %q; want the gateway's key and the SDK's version",
						i, h.Get("X-Api-Key"), h.Get("Anthropic-Version"), h.Get("Authorization"))
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

// An ITPM/OTPM pair mirroring Anthropic's own limits: a request reserves
// its prompt estimate on input_tokens and its max_tokens on
// output_tokens, is settled at its usage, and a request whose max_tokens
// no longer fits the output budget is refused in Anthropic's shape with
// the output figures, while input has room.
func TestMessagesITPMAndOTPM(t *testing.T) {
	s := anthropicGateway(t, `
policies:
  - {name: itpm, key: [tenant], unit: input_tokens, algorithm: token_bucket, limit: 1000, per: 1m}
  - {name: otpm, key: [tenant], unit: output_tokens, algorithm: token_bucket, limit: 300, per: 1m}
`, false)
	body := func(maxTokens int) string {
		return `{"model":"` + claude + `","max_tokens":` + strconv.Itoa(maxTokens) + `,"messages":[{"role":"user","content":"Why is the sky blue?"}]}`
	}
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	e, err := est.Estimate(gateway.OpMessages, []byte(body(200)))
	if err != nil {
		t.Fatal(err)
	}
	var used struct{ in, out int64 }
	for i := range 2 {
		resp, b := s.post(t, gateway.OpMessages, keyA, body(200))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		// Admitted: the estimate reserved on top of what the previous
		// requests were settled at.
		if got, want := remaining(t, resp.Header, "Input-Tokens"), 1000-used.in-e.InputTokens; got != want {
			t.Errorf("request %d: input-tokens remaining %d; want %d", i, got, want)
		}
		if got, want := remaining(t, resp.Header, "Output-Tokens"), 300-used.out-200; got != want {
			t.Errorf("request %d: output-tokens remaining %d; want %d", i, got, want)
		}
		var m struct {
			Usage struct {
				In  int64 `json:"input_tokens"`
				Out int64 `json:"output_tokens"`
			}
		}
		if err := json.Unmarshal(b, &m); err != nil || m.Usage.In == 0 || m.Usage.Out != 5 {
			t.Fatalf("request %d: usage %s (%v)", i, b, err)
		}
		used.in += m.Usage.In
		used.out += m.Usage.Out
	}
	// A client that sends no anthropic-version gets the default.
	for i, h := range s.seen() {
		if v := h.Get("Anthropic-Version"); v != gateway.DefaultAnthropicVersion {
			t.Errorf("upstream request %d: anthropic-version %q; want %q", i, v, gateway.DefaultAnthropicVersion)
		}
	}
	// 290 output tokens are left: max_tokens 291 cannot be reserved.
	resp, b := s.post(t, gateway.OpMessages, keyA, body(291))
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("max_tokens 291 with 290 left: %d %s; want 429", resp.StatusCode, b)
	}
	if typ, msg := anthropicError(t, b); typ != "rate_limit_error" || !strings.Contains(msg, "otpm") {
		t.Errorf("rejection %s: %s; want rate_limit_error naming otpm", typ, msg)
	}
	if got := remaining(t, resp.Header, "Output-Tokens"); got != 300-used.out {
		t.Errorf("rejection: output-tokens remaining %d; want %d", got, 300-used.out)
	}
	if got := remaining(t, resp.Header, "Input-Tokens"); got != 1000-used.in {
		t.Errorf("rejection: input-tokens remaining %d; want %d", got, 1000-used.in)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("rejection without retry-after: %v", resp.Header)
	}
	// max_tokens 290 fits exactly.
	if resp, b := s.post(t, gateway.OpMessages, keyA, body(290)); resp.StatusCode != 200 {
		t.Errorf("max_tokens 290 with 290 left: %d %s; want 200", resp.StatusCode, b)
	}
}

// The SDK's retry against the gateway's 429 on /v1/messages: it waits
// the retry-after-ms sent, and succeeds; the 429 is Anthropic's
// rate_limit_error with the request figures. Tenant b, meanwhile, is
// served at once.
func TestMessagesSDKRetryAndNeighbour(t *testing.T) {
	s := anthropicGateway(t, `
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 2, per: 1s}
`, true)
	type attempt struct {
		at     time.Time
		status int
		hdr    http.Header
		body   string
	}
	var mu sync.Mutex
	var attempts []attempt
	record := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if err == nil {
			a := attempt{at: time.Now(), status: resp.StatusCode, hdr: resp.Header.Clone()}
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				resp.Body = io.NopCloser(strings.NewReader(string(b)))
				a.body = string(b)
			}
			mu.Lock()
			attempts = append(attempts, a)
			mu.Unlock()
		}
		return resp, err
	})
	ctx := ctxT(t, 30*time.Second)
	params := anthropic.MessageNewParams{Model: claude, MaxTokens: 50, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	a := s.client(keyA, option.WithMaxRetries(3), record)
	for i := range 2 {
		if _, err := a.Messages.New(ctx, params); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// Without retries, a's third call is refused: the SDK's error is
	// Anthropic's rate_limit_error.
	once := s.client(keyA)
	_, err := once.Messages.New(ctx, params)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusTooManyRequests || ae.Type() != "rate_limit_error" {
		t.Fatalf("third call without retries: %v; want a 429 rate_limit_error", err)
	}
	// The neighbour is unaffected.
	b := s.client(keyB)
	if _, err := b.Messages.New(ctx, params); err != nil {
		t.Fatalf("tenant b while a is limited: %v", err)
	}
	mu.Lock()
	attempts = nil
	mu.Unlock()
	if _, err := a.Messages.New(ctx, params); err != nil {
		t.Fatalf("a's call after the bucket emptied: the SDK's retry did not succeed: %v", err)
	}
	mu.Lock()
	got := attempts
	mu.Unlock()
	if len(got) < 2 || got[0].status != http.StatusTooManyRequests || got[len(got)-1].status != http.StatusOK {
		t.Fatalf("attempts %+v; want a 429 then, after retries, 200", got)
	}
	if typ, _ := anthropicError(t, []byte(got[0].body)); typ != "rate_limit_error" {
		t.Errorf("429 type %q; want rate_limit_error", typ)
	}
	ms, err := time.ParseDuration(got[0].hdr.Get("Retry-After-Ms") + "ms")
	if err != nil || ms <= 0 || ms > time.Second || got[0].hdr.Get("Retry-After") != "1" {
		t.Fatalf("retry-after %q, retry-after-ms %q; want 1 and 1..1000", got[0].hdr.Get("Retry-After"), got[0].hdr.Get("Retry-After-Ms"))
	}
	if waited := got[1].at.Sub(got[0].at); waited < ms-5*time.Millisecond {
		t.Errorf("the SDK retried after %v; the gateway asked for %v", waited, ms)
	}
	if r := got[0].hdr.Get("Anthropic-Ratelimit-Requests-Remaining"); r != "0" || got[0].hdr.Get("Anthropic-Ratelimit-Requests-Limit") != "2" {
		t.Errorf("429 requests figures: limit %q remaining %q; want 2 and 0", got[0].hdr.Get("Anthropic-Ratelimit-Requests-Limit"), r)
	}
	reset, err := time.Parse(time.RFC3339, got[0].hdr.Get("Anthropic-Ratelimit-Requests-Reset"))
	if err != nil || reset.Before(got[0].at.Add(-time.Second)) || reset.After(got[0].at.Add(2*time.Second)) {
		t.Errorf("429 requests reset %q (%v); want an RFC 3339 instant within a second or two of %v", got[0].hdr.Get("Anthropic-Ratelimit-Requests-Reset"), err, got[0].at)
	}
}

// Every error of the Messages routes, the gateway's own and the
// upstream's, is in Anthropic's shape with Anthropic's type for its
// status, an unknown route under /v1/messages too (and the doubled /v1
// of an SDK given the gateway's /v1 URL, with what to do), each with a
// request-id; the provider's own limit headers and organization never
// reach the tenant.
func TestMessagesErrorsInAnthropicShape(t *testing.T) {
	s := anthropicGateway(t, `
policies:
  - {name: upstream, key: [global], algorithm: concurrency, limit: 1}
`, false)
	ok := `{"model":"` + claude + `","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, key, body string
		hdr             []string
		status          int
		typ             string
	}{
		{"no key", "", ok, nil, 401, "authentication_error"},
		{"unknown key", "sk-nobody", ok, nil, 401, "authentication_error"},
		{"not JSON", keyA, `{"model":`, nil, 400, "invalid_request_error"},
		{"no max_tokens", keyA, `{"model":"` + claude + `","messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error"},
		{"too large", keyA, `{"model":"` + claude + `","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("a", maxBody) + `"}]}`, nil, 413, "request_too_large"},
		{"upstream 500", keyA, ok, []string{"X-Sim-Fault", "500"}, 500, "api_error"},
		{"upstream 529", keyA, ok, []string{"X-Sim-Fault", "529"}, 529, "overloaded_error"},
		{"upstream 429", keyA, ok, []string{"X-Sim-Fault", "429"}, 429, "rate_limit_error"},
		{"upstream refuses the gateway's key", keyA, ok, []string{"X-Sim-Fault", "401"}, 502, "api_error"},
		{"upstream garbage", keyA, ok, []string{"X-Sim-Fault", "garbage"}, 502, "api_error"},
		{"count_tokens without key", "", ok, nil, 401, "authentication_error"},
		{"count_tokens too large", keyA, `{"model":"` + claude + `","messages":[{"role":"user","content":"` + strings.Repeat("a", maxBody) + `"}]}`, nil, 413, "request_too_large"},
		{"/v1/messages/batches", keyA, ok, nil, 400, "invalid_request_error"}, // not a batch
		{"/v1/messages/unknown", keyA, ok, nil, 404, "not_found_error"},
		{"/v1/v1/messages", keyA, ok, nil, 404, "not_found_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := gateway.OpMessages
			switch {
			case strings.HasPrefix(tc.name, "count_tokens"):
				path = gateway.OpCountTokens
			case strings.HasPrefix(tc.name, "/"):
				path = tc.name
			}
			resp, b := s.post(t, path, tc.key, tc.body, tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d; want %d: %s", resp.StatusCode, tc.status, b)
			}
			typ, msg := anthropicError(t, b)
			if typ != tc.typ {
				t.Errorf("type %q; want %q (%s)", typ, tc.typ, b)
			}
			if tc.key == "" && !strings.Contains(msg, "x-api-key") {
				t.Errorf("401 without a key: %q does not say to send x-api-key", msg)
			}
			if path == "/v1/v1/messages" && !strings.Contains(msg, "without /v1") {
				t.Errorf("404 of a doubled /v1: %q does not say to drop /v1", msg)
			}
			if id := resp.Header.Get("Request-Id"); !strings.HasPrefix(id, "req_") {
				t.Errorf("request-id %q; want one on every answer", id)
			}
			if resp.Header.Get("Anthropic-Organization-Id") != "" || strings.Contains(string(b), "org-simulated") {
				t.Errorf("the provider's organization reached the tenant: %v %s", resp.Header, b)
			}
			if tc.status == 429 && resp.Header.Get("Anthropic-Ratelimit-Requests-Limit") == "50" {
				t.Errorf("the provider's own limit headers reached the tenant: %v", resp.Header)
			}
		})
	}

	// An upstream answer passed on carries the upstream's request-id.
	if resp, b := s.post(t, gateway.OpMessages, keyB, ok); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Request-Id"), "req_sim_") {
		t.Errorf("a message: %d, request-id %q; want 200 with the upstream's: %s", resp.StatusCode, resp.Header.Get("Request-Id"), b)
	}

	// The shared upstream cap, full: 503 overloaded_error.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := make(chan struct{})
	go func() {
		defer close(held)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+gateway.OpMessages, strings.NewReader(ok))
		req.Header.Set("X-Api-Key", keyA)
		req.Header.Set("X-Sim-Fault", "hang")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for hanging := false; !hanging; {
		select {
		case <-held:
			t.Fatal("the held request ended")
		case <-time.After(5 * time.Millisecond):
		}
		for _, h := range s.seen() {
			hanging = hanging || h.Get("X-Sim-Fault") == "hang"
		}
	}
	resp, b := s.post(t, gateway.OpMessages, keyB, ok)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("while the upstream cap is held: %d %s; want 503", resp.StatusCode, b)
	}
	if typ, _ := anthropicError(t, b); typ != "overloaded_error" {
		t.Errorf("503 type %q; want overloaded_error", typ)
	}
	cancel()
	<-held
}

// ctxT returns a context ending with the test, or after d.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A stream whose tenant runs out of output tokens as it goes is cut with
// Anthropic's error event, which the SDK raises as a rate_limit_error,
// and is charged what it streamed.
func TestMessagesStreamCutInAnthropicShape(t *testing.T) {
	s := anthropicGateway(t, `
policies:
  - {name: otpm, key: [tenant], unit: output_tokens, algorithm: token_bucket, limit: 4, per: 1m}
`, false, func(g *gateway.Config, u *upstream.Config) {
		g.ChargeInterval, g.MaxOutputReserve, u.TokensPerSecond = time.Millisecond, 1, 200
	})
	c := s.client(keyA, option.WithHeader("X-Sim-Tokens", "40"))
	st := c.Messages.NewStreaming(ctxT(t, 10*time.Second), anthropic.MessageNewParams{
		Model: claude, MaxTokens: 100, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	var msg anthropic.Message
	for st.Next() {
		if err := msg.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	var ae *anthropic.Error
	if err := st.Err(); !errors.As(err, &ae) || ae.Type() != "rate_limit_error" {
		t.Fatalf("stream error %v; want the SDK's rate_limit_error", err)
	}
	if len(msg.Content) == 0 || msg.Content[0].Text == "" || msg.StopReason != "" {
		t.Fatalf("message %+v: want some text and no stop", msg)
	}
	// The stream was charged past the limit: the partition is exhausted.
	resp, b := s.post(t, gateway.OpCountTokens, keyA, `{"model":"`+claude+`","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("count_tokens: %d %s", resp.StatusCode, b)
	}
	if got := remaining(t, resp.Header, "Output-Tokens"); got != 0 {
		t.Errorf("output-tokens remaining after the cut %d; want 0", got)
	}
}

// A cost quota on /v1/messages: the message is priced from the policy
// file's prices and settled at its usage's exact cost, cache reads at the
// cached price; a model without a price is refused in Anthropic's shape.
func TestMessagesCostSettlesExactly(t *testing.T) {
	s := anthropicGateway(t, `
policies:
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 100M}
prices:
  models:
    claude-sonnet-4-5: {input: 3, output: 15, cached_input: 0.3}
`, false)
	body := `{"model":"` + claude + `","max_tokens":100,"system":[{"type":"text","text":"` + strings.Repeat("Physics, patiently. ", 40) + `","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"Why is the sky blue?"}]}`
	resp, b := s.post(t, gateway.OpMessages, keyA, body, "X-Sim-Cache", "read")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var m struct {
		Usage struct {
			In     int64 `json:"input_tokens"`
			Write  int64 `json:"cache_creation_input_tokens"`
			Read   int64 `json:"cache_read_input_tokens"`
			Output int64 `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Usage.Read == 0 {
		t.Fatalf("usage %s (%v): want a cache read", b, err)
	}
	// Micro-dollars, rounded up: $3, $0.30 and $15 per million tokens.
	pico := (m.Usage.In+m.Usage.Write)*3_000_000 + m.Usage.Read*300_000 + m.Usage.Output*15_000_000
	cost := (pico + 999_999) / 1_000_000
	resp, b = s.post(t, gateway.OpCountTokens, keyA, `{"model":"`+claude+`","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("count_tokens: %d %s", resp.StatusCode, b)
	}
	want := `"spend";r=` + strconv.FormatInt(100_000_000-cost, 10) + ";"
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, want) {
		t.Errorf("after the message, RateLimit = %q; want %s… (cost %d µ$ of usage %+v)", got, want, cost, m.Usage)
	}
	resp, b = s.post(t, gateway.OpMessages, keyA, strings.Replace(body, claude, "claude-unpriced-9", 1))
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unpriced model: %d %s; want 400", resp.StatusCode, b)
	}
	if typ, msg := anthropicError(t, b); typ != "invalid_request_error" || !strings.Contains(msg, "price") {
		t.Errorf("unpriced model: %s %q; want invalid_request_error about the price", typ, msg)
	}
}

// The token units are the OpenAI routes' too: a chat completion is
// admitted on input_tokens and output_tokens and settled at its
// prompt_tokens and completion_tokens; its answer carries no
// anthropic-ratelimit-* header.
func TestChatCompletionsSettleTokenUnits(t *testing.T) {
	s := anthropicGateway(t, `
policies:
  - {name: itpm, key: [tenant], unit: input_tokens, algorithm: token_bucket, limit: 1000, per: 1m}
  - {name: otpm, key: [tenant], unit: output_tokens, algorithm: token_bucket, limit: 300, per: 1m}
`, false)
	resp, b := s.post(t, "/v1/chat/completions", keyA, chat)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if resp.Header.Get("Anthropic-Ratelimit-Input-Tokens-Remaining") != "" {
		t.Errorf("a chat completion carries anthropic-ratelimit-* headers: %v", resp.Header)
	}
	var m struct {
		Usage struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Usage.Prompt == 0 || m.Usage.Completion != 5 {
		t.Fatalf("usage %s (%v)", b, err)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL+gateway.OpModels, nil)
	req.Header.Set("Authorization", "Bearer "+keyA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := `"itpm";r=` + strconv.FormatInt(1000-m.Usage.Prompt, 10) + `;t=`
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, want) || !strings.Contains(got, `"otpm";r=295;`) {
		t.Errorf("after the completion, RateLimit = %q; want %s… and otpm 295", got, want)
	}
}

// spendPolicy is a monthly spend cap of $100, in micro-dollars.
const spendPolicy = `
policies:
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 100M}
`

// oneHourCost returns what a call costs in micro-dollars, rounded up,
// at input, five-minute cache-write, one-hour cache-write and output
// prices in micro-dollars per token: the arithmetic of the providers'
// bills, written out apart from the price table's.
func oneHourCost(uncached, write5m, write1h, output int64, input, price5m, price1h, out float64) int64 {
	pico := float64(uncached)*input*1e6 + float64(write5m)*price5m*1e6 + float64(write1h)*price1h*1e6 + float64(output)*out*1e6
	return (int64(pico) + 999_999) / 1_000_000
}

// The anthropic-sdk-go's messages, plain and streamed, with a system
// prompt cached for an hour (cache_control's ttl "1h"): the simulator
// reports the write as cache_creation.ephemeral_1h_input_tokens, and the
// gateway settles it at the one-hour cache-write price, twice the input
// price for the built-in Claude entries ($6 for Sonnet 4.5's $3), or the
// policy file's cache_write_1h; the spend left, as a count_tokens call
// (priced nothing) shows right after, is the cap less exactly that.
func TestMessagesSDKOneHourCacheWriteSettled(t *testing.T) {
	for _, tc := range []struct {
		name, prices string
		price1h      float64
	}{
		{"built-in price", "", 6},
		{"file's price", "prices:\n  models:\n    claude-sonnet-4-5: {input: 3, output: 15, cache_write: 3.75, cache_write_1h: 7.5}\n", 7.5},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name+"/stream="+strconv.FormatBool(stream), func(t *testing.T) {
				s := anthropicGateway(t, spendPolicy+tc.prices, false)
				c := s.client(keyA)
				ctx := ctxT(t, 10*time.Second)
				params := cachedParams()
				params.System[0].CacheControl = anthropic.CacheControlEphemeralParam{TTL: anthropic.CacheControlEphemeralTTLTTL1h}
				var msg anthropic.Message
				if stream {
					st := c.Messages.NewStreaming(ctx, params)
					for st.Next() {
						if err := msg.Accumulate(st.Current()); err != nil {
							t.Fatal(err)
						}
					}
					if err := st.Err(); err != nil {
						t.Fatal(err)
					}
				} else {
					m, err := c.Messages.New(ctx, params)
					if err != nil {
						t.Fatal(err)
					}
					msg = *m
				}
				u := msg.Usage
				if u.OutputTokens != 5 || u.CacheCreationInputTokens == 0 || u.CacheCreation.Ephemeral1hInputTokens != u.CacheCreationInputTokens ||
					u.CacheCreation.Ephemeral5mInputTokens != 0 || u.CacheReadInputTokens != 0 || u.InputTokens == 0 {
					t.Fatalf("usage %+v: want 5 tokens out and the system prompt written to the one-hour cache", u)
				}
				cost := oneHourCost(u.InputTokens, 0, u.CacheCreation.Ephemeral1hInputTokens, u.OutputTokens, 3, 3.75, tc.price1h, 15)
				if fiveMinutes := oneHourCost(u.InputTokens, u.CacheCreationInputTokens, 0, u.OutputTokens, 3, 3.75, tc.price1h, 15); cost <= fiveMinutes {
					t.Fatalf("the one-hour write costs %d µ$, the five-minute write %d µ$: want it dearer", cost, fiveMinutes)
				}

				var probe *http.Response
				if _, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
					Model:    claude,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
				}, option.WithResponseInto(&probe)); err != nil {
					t.Fatal(err)
				}
				want := `"spend";r=` + strconv.FormatInt(100_000_000-cost, 10) + ";"
				if got := probe.Header.Get("RateLimit"); !strings.HasPrefix(got, want) {
					t.Errorf("after the message, RateLimit = %q; want %s… (cost %d µ$ of usage %+v)", got, want, cost, u)
				}
			})
		}
	}
}
