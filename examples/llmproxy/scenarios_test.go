package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

// Noisy neighbour: tenant A bursts 50 chat calls, then tenant B sends
// one. A is limited (429 with the limit headers); B never sees a 429, and
// waits for at most one of A's calls, never behind A's backlog, because
// the shared upstream capacity queue is served round robin across
// tenants. The controller's clock is fake and never moves (the rate
// limit does not refill, no queue times out), and the upstream holds
// every call until the test releases it, so the order in which calls
// reach it is the queue's, whatever the machine's pace.
func TestNoisyNeighbour(t *testing.T) {
	g := &heldUpstream{next: upstream.New(upstream.Config{}), release: make(chan struct{})}
	up := httptest.NewServer(g)
	t.Cleanup(up.Close)
	s := startProxy(t, withPolicy(t, `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 40, per: 1m}
  - name: upstream-capacity
    key: [global]
    algorithm: concurrency
    limit: 4
    queue: {size: 64, timeout: 20s}
`, []string{"a", "b"}, ""), pointAt(up.URL+"/v1"), func(o *options) {
		o.clock = admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	})
	body := func(user string) string {
		return `{"model":"gpt-4o-mini","user":"` + user + `","messages":[{"role":"user","content":"hello"}]}`
	}
	// B alone, served at once.
	for range 3 {
		resp, b := post(t, s, "/v1/chat/completions", testKey("b"), body("b"))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("B alone: status %d: %s", resp.StatusCode, b)
		}
		// X-RateLimit-* describe one policy, the request rate, not the
		// upstream cap of 4 while it has room.
		h := resp.Header
		if got := h.Get("X-Ratelimit-Limit") + "/" + h.Get("X-Ratelimit-Remaining"); got != h.Get("x-ratelimit-limit-requests")+"/"+h.Get("x-ratelimit-remaining-requests") {
			t.Errorf("B alone: X-Ratelimit-Limit/Remaining = %s; want the requests policy's %s/%s", got,
				h.Get("x-ratelimit-limit-requests"), h.Get("x-ratelimit-remaining-requests"))
		}
	}
	g.hold.Store(true)
	queued := func() int {
		for _, st := range s.ctl.Stats() {
			if st.Name == "upstream-capacity" {
				return st.Queued
			}
		}
		return -1
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var aOK, a429 int
	for range 50 {
		wg.Go(func() {
			resp, b := post(t, s, "/v1/chat/completions", testKey("a"), body("a"))
			mu.Lock()
			defer mu.Unlock()
			switch h := resp.Header; resp.StatusCode {
			case http.StatusOK:
				aOK++
			case http.StatusTooManyRequests:
				a429++
				if a429 == 1 {
					checkError(t, "A's 429", resp, b, http.StatusTooManyRequests, "rate_limit_exceeded")
					if h.Get("x-ratelimit-limit-requests") != "40" || h.Get("x-ratelimit-remaining-requests") != "0" {
						t.Errorf("A's 429: x-ratelimit-limit-requests %q remaining %q; want 40 and 0",
							h.Get("x-ratelimit-limit-requests"), h.Get("x-ratelimit-remaining-requests"))
					}
					if h.Get("Retry-After") == "" || h.Get("Retry-After-Ms") == "" || h.Get("RateLimit") == "" {
						t.Errorf("A's 429 lacks Retry-After, retry-after-ms or RateLimit: %v", h)
					}
				}
			default:
				t.Errorf("A: status %d: %s", resp.StatusCode, b)
			}
		})
	}
	// A's 40 admitted calls: 4 upstream, 36 queued; 10 refused.
	eventually(t, 5*time.Second, "A's burst refused, upstream or queued", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return a429 == 10 && g.held.Load() == 4 && queued() == 36
	})
	bDone := make(chan int, 1)
	wg.Go(func() {
		resp, b := post(t, s, "/v1/chat/completions", testKey("b"), body("b"))
		if resp.StatusCode != http.StatusOK {
			t.Errorf("B during A's burst: status %d: %s", resp.StatusCode, b)
		}
		bDone <- resp.StatusCode
	})
	eventually(t, 5*time.Second, "B's call queued behind A's 36", func() bool { return queued() == 37 })
	// Each call released frees a slot for the next in the queue: round
	// robin serves B after at most one of A's.
	released := 0
	for !slices.Contains(g.seen()[3:], "b") && released < 2 {
		g.release <- struct{}{}
		released++
		eventually(t, 5*time.Second, "the next call upstream", func() bool { return len(g.seen()) == 3+4+released })
	}
	order := g.seen()
	if first := slices.Index(order[3:], "b"); first < 0 || first > 4+1 {
		t.Errorf("upstream order %v: after %d of A's calls ended, B's call beside A has not reached the upstream; want it after at most one of A's 36 queued", order, released)
	}
	close(g.release)
	wg.Wait()
	if aOK != 40 || a429 != 10 {
		t.Errorf("A: %d admitted, %d rejected; want 40 and 10", aOK, a429)
	}
	if st := <-bDone; st != http.StatusOK {
		t.Errorf("B beside A: status %d; want 200", st)
	}
}

