package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sluicehq/sluice/admission/admissiontest"
)

// The official SDK's calls succeed through the proxy, and after each the
// tenant's token bucket is charged exactly the usage the upstream
// reported: the estimate reserved at admission is reconciled. The
// controller's clock is frozen so the bucket does not refill meanwhile.
func TestSDKCallsChargeUpstreamUsage(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := startProxy(t, func(o *options) { o.clock = clk })
	const tenant, policy = "globex", "tokens-per-minute"
	c := sdk(s, "sk-demo-globex")
	ctx := ctxT(t, 30*time.Second)

	left := remaining(t, s, tenant, policy)
	if left != 40000 {
		t.Fatalf("fresh bucket: remaining = %d; want 40000", left)
	}
	charged := func(what string, want int64) {
		t.Helper()
		// The handler settles once the upstream stream has ended, which
		// may be a moment after the client read its last byte: until
		// then the bucket holds the reservation, taken before the answer
		// began, which the settlement moves once (the clock is frozen,
		// nothing else does).
		got := remaining(t, s, tenant, policy)
		if reserved := got; left-got != want {
			eventually(t, time.Second, what+" settled", func() bool {
				got = remaining(t, s, tenant, policy)
				return got != reserved
			})
		}
		if left-got != want {
			t.Errorf("%s: bucket charged %d; want the upstream usage %d", what, left-got, want)
		}
		left = got
	}

	// Chat, not streaming.
	cc, err := c.Chat.Completions.New(ctx, chatParams("Say something about foxes."))
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	if cc.Usage.TotalTokens == 0 || len(cc.Choices) != 1 || cc.Choices[0].Message.Content == "" {
		t.Fatalf("chat: unexpected response %+v", cc)
	}
	charged("chat", cc.Usage.TotalTokens)

	// Chat, streaming, asking for usage: the client sees it.
	p := chatParams("Tell me a story.")
	p.StreamOptions.IncludeUsage = openai.Bool(true)
	st := c.Chat.Completions.NewStreaming(ctx, p)
	var usage int64
	var text strings.Builder
	for st.Next() {
		ch := st.Current()
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage.TotalTokens
		}
		for _, ch := range ch.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if usage == 0 || text.Len() == 0 {
		t.Fatalf("stream with include_usage: usage %d, text %q", usage, text.String())
	}
	charged("stream with include_usage", usage)

	// The same stream without asking: the proxy asks upstream, charges
	// the same, and the client does not see the usage chunk.
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	st = c.Chat.Completions.NewStreaming(ctx, p)
	chunks := 0
	for st.Next() {
		ch := st.Current()
		chunks++
		if len(ch.Choices) == 0 || ch.Usage.TotalTokens != 0 {
			t.Errorf("stream without include_usage: client saw a usage chunk %s", ch.RawJSON())
		}
	}
	if err := st.Err(); err != nil || chunks == 0 {
		t.Fatalf("stream: err %v, %d chunks", err, chunks)
	}
	charged("stream, usage injected", usage)

	// Legacy completions, not streaming and streaming (usage injected).
	cp := openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModelGPT3_5TurboInstruct,
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(12),
	}
	cmpl, err := c.Completions.New(ctx, cp)
	if err != nil || cmpl.Usage.TotalTokens == 0 || len(cmpl.Choices) == 0 {
		t.Fatalf("completions: %v %+v", err, cmpl)
	}
	charged("completions", cmpl.Usage.TotalTokens)
	cs := c.Completions.NewStreaming(ctx, cp)
	for cs.Next() {
		if len(cs.Current().Choices) == 0 {
			t.Errorf("completions stream: client saw a usage chunk %s", cs.Current().RawJSON())
		}
	}
	if err := cs.Err(); err != nil {
		t.Fatalf("completions stream: %v", err)
	}
	charged("completions stream, usage injected", cmpl.Usage.TotalTokens)

	// Embeddings.
	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: openai.EmbeddingModelTextEmbedding3Small,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first text to embed", "second one"}},
	})
	if err != nil {
		t.Fatalf("embeddings: %v", err)
	}
	if len(emb.Data) != 2 || len(emb.Data[0].Embedding) == 0 || emb.Usage.TotalTokens == 0 {
		t.Fatalf("embeddings: unexpected response %+v", emb)
	}
	charged("embeddings", emb.Usage.TotalTokens)

	// Responses, not streaming and streaming.
	rp := responses.ResponseNewParams{
		Model: openai.ChatModelGPT4oMini,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Write a haiku about queues.")},
	}
	r, err := c.Responses.New(ctx, rp)
	if err != nil {
		t.Fatalf("responses: %v", err)
	}
	if r.Usage.TotalTokens == 0 || r.OutputText() == "" {
		t.Fatalf("responses: unexpected response %+v", r)
	}
	charged("responses", r.Usage.TotalTokens)

	rs := c.Responses.NewStreaming(ctx, rp)
	usage = 0
	deltas := 0
	for rs.Next() {
		ev := rs.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas++
		case "response.completed":
			usage = ev.Response.Usage.TotalTokens
		}
	}
	if err := rs.Err(); err != nil || usage == 0 || deltas == 0 {
		t.Fatalf("responses stream: err %v, usage %d, %d deltas", err, usage, deltas)
	}
	charged("responses stream", usage)

	// Models: limited by requests only, never charged tokens.
	models, err := c.Models.List(ctx)
	if err != nil || len(models.Data) == 0 {
		t.Fatalf("models: %v (%d models)", err, len(models.Data))
	}
	charged("models", 0)

	// Every answer carried the limit headers.
	if inflight := inflight(t, s); inflight != 0 {
		t.Errorf("admission_inflight = %v after all calls ended; want 0", inflight)
	}
}

