package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// tokenQueueGateway serves a gateway with a fake clock whose provider
// budget is 600 tokens a minute with a queue of one, its simulator
// answering 3 tokens, for tenant acme (sk-acme).
func tokenQueueGateway(t *testing.T) (*providerGateway, *admissiontest.Clock) {
	clk := admissiontest.NewClock(time.Now())
	sim := upstream.New(upstream.Config{OutputTokens: 3}, upstream.WithClock(clk))
	pg := newProviderGateway(t, sim, `
stores:
  openai: {kind: upstream}
policies:
  - {name: provider-tpm, store: openai, key: [model], unit: tokens, algorithm: token_bucket, limit: 600, per: 1m, queue: {size: 1, timeout: 1h}}
tenants:
  acme: {api_keys: [`+apikey.Sum("sk-acme").String()+`]}
identity: {anonymous: deny}
`, clk)
	return pg, clk
}

// TestQueueFullHonestHint: a token budget's full queue answers with the
// time its rate takes to serve the waiters ahead (Retry-After and
// retry-after-ms), and a message in tokens, not the concurrency one.
func TestQueueFullHonestHint(t *testing.T) {
	pg, clk := tokenQueueGateway(t)
	// 590 of the 600 tokens: the next 13-token request waits.
	big := `{"model":"gpt-4o","max_tokens":583,"messages":[{"role":"user","content":"hi"}]}`
	if status, body, err := sendBody(pg.url, big); err != nil || status != 200 {
		t.Fatalf("status %d, %v: %s", status, err, body)
	}
	done := make(chan answer, 1)
	go func() {
		status, body, err := send(pg.url, false) // 7 + 5 tokens
		done <- answer{status, body, err}
	}()
	waitFor(t, "a request waiting", func() bool { return pg.ctl.Stats()[0].Queued == 1 })
	req, _ := http.NewRequest(http.MethodPost, pg.url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer sk-acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4096)
	n, _ := resp.Body.Read(b)
	resp.Body.Close()
	body := string(b[:n])
	ms, _ := strconv.Atoi(resp.Header.Get("Retry-After-Ms"))
	// The waiter's 13 tokens at 10 a second: 1.3 s.
	if resp.StatusCode != 429 || ms != 1300 || resp.Header.Get("Retry-After") != "2" ||
		!strings.Contains(body, `"type":"tokens"`) || !strings.Contains(body, "on tokens") || strings.Contains(body, "in flight") {
		t.Errorf("queue full: status %d, retry-after %q, retry-after-ms %q: %s; want 429, 2, 1300, a message and type in tokens",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After-Ms"), body)
	}
	clk.Advance(2 * time.Second)
	if a := <-done; a.err != nil || a.status != 200 {
		t.Errorf("the waiter: %d %v %s", a.status, a.err, a.body)
	}
}

// TestQueueFullHoldsRetry: once a tenant's clients number their retries
// (X-Stainless-Retry-Count, as the SDKs do), a full queue's refusal holds
// a place for the retry and says so (X-Retry-Held): the next hint counts
// it, a new request finds the tenant's part taken, and the retry at its
// hint takes its place and is served.
func TestQueueFullHoldsRetry(t *testing.T) {
	pg, clk := tokenQueueGateway(t)
	big := `{"model":"gpt-4o","max_tokens":583,"messages":[{"role":"user","content":"hi"}]}`
	if status, body, err := sendBody(pg.url, big); err != nil || status != 200 {
		t.Fatalf("status %d, %v: %s", status, err, body)
	}
	type reply struct {
		status   int
		ms, held string
		err      error
	}
	// call sends a 13-token request, numbered as retry count when not "".
	call := func(count string) <-chan reply {
		out := make(chan reply, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, pg.url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer sk-acme")
			if count != "" {
				req.Header.Set("X-Stainless-Retry-Count", count)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				out <- reply{err: err}
				return
			}
			resp.Body.Close()
			out <- reply{resp.StatusCode, resp.Header.Get("Retry-After-Ms"), resp.Header.Get("X-Retry-Held"), nil}
		}()
		return out
	}
	want := func(what string, got reply, status int, ms, held string) {
		t.Helper()
		if got.err != nil || got.status != status || got.ms != ms || got.held != held {
			t.Errorf("%s: %+v; want status %d, retry-after-ms %q, X-Retry-Held %q", what, got, status, ms, held)
		}
	}
	waiter := call("")
	waitFor(t, "a request waiting", func() bool { return pg.ctl.Stats()[0].Queued == 1 })
	// The waiter's 13 tokens at 10 a second: 1.3 s; the retry's place is
	// held, and the next hint counts it.
	want("a numbered retry", <-call("1"), 429, "1300", "true")
	want("a new request", <-call(""), 429, "2600", "true")
	clk.Advance(1300 * time.Millisecond)
	want("the waiter", <-waiter, 200, "", "")
	// At 1.3 s the queue is empty, but acme's part is its places': a new
	// request is told to come after both (2.6 s and 3.9 s from the start).
	want("a new request at the retry's time", <-call(""), 429, "2600", "true")
	retry := call("1")
	waitFor(t, "the retry to take its place", func() bool { return pg.ctl.Stats()[0].Queued == 1 })
	clk.Advance(time.Second)
	want("the retry", <-retry, 200, "", "")
}