// heldUpstream is an upstream that records the "user" of every request
// and, while hold is set, holds it until a value is received from release
// (or release is closed) before next answers it.
type heldUpstream struct {
	next    http.Handler
	hold    atomic.Bool
	release chan struct{}
	held    atomic.Int64 // requests held now
	mu      sync.Mutex
	order   []string
}

func (h *heldUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		User string `json:"user"`
	}
	_ = json.Unmarshal(body, &req)
	h.mu.Lock()
	h.order = append(h.order, req.User)
	h.mu.Unlock()
	if h.hold.Load() {
		h.held.Add(1)
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
		h.held.Add(-1)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	h.next.ServeHTTP(w, r)
}

// seen returns the users of the requests received, in order.
func (h *heldUpstream) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.order)
}

// A policy in shadow produces would-reject metrics and no 429s; editing
// the file to enforce it (hot reload) makes the same traffic receive 429s.
func TestShadowThenEnforceByEditingTheFile(t *testing.T) {
	const policies = `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1000, per: 1m}
  - name: tpm-candidate
    match: {routes: [/v1/chat/completions], methods: [POST]}
    key: [tenant]
    unit: tokens
    algorithm: token_bucket
    limit: 300
    per: 1m
    mode: %s
`
	opt := withPolicy(t, fmt.Sprintf(policies, "shadow"), []string{"a"}, "")
	var path string
	s := startProxy(t, opt, func(o *options) { path = o.configPath })
	body := `{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"hello there"}]}`
	send := func() (ok, limited int) {
		for range 15 {
			resp, b := post(t, s, "/v1/chat/completions", testKey("a"), body)
			switch resp.StatusCode {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				checkError(t, "enforced candidate", resp, b, http.StatusTooManyRequests, "tokens_limit_exceeded")
				// A tokens rejection carries the requests trio too.
				if resp.Header.Get("x-ratelimit-limit-tokens") != "300" || resp.Header.Get("x-ratelimit-limit-requests") != "1000" {
					t.Errorf("tokens 429: x-ratelimit-limit-tokens %q, x-ratelimit-limit-requests %q; want 300 and 1000",
						resp.Header.Get("x-ratelimit-limit-tokens"), resp.Header.Get("x-ratelimit-limit-requests"))
				}
				limited++
			default:
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
		}
		return ok, limited
	}
	if ok, limited := send(); limited != 0 || ok != 15 {
		t.Fatalf("in shadow: %d ok, %d limited; want 15 and 0", ok, limited)
	}
	wouldReject := scrape(t, s, "admission_decisions_total", "policy", "tpm-candidate", "decision", "would_reject")
	if wouldReject == 0 {
		t.Fatalf("in shadow: no would_reject decisions in the metrics")
	}
	if r := scrape(t, s, "admission_decisions_total", "decision", "rejected"); r != 0 {
		t.Fatalf("in shadow: %v rejected decisions; want 0", r)
	}
	// The rollout report says what enforcing would do, and to whom, on
	// the operator listener only.
	resp, err := http.Get(s.OpsURL + "/debug/rollout")
	if err != nil {
		t.Fatal(err)
	}
	report, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "if enforced now, policy tpm-candidate would reject"; !strings.Contains(string(report), want) ||
		!strings.Contains(string(report), "of them from tenant a") {
		t.Errorf("rollout report:\n%s\nwant %q ... from tenant a", report, want)
	}

	if resp, _ := post(t, s, "/v1/chat/completions", testKey("b"), body); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("tenant b before it is in the file: status %d; want 401", resp.StatusCode)
	}
	// Enforce the candidate, and add tenant b with its key.
	writePolicy(t, path, fmt.Sprintf(policies, "enforce"), []string{"a", "b"}, "")
	eventually(t, 10*time.Second, "the edited file is applied", func() bool {
		for _, p := range s.ctl.Policies() {
			if p.Name == "tpm-candidate" {
				return p.Mode == limits.Enforce
			}
		}
		return false
	})
	if _, limited := send(); limited == 0 {
		t.Fatalf("enforced: the same traffic got no 429")
	}
	if resp, b := post(t, s, "/v1/chat/completions", testKey("b"), body); resp.StatusCode != http.StatusOK {
		t.Fatalf("tenant b after the reload: status %d: %s", resp.StatusCode, b)
	}
	t.Logf("would_reject in shadow: %v", wouldReject)
}