// Every response, admitted or not, carries the OpenAI-style and the IETF
// limit headers; resets are Go durations. The upstream key reaches the
// upstream and never a client, and the client's key never reaches the
// upstream.
func TestLimitHeadersAndKeys(t *testing.T) {
	s := startProxy(t,
		withPolicy(t, `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 2, per: 1m}
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
  - {name: tpm-candidate, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 10, per: 1m, mode: shadow}
`, []string{"a"}, "http: {shadow_header: true}\n"),
		func(o *options) { o.gw.UpstreamKey = "sk-upstream-secret" })
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	for i := range 3 {
		resp, b := post(t, s, "/v1/chat/completions", testKey("a"), body)
		if strings.Contains(string(b), "sk-upstream-secret") || strings.Contains(strings.Join(flatten(resp.Header), " "), "sk-upstream-secret") {
			t.Fatalf("response %d reveals the upstream key", i)
		}
		want := http.StatusOK
		if i == 2 {
			want = http.StatusTooManyRequests
			checkError(t, "third request", resp, b, want, "rate_limit_exceeded")
			if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Retry-After-Ms") == "" {
				t.Errorf("429 lacks Retry-After or retry-after-ms: %v", resp.Header)
			}
		} else if resp.StatusCode != want {
			t.Fatalf("request %d: status %d; want %d: %s", i, resp.StatusCode, want, b)
		}
		for _, h := range []string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", "RateLimit-Policy", "RateLimit"} {
			if resp.Header.Get(h) == "" {
				t.Errorf("request %d: no %s header", i, h)
			}
		}
		if i < 2 {
			if got := resp.Header.Get("Sluice-Would-Reject"); !strings.Contains(got, "tpm-candidate") {
				t.Errorf("request %d: Sluice-Would-Reject = %q; want the shadow policy", i, got)
			}
			if got := resp.Header.Get("RateLimit-Policy"); strings.Contains(got, "tpm-candidate") {
				t.Errorf("request %d: RateLimit-Policy names the shadow policy: %s", i, got)
			}
			for _, h := range []string{"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"} {
				if resp.Header.Get(h) == "" {
					t.Errorf("request %d: no %s header", i, h)
				}
			}
			if got, want := resp.Header.Get("x-ratelimit-remaining-requests"), []string{"1", "0"}[i]; got != want {
				t.Errorf("request %d: x-ratelimit-remaining-requests = %s; want %s", i, got, want)
			}
		}
		for _, h := range []string{"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"} {
			if v := resp.Header.Get(h); v != "" {
				if _, err := time.ParseDuration(v); err != nil {
					t.Errorf("%s = %q is not a Go duration", h, v)
				}
			}
		}
	}
	// The request bucket refills one request per 30s: the reset of an
	// empty bucket of 2 is a minute.
	resp, _ := post(t, s, "/v1/chat/completions", testKey("a"), body)
	if v := resp.Header.Get("x-ratelimit-reset-requests"); !strings.HasPrefix(v, "59.") && v != "1m0s" && !strings.HasPrefix(v, "1m0") {
		t.Errorf("x-ratelimit-reset-requests = %q; want about 1m0s", v)
	}
	for _, seen := range s.sim.Seen() {
		if seen.Auth != "Bearer sk-upstream-secret" {
			t.Errorf("upstream saw Authorization %q; want the upstream key", seen.Auth)
		}
	}
	// Azure OpenAI's header: the key itself, and no Authorization.
	az := startProxy(t, withPolicy(t, `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 10, per: 1m}
`, []string{"a"}, ""), func(o *options) { o.gw.UpstreamKey, o.gw.UpstreamKeyHeader = "azure-secret", "api-key" })
	if resp, b := post(t, az, "/v1/chat/completions", testKey("a"), body); resp.StatusCode != http.StatusOK {
		t.Fatalf("with api-key: status %d: %s", resp.StatusCode, b)
	}
	if seen := az.sim.Seen(); len(seen) != 1 || seen[0].Auth != "" || seen[0].APIKey != "azure-secret" {
		t.Errorf("upstream saw %+v; want api-key: azure-secret and no Authorization", seen)
	}
	// Health and metrics are never limited.
	for i := range 20 {
		for _, p := range []string{s.URL + "/healthz", s.URL + "/readyz", s.OpsURL + "/metrics"} {
			r, err := http.Get(p)
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
			if r.StatusCode != http.StatusOK {
				t.Fatalf("GET %s #%d: status %d", p, i, r.StatusCode)
			}
		}
	}
}

