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
// budget is 600 tokens a minute with a queue of the given size (all of it
// one tenant's to fill), its simulator answering 3 tokens, for tenant acme
// (sk-acme).
func tokenQueueGateway(t *testing.T, queue int) (*providerGateway, *admissiontest.Clock) {
	clk := admissiontest.NewClock(time.Now())
	sim := upstream.New(upstream.Config{OutputTokens: 3}, upstream.WithClock(clk))
	pg := newProviderGateway(t, sim, `
stores:
  openai: {kind: upstream}
policies:
  - {name: provider-tpm, store: openai, key: [model], unit: tokens, algorithm: token_bucket, limit: 600, per: 1m, queue: {size: `+strconv.Itoa(queue)+`, per_tenant: `+strconv.Itoa(queue)+`, timeout: 1h}}
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
	pg, clk := tokenQueueGateway(t, 1)
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
	pg, clk := tokenQueueGateway(t, 2)
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
	queued := func(n int) func() bool {
		return func() bool { return pg.ctl.Stats()[0].Queued == n }
	}
	first := call("")
	waitFor(t, "a request waiting", queued(1))
	second := call("")
	waitFor(t, "two requests waiting", queued(2))
	// The waiters' 26 tokens at 10 a second: 2.6 s; the retry's place is
	// held, and the next hint counts it.
	want("a numbered retry", <-call("1"), 429, "2600", "true")
	want("a new request", <-call(""), 429, "3900", "true")
	clk.Advance(1300 * time.Millisecond)
	want("the first waiter", <-first, 200, "", "")
	// At 1.3 s one waiter and the places held fill acme's part: a new
	// request is told to come after the places (the second waiter's turn,
	// then the two places at 2.6 s and 3.9 s).
	want("a new request at 1.3 s", <-call(""), 429, "3900", "true")
	clk.Advance(1300 * time.Millisecond)
	want("the second waiter", <-second, 200, "", "")
	// At 2.6 s the retry's place is due: the retry takes it, and a new
	// request beside it finds acme's part full (told to come after the
	// retry and the two places left: 39 tokens).
	held := pg.ctl.Stats()[0].Held
	retry := call("1")
	waitFor(t, "the retry to take its place", queued(1))
	if got := pg.ctl.Stats()[0].Held; got != held-1 {
		t.Errorf("places held after the retry: %d; want %d", got, held-1)
	}
	want("a new request beside the retry", <-call(""), 429, "3900", "true")
	clk.Advance(1300 * time.Millisecond)
	want("the retry", <-retry, 200, "", "")
}