// streamResult is how one SDK stream ended.
type streamResult struct {
	chunks int
	err    error
}

func runStream(ctx context.Context, c openai.Client, p openai.ChatCompletionNewParams, firstChunk func()) streamResult {
	st := c.Chat.Completions.NewStreaming(ctx, p)
	defer st.Close()
	var r streamResult
	for st.Next() {
		if len(st.Current().Choices) > 0 && st.Current().Choices[0].Delta.Content != "" {
			r.chunks++
			if r.chunks == 1 && firstChunk != nil {
				firstChunk()
			}
		}
	}
	r.err = st.Err()
	return r
}

// Concurrency: 20 parallel long streams against a per-tenant cap of 4 with
// a queue of 8: never more than 4 upstream at once, 8 wait, the other 8
// get 429 at once. The controller's clock is fake and never moves, so no
// queue timeout can fire, and the upstream's streams go on until the test
// finishes them: the 8 refusals come while the first 4 still hold their
// permits, so they were refused on arrival, not after a wait.
func TestStreamsAgainstConcurrencyCap(t *testing.T) {
	s := startProxy(t, withPolicy(t, `
  - name: tenant-concurrency
    key: [tenant]
    algorithm: concurrency
    limit: 4
    queue: {size: 8, timeout: 20s}
`, []string{"a"}, ""), func(o *options) {
		o.clock = admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		o.simRate, o.simTokens = 100, 1_000_000 // until FinishStreams
	})
	c := sdk(s, testKey("a"))
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	results := make([]streamResult, 20)
	var refused atomic.Int64
	for i := range results {
		wg.Go(func() {
			results[i] = runStream(ctx, c, chatParams("a long story"), nil)
			if statusOf(results[i].err) == http.StatusTooManyRequests {
				refused.Add(1)
			}
		})
	}
	held := func() (inflight int64, queued int) {
		for _, st := range s.ctl.Stats() {
			if st.Name == "tenant-concurrency" {
				return st.InFlight, st.Queued
			}
		}
		t.Fatal("no stats for policy tenant-concurrency")
		return 0, 0
	}
	eventually(t, 5*time.Second, "every stream upstream, queued or refused", func() bool {
		_, queued := held()
		return s.sim.InFlight()+int64(queued)+refused.Load() == int64(len(results))
	})
	inflight, queued := held()
	if up, r := s.sim.InFlight(), refused.Load(); up != 4 || inflight != 4 || queued != 8 || r != 8 {
		t.Errorf("before any stream ended: %d streams upstream (%d permits held), %d queued, %d refused; want 4 (4), 8 and 8", up, inflight, queued, r)
	}
	s.sim.FinishStreams()
	wg.Wait()
	var ok, rejected int
	for i, r := range results {
		switch {
		case r.err == nil:
			ok++
		case statusOf(r.err) == http.StatusTooManyRequests && codeOf(r.err) == "concurrency_limit_exceeded":
			rejected++
		default:
			t.Errorf("stream %d: %d chunks, err %v", i, r.chunks, r.err)
		}
	}
	if ok != 12 || rejected != 8 {
		t.Errorf("%d streams completed, %d rejected; want 12 (4 running + 8 queued) and 8", ok, rejected)
	}
	if m := s.sim.MaxInFlight(); m > 4 {
		t.Errorf("the upstream saw %d streams at once; want at most 4", m)
	}
}