func flatten(h http.Header) []string {
	var out []string
	for k, vs := range h {
		out = append(out, k+": "+strings.Join(vs, ","))
	}
	return out
}

// The SDK's own retry against the proxy's 429: it waits at least the
// retry-after-ms the proxy sent and then succeeds. When the proxy says
// x-should-retry: false (a quota exhausted for the month) it does not
// retry at all.
func TestSDKRetryHonoursHints(t *testing.T) {
	s := startProxy(t, withPolicy(t, `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 2, per: 1s}
  - name: monthly-tokens
    match: {routes: [/v1/embeddings]}
    key: [tenant]
    unit: tokens
    algorithm: quota
    period: month
    limit: 30
`, []string{"a"}, "http: {quota_status: 429}\n"))
	var mu sync.Mutex
	type attempt struct {
		at     time.Time
		status int
		hdr    http.Header
	}
	var attempts []attempt
	record := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if err == nil {
			mu.Lock()
			attempts = append(attempts, attempt{time.Now(), resp.StatusCode, resp.Header.Clone()})
			mu.Unlock()
		}
		return resp, err
	})
	c := sdk(s, testKey("a"), option.WithMaxRetries(3), record)
	ctx := ctxT(t, 30*time.Second)
	for i := range 2 {
		if _, err := c.Chat.Completions.New(ctx, chatParams("hi")); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	mu.Lock()
	attempts = nil
	mu.Unlock()
	if _, err := c.Chat.Completions.New(ctx, chatParams("hi")); err != nil {
		t.Fatalf("call after the bucket emptied: the SDK's retry did not succeed: %v", err)
	}
	mu.Lock()
	got := attempts
	mu.Unlock()
	if len(got) < 2 || got[0].status != http.StatusTooManyRequests || got[len(got)-1].status != http.StatusOK {
		t.Fatalf("attempts %v; want a 429 then, after retries, 200", got)
	}
	ms, err := time.ParseDuration(got[0].hdr.Get("Retry-After-Ms") + "ms")
	if err != nil || ms <= 0 || ms > time.Second {
		t.Fatalf("retry-after-ms = %q; want 1..1000", got[0].hdr.Get("Retry-After-Ms"))
	}
	if waited := got[1].at.Sub(got[0].at); waited < ms-5*time.Millisecond {
		t.Errorf("the SDK retried after %v; the proxy asked for %v", waited, ms)
	}
	if v := got[0].hdr.Get("X-Should-Retry"); v != "true" {
		t.Errorf("a short rate-limit wait carries x-should-retry %q; want true", v)
	}

	// The monthly quota: 30 tokens; the first call fits, the second
	// cannot until next month.
	emb := openai.EmbeddingNewParams{
		Model: openai.EmbeddingModelTextEmbedding3Small,
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(strings.Repeat("word ", 20))},
	}
	time.Sleep(time.Second) // let the request bucket refill
	if _, err := c.Embeddings.New(ctx, emb); err != nil {
		t.Fatalf("first embedding: %v", err)
	}
	mu.Lock()
	attempts = nil
	mu.Unlock()
	_, err = c.Embeddings.New(ctx, emb)
	if statusOf(err) != http.StatusTooManyRequests || codeOf(err) != "quota_exceeded" {
		t.Fatalf("second embedding: err %v; want 429 quota_exceeded", err)
	}
	mu.Lock()
	got = attempts
	mu.Unlock()
	if len(got) != 1 {
		t.Errorf("the SDK made %d attempts against x-should-retry: false; want 1", len(got))
	}
	if len(got) > 0 && got[0].hdr.Get("X-Should-Retry") != "false" {
		t.Errorf("quota rejection: x-should-retry = %q; want false", got[0].hdr.Get("X-Should-Retry"))
	}
}

// A request larger than a limit could ever admit is refused with
// x-should-retry: false at once.
func TestHopelessRequestIsNotRetried(t *testing.T) {
	s := startProxy(t, withPolicy(t, `
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 1000, per: 1m}
`, []string{"a"}, ""))
	resp, b := post(t, s, "/v1/chat/completions", testKey("a"),
		`{"model":"gpt-4o-mini","max_tokens":5000,"messages":[{"role":"user","content":"hi"}]}`)
	checkError(t, "oversized estimate", resp, b, http.StatusTooManyRequests, "tokens_limit_exceeded")
	if resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("x-should-retry = %q; want false", resp.Header.Get("X-Should-Retry"))
	}
	if resp.Header.Get("x-ratelimit-limit-tokens") != "1000" {
		t.Errorf("x-ratelimit-limit-tokens = %q; want 1000", resp.Header.Get("x-ratelimit-limit-tokens"))
	}
	_ = context.Background
}