// A client that disconnects frees its concurrency slot at once: a queued
// stream starts right away, the upstream call is cancelled, and nothing is
// left in flight. The controller's clock is fake and never moves, and the
// upstream's streams never end by themselves: the cancellation is the
// only thing that can start the queued stream.
func TestDisconnectFreesSlot(t *testing.T) {
	s := startProxy(t, withPolicy(t, `
  - name: tenant-concurrency
    key: [tenant]
    algorithm: concurrency
    limit: 4
    queue: {size: 8, timeout: 20s}
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 1M, per: 1m}
`, []string{"a"}, ""), func(o *options) {
		o.clock = admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		o.simRate, o.simTokens = 100, 1_000_000
	})
	c := sdk(s, testKey("a"))
	ctx := ctxT(t, 30*time.Second)
	var started sync.WaitGroup
	cancels := make([]context.CancelFunc, 4)
	var wg sync.WaitGroup
	for i := range cancels {
		sctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		started.Add(1)
		wg.Go(func() { runStream(sctx, c, chatParams("long"), started.Done) })
	}
	started.Wait()
	fifth := make(chan struct{})
	fctx, fcancel := context.WithCancel(ctx)
	wg.Go(func() { runStream(fctx, c, chatParams("queued"), func() { close(fifth) }) })
	eventually(t, 5*time.Second, "the fifth stream queues", func() bool {
		return scrape(t, s, "admission_queue_depth", "policy", "tenant-concurrency") == 1
	})
	if v := scrape(t, s, "admission_inflight", "policy", "tenant-concurrency"); v != 4 {
		t.Errorf("admission_inflight{policy=tenant-concurrency} = %v with 4 streams running; want 4", v)
	}
	select {
	case <-fifth:
		t.Fatal("the queued stream started while 4 streams held the 4 permits")
	default:
	}
	cancels[0]()
	eventually(t, 5*time.Second, "the queued stream starts after a client left", func() bool {
		select {
		case <-fifth:
			return true
		default:
			return false
		}
	})
	for _, cancel := range cancels[1:] {
		cancel()
	}
	fcancel()
	wg.Wait()
	eventually(t, 5*time.Second, "upstream calls cancelled", func() bool { return s.sim.InFlight() == 0 })
	eventually(t, 5*time.Second, "no permits in flight", func() bool { return inflight(t, s) == 0 })
	if n := scrape(t, s, "llmproxy_client_cancels_total"); n < 5 {
		t.Errorf("llmproxy_client_cancels_total = %v; want 5", n)
	}
}

// Streams are charged as they go: 10 parallel long streams that reserve
// little at admission cannot overshoot a tokens-per-minute limit by more
// than about one charging interval's output each; they are cut with a
// final error event when the limit runs out.
func TestStreamsChargedAsTheyGo(t *testing.T) {
	const (
		limit    = 1000
		rate     = 200 // tokens per second per stream
		interval = 100 * time.Millisecond
		streams  = 10
	)
	s := startProxy(t, withPolicy(t, fmt.Sprintf(`
  - name: tpm
    match: {routes: [/v1/chat/completions], methods: [POST]}
    key: [tenant]
    unit: tokens
    algorithm: token_bucket
    limit: %d
    per: 1m
`, limit), []string{"a"}, ""), func(o *options) {
		o.simRate, o.simTokens = rate, 600
		o.gw.MaxOutputReserve = 10
		o.gw.ChargeInterval = interval
	})
	c := sdk(s, testKey("a"))
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	results := make([]streamResult, streams)
	start := time.Now()
	for i := range results {
		wg.Go(func() { results[i] = runStream(ctx, c, chatParams("go on"), nil) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	total, cut := 0, 0
	for i, r := range results {
		total += r.chunks
		var se *ssestream.StreamError
		switch {
		case errors.As(r.err, &se) && strings.Contains(se.Message, "tokens_limit_exceeded"):
			cut++
		case r.err != nil:
			t.Errorf("stream %d: %v", i, r.err)
		}
	}
	perInterval := int(rate * interval.Seconds())
	refill := int(float64(limit) * elapsed.Minutes())
	bound := limit + refill + streams*perInterval*2
	t.Logf("%d streams produced %d tokens in %v (limit %d, refill %d, bound %d); %d cut", streams, total, elapsed, limit, refill, bound, cut)
	if total > bound {
		t.Errorf("streams produced %d tokens; want at most %d (limit + refill + 2 intervals per stream)", total, bound)
	}
	if total < limit*8/10 {
		t.Errorf("streams produced only %d tokens of a %d limit", total, limit)
	}
	if cut == 0 {
		t.Errorf("no stream was cut off")
	}
	if n := scrape(t, s, "llmproxy_streams_cut_total", "reason", "tokens_limit_exceeded"); int(n) != cut {
		t.Errorf("llmproxy_streams_cut_total = %v; want %d", n, cut)
	}
}

// Bad input gets the right 4xx in the OpenAI error shape, never a 500, and
// no tokens are charged for a request refused before it was priced.
func TestBadInput(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := startProxy(t, withPolicy(t, `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 100, per: 1m}
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
`, []string{"a"}, "http: {max_body: 64KiB}\n"), func(o *options) { o.clock = clk })
	key := testKey("a")
	decisions := func() float64 { return scrape(t, s, "admission_decisions_total") }
	before := decisions()
	tokens := remaining(t, s, "a", "tpm")
	before = decisions() // the probe's own decisions
	huge := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("x", 100<<10) + `"}]}`
	for _, tc := range []struct {
		name, path, key, body string
		status                int
		code                  string
	}{
		{"malformed JSON", "/v1/chat/completions", key, `{"model":"gpt-4o-mini","messages":[`, 400, "invalid_json"},
		{"not an object", "/v1/chat/completions", key, `[1,2,3]`, 400, "invalid_json"},
		{"wrong type", "/v1/chat/completions", key, `{"model":"gpt-4o-mini","messages":"hello"}`, 400, "invalid_type"},
		{"negative max_tokens", "/v1/chat/completions", key, `{"model":"gpt-4o-mini","max_tokens":-1,"messages":[]}`, 400, "invalid_type"},
		{"embeddings wrong type", "/v1/embeddings", key, `{"model":"text-embedding-3-small","input":{"a":1}}`, 400, "invalid_type"},
		{"oversized body", "/v1/chat/completions", key, huge, 413, "request_too_large"},
		{"missing key", "/v1/chat/completions", "", `{"model":"gpt-4o-mini","messages":[]}`, 401, "missing_api_key"},
		{"unknown key", "/v1/chat/completions", "sk-nope", `{"model":"gpt-4o-mini","messages":[]}`, 401, "invalid_api_key"},
		{"unknown route", "/v1/nothing", key, `{}`, 404, "unknown_url"},
	} {
		resp, b := post(t, s, tc.path, tc.key, tc.body)
		checkError(t, tc.name, resp, b, tc.status, tc.code)
	}
	// An oversized body sent without a length is cut at the cap.
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", io.MultiReader(strings.NewReader(huge)))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	checkError(t, "oversized chunked body", resp, b, 413, "request_too_large")

	// The request rate is decided before a body is read, so each of the six
	// requests whose body was read (five malformed, one oversized without a
	// length) counts once against rpm, as any request does; the key and
	// route refusals, and the body refused by its Content-Length, count
	// nowhere, and the token policy never sees any of them.
	if after := decisions(); after-before != 6 {
		t.Errorf("refused requests made %v decisions; want 6 (one rpm decision per body read)", after-before)
	}
	if got := remaining(t, s, "a", "tpm"); got != tokens {
		t.Errorf("tokens charged for refused requests: %d", tokens-got)
	}
	// An unknown model is the upstream's 404, and costs no tokens.
	cl := sdk(s, key)
	_, err = cl.Chat.Completions.New(ctxT(t, 10*time.Second), openai.ChatCompletionNewParams{
		Model: "gpt-nonexistent", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	if statusOf(err) != http.StatusNotFound || codeOf(err) != "model_not_found" {
		t.Errorf("unknown model: %v; want 404 model_not_found", err)
	}
	if got := remaining(t, s, "a", "tpm"); got != tokens {
		t.Errorf("tokens charged for an unknown model: %d", tokens-got)
	}
	// Wrong method on a route.
	r2, err := http.Get(s.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(r2.Body)
	r2.Body.Close()
	checkError(t, "GET on a POST route", r2, b, 405, "method_not_allowed")
}

// Upstream failures: a timeout, a refused connection, a 500, a body that
// is not JSON, a stream cut half-way, the provider's own 429 (passed
// through, counted apart). Each gets the right status, and no permit is
// left in flight afterwards.
func TestUpstreamFailures(t *testing.T) {
	const policies = `
  - name: tenant-concurrency
    key: [tenant]
    algorithm: concurrency
    limit: 4
    queue: {size: 8, timeout: 20s}
  - name: upstream-capacity
    key: [global]
    algorithm: concurrency
    limit: 16
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 1M, per: 1m}
`
	s := startProxy(t, withPolicy(t, policies, []string{"a"}, ""), func(o *options) {
		o.gw.Timeout = 300 * time.Millisecond
		o.simRate, o.simTokens = 200, 40
	})
	key := testKey("a")
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	stream := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, body, fault string
		status            int
		code              string
	}{
		{"timeout", chat, "hang", 504, "upstream_timeout"},
		{"stream timeout", stream, "hang", 504, "upstream_timeout"},
		{"500", chat, "500", 500, ""},
		{"garbage", chat, "garbage", 502, "bad_upstream_response"},
		{"provider 429", chat, "429", 429, "rate_limit_exceeded"},
		{"upstream refuses the gateway's key", chat, "401", 502, "upstream_unauthorized"},
	} {
		resp, b := post(t, s, "/v1/chat/completions", key, tc.body, "X-Sim-Fault", tc.fault)
		checkError(t, tc.name, resp, b, tc.status, tc.code)
		if strings.Contains(string(b), "org-") {
			t.Errorf("%s: the answer names the provider's account: %s", tc.name, b)
		}
		if tc.fault == "429" && (resp.Header.Get("Retry-After") != "1" || resp.Header.Get("x-ratelimit-limit-tokens") != "1000000") {
			t.Errorf("provider 429: Retry-After %q, x-ratelimit-limit-tokens %q; want the provider's hint and the proxy's limits",
				resp.Header.Get("Retry-After"), resp.Header.Get("x-ratelimit-limit-tokens"))
		}
	}
	if n := scrape(t, s, "llmproxy_upstream_throttled_total"); n != 1 {
		t.Errorf("llmproxy_upstream_throttled_total = %v; want 1", n)
	}
	if n := scrape(t, s, "llmproxy_rejections_total"); n != 0 {
		t.Errorf("llmproxy_rejections_total = %v; want 0 (the provider's 429 is not ours)", n)
	}

	// A stream cut half-way: the client gets the first half, then an error.
	r := runStream(ctxT(t, 10*time.Second), sdk(s, key, option.WithHeader("X-Sim-Fault", "cut")), chatParams("hi"), nil)
	var se *ssestream.StreamError
	if !errors.As(r.err, &se) || r.chunks == 0 || r.chunks >= 40 {
		t.Errorf("cut stream: %d chunks, err %v; want part of the output then a stream error", r.chunks, r.err)
	}

	// A refused connection.
	dead := startProxy(t, withPolicy(t, policies, []string{"a"}, ""), func(o *options) { o.gw.Upstream = "http://127.0.0.1:1/v1" })
	resp, b := post(t, dead, "/v1/chat/completions", key, chat)
	checkError(t, "connection refused", resp, b, 502, "upstream_unavailable")

	for _, x := range []*server{s, dead} {
		eventually(t, 5*time.Second, "no permits in flight", func() bool { return inflight(t, x) == 0 })
	}
	if n := scrape(t, s, "llmproxy_upstream_failures_total"); n < 4 {
		t.Errorf("llmproxy_upstream_failures_total = %v; want at least 4", n)
	}
}

// Shutdown drains: a stream in flight when the shutdown starts completes,
// and new connections are refused.
func TestGracefulShutdownDrainsStreams(t *testing.T) {
	s := startProxy(t, func(o *options) { o.simRate, o.simTokens = 50, 25 })
	c := sdk(s, "sk-demo-acme")
	first := make(chan struct{})
	res := make(chan streamResult, 1)
	go func() {
		res <- runStream(ctxT(t, 20*time.Second), c, chatParams("hi"), func() { close(first) })
	}()
	<-first
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.shutdown(ctx)
	}()
	r := <-res
	if r.err != nil || r.chunks != 25 {
		t.Errorf("stream during shutdown: %d chunks, err %v; want all 25", r.chunks, r.err)
	}
	if err := <-shut; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if _, err := http.Get(s.URL + "/healthz"); err == nil {
		t.Errorf("the proxy still accepts connections after shutdown")
	}
}

// With no arguments the proxy listens on 127.0.0.1:8080 with the embedded
// policy and the simulator; run prints the demo keys and serves them.
func TestRunWithDefaults(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.addr != "127.0.0.1:8080" || o.configPath != "" || o.gw.Upstream != "" {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--sim-latency", "0"}, &out, io.Discard)
	}()
	var url string
	eventually(t, 10*time.Second, "the banner", func() bool {
		s := out.String()
		i := strings.Index(s, "listening on ")
		if i < 0 || !strings.Contains(s, "sk-demo-initech") {
			return false
		}
		url = strings.Fields(s[i+len("listening on "):])[0]
		return true
	})
	for _, k := range demoKeys {
		if !strings.Contains(out.String(), k) {
			t.Errorf("banner lacks demo key %s", k)
		}
	}
	if !strings.Contains(out.String(), "give the Anthropic SDKs the base URL "+url+", without /v1") {
		t.Errorf("the banner does not say which base URL the Anthropic SDKs take:\n%s", out.String())
	}
	cl := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("sk-demo-acme"), option.WithMaxRetries(0))
	if _, err := cl.Chat.Completions.New(ctxT(t, 10*time.Second), chatParams("hi")); err != nil {
		t.Errorf("chat with a demo key: %v", err)
	}
	// The simulator serves Bedrock's Converse API, the gateway signing
	// for it.
	req, _ := http.NewRequest(http.MethodPost, url+"/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse",
		strings.NewReader(`{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":20}}`))
	req.Header.Set("Authorization", "Bearer sk-demo-acme")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Error(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"outputTokens"`) {
			t.Errorf("Bedrock converse with a demo key: %d %s", resp.StatusCode, b)
		}
	}
	// initech's plan allows 5 requests a minute: the sixth is a 429.
	ci := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("sk-demo-initech"), option.WithMaxRetries(0))
	var last error
	for range 6 {
		_, last = ci.Models.List(ctxT(t, 10*time.Second))
	}
	if statusOf(last) != http.StatusTooManyRequests {
		t.Errorf("sixth request of initech: %v; want 429", last)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}

// A client that leaves mid-stream is charged for what was produced: the
// prompt and the output streamed so far, not the reservation.
func TestDisconnectSettlesWhatWasProduced(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := startProxy(t, withPolicy(t, `
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
`, []string{"a"}, ""), func(o *options) {
		o.clock = clk
		o.simRate, o.simTokens = 100, 3000
	})
	c := sdk(s, testKey("a"))
	ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
	defer cancel()
	p := chatParams("hi")
	p.MaxTokens = openai.Int(3000)
	got := 0
	st := c.Chat.Completions.NewStreaming(ctx, p)
	for st.Next() {
		if len(st.Current().Choices) > 0 && st.Current().Choices[0].Delta.Content != "" {
			got++
			if got == 20 {
				cancel()
			}
		}
	}
	st.Close()
	eventually(t, 5*time.Second, "the upstream call is cancelled", func() bool { return s.sim.InFlight() == 0 })
	// The reservation was about 3000 tokens; the client left after 20.
	var charged int64
	eventually(t, 5*time.Second, "the stream is settled", func() bool {
		charged = 100_000 - remaining(t, s, "a", "tpm")
		return charged < 3000
	})
	if charged < 20 || charged > 200 {
		t.Errorf("the abandoned stream was charged %d tokens; want the ~20 produced plus its prompt, not its 3000 reservation", charged)
	}
	t.Logf("abandoned stream charged %d tokens", charged)
}

// The upstream key comes from the environment.
func TestUpstreamKeyFromEnvironment(t *testing.T) {
	t.Setenv(UpstreamKeyEnv, "sk-from-env")
	o, err := parseFlags([]string{"--upstream", "http://127.0.0.1:1/v1", "--config", "x.yaml", "--addr", ":9"}, io.Discard)
	if err != nil || o.gw.UpstreamKey != "sk-from-env" || o.gw.Upstream != "http://127.0.0.1:1/v1" || o.configPath != "x.yaml" || o.addr != ":9" {
		t.Fatalf("parseFlags: %+v, %v", o, err)
	}
	if _, err := parseFlags([]string{"--cut-streams"}, io.Discard); err == nil {
		t.Error("a flag without its value was accepted")
	}
}

// The Bedrock upstream is signed with the credentials of the standard AWS
// variables, for the region of --bedrock-region, else $AWS_REGION.
func TestBedrockFromEnvironment(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-env")
	t.Setenv("AWS_SESSION_TOKEN", "token-env")
	t.Setenv("AWS_REGION", "eu-central-1")
	o, err := parseFlags([]string{"--bedrock-upstream", "https://bedrock-runtime.eu-central-1.amazonaws.com"}, io.Discard)
	if err != nil || o.gw.Bedrock.Credentials == nil || o.gw.Bedrock.Region != "eu-central-1" || o.gw.Bedrock.Upstream != "https://bedrock-runtime.eu-central-1.amazonaws.com" {
		t.Fatalf("parseFlags: %+v, %v", o.gw.Bedrock, err)
	}
	c, err := o.gw.Bedrock.Credentials.Retrieve(context.Background())
	if err != nil || c.AccessKeyID != "AKIDENV" || c.SecretAccessKey != "secret-env" || c.SessionToken != "token-env" {
		t.Errorf("credentials %+v, %v; want the environment's", c, err)
	}
	if o, _ := parseFlags([]string{"--bedrock-region", "ap-south-1"}, io.Discard); o.gw.Bedrock.Region != "ap-south-1" {
		t.Errorf("--bedrock-region: region %q", o.gw.Bedrock.Region)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if o, _ := parseFlags(nil, io.Discard); o.gw.Bedrock.Credentials != nil {
		t.Error("credentials without a secret key")
	}
}

// The Responses API's records and unknown chains are set by flags; a
// bound that is not positive is refused, never taken as its default.
func TestResponsesFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if r := o.gw.Responses; err != nil || r.AllowUnknownChains || r.MaxRecords != gateway.DefaultMaxResponseRecords ||
		r.MaxRecordsPerTenant != gateway.DefaultMaxResponseRecordsPerTenant || r.UnknownChainTokens != gateway.DefaultUnknownChainTokens {
		t.Errorf("defaults: %+v, %v", r, err)
	}
	o, err = parseFlags([]string{"--responses-allow-unknown-chains", "--responses-unknown-chain-tokens", "4096",
		"--responses-max-records", "500", "--responses-max-records-per-tenant", "50"}, io.Discard)
	if r := o.gw.Responses; err != nil || !r.AllowUnknownChains || r.UnknownChainTokens != 4096 || r.MaxRecords != 500 || r.MaxRecordsPerTenant != 50 {
		t.Errorf("set: %+v, %v", r, err)
	}
	for _, arg := range []string{"--responses-max-records=0", "--responses-max-records-per-tenant=-1", "--responses-unknown-chain-tokens=0"} {
		if _, err := parseFlags([]string{arg}, io.Discard); err == nil || !strings.Contains(err.Error(), "not positive") {
			t.Errorf("%s: %v; want refused", arg, err)
		}
	}
}

// A request that waits in a tenant's queue longer than the queue allows
// gets 429 queue_timeout, exactly when its timeout has passed on the
// controller's (fake) clock; a request refused by the shared upstream cap
// gets 503, since the proxy is overloaded, not the tenant over its limit.
// The upstream's streams go on until the test cancels them.
func TestQueueTimeoutAndSharedOverload(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	s := startProxy(t, withPolicy(t, `
  - name: tenant-concurrency
    key: [tenant]
    algorithm: concurrency
    limit: 1
    queue: {size: 2, timeout: 200ms}
  - name: upstream-capacity
    key: [global]
    algorithm: concurrency
    limit: 2
`, []string{"a", "b", "c"}, ""), func(o *options) {
		o.clock = clk
		o.simRate, o.simTokens = 100, 1_000_000
	})
	ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	stream := func(tenant string) {
		started := make(chan struct{})
		wg.Go(func() { runStream(ctx, sdk(s, testKey(tenant)), chatParams("long"), func() { close(started) }) })
		<-started
	}
	queued := func() int {
		for _, st := range s.ctl.Stats() {
			if st.Name == "tenant-concurrency" {
				return st.Queued
			}
		}
		return -1
	}
	stream("a")
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	type answer struct {
		resp *http.Response
		body []byte
		err  error
	}
	answered := make(chan answer, 1)
	go func() { // post fails the test, which only the test's goroutine may do
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testKey("a"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answered <- answer{resp, b, err}
	}()
	eventually(t, 5*time.Second, "the second request of a waits in the queue", func() bool { return queued() == 1 })
	// The clock's timers run within Advance: a queue timeout due by then
	// has removed its waiter when Advance returns.
	clk.Advance(200*time.Millisecond - time.Nanosecond)
	if n := queued(); n != 1 {
		t.Fatalf("%d requests queued 200ms less a nanosecond after the request queued; want 1 (timeout 200ms)", n)
	}
	clk.Advance(time.Nanosecond)
	if n := queued(); n != 0 {
		t.Fatalf("%d requests queued once the queue's timeout of 200ms has passed; want 0", n)
	}
	a := <-answered
	if a.err != nil {
		t.Fatalf("the request queued too long: %v", a.err)
	}
	checkError(t, "queued too long", a.resp, a.body, http.StatusTooManyRequests, "queue_timeout")
	stream("b")
	resp, b := post(t, s, "/v1/chat/completions", testKey("c"), body)
	checkError(t, "shared cap full", resp, b, http.StatusServiceUnavailable, "concurrency_limit_exceeded")
	cancel()
	wg.Wait()
	eventually(t, 5*time.Second, "no permits in flight", func() bool { return inflight(t, s) == 0 })
}

// Every flag the proxy takes is in the README's table of flags.
func TestEveryFlagDocumented(t *testing.T) {
	var usage strings.Builder
	if _, err := parseFlags([]string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(usage.String(), -1)
	if len(names) < 30 {
		t.Fatalf("read %d flags from the usage; want them all:\n%s", len(names), usage.String())
	}
	for _, m := range names {
		if !strings.Contains(string(readme), "`--"+m[1]+"`") {
			t.Errorf("--%s is not in README.md's table of flags", m[1])
		}
	}
}
