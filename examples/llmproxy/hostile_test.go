package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
)

// smallChat is a valid chat request of a few tokens.
const smallChat = `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`

// pointAt points the proxy at the upstream.
func pointAt(url string) func(*options) {
	return func(o *options) { o.gw.Upstream = url }
}

// A reservation too large to represent never wraps: whatever max_tokens a
// tenant sends (in any number form), the answer is a 4xx, every advised
// wait is within the policy's horizon, and the other tenants of a global
// policy, and the tenant itself with a sane request, are admitted after.
func TestHugeReservationsNeverLockOut(t *testing.T) {
	up := newRecorder(t)
	s := startProxy(t, pointAt(up.URL), withPolicy(t, `
  - {name: tpm, key: [global], unit: tokens, algorithm: token_bucket, limit: 40k, per: 1m}
  - {name: tenant-tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 20k, per: 1m}
`, []string{"a", "b"}, ""))
	horizon := 2 * time.Minute // two refills of the bucket: its debt bound plus a full burst
	for _, mt := range []string{
		"9223372036854775807", "9223372036854775808", "18446744073709551615", "4611686018427387904",
		"1125899906842624", "1125899906842625", "9007199254740993",
		"1e18", "9.3e18", "1e30", "1E+300", "1e400", "-9223372036854775808", "-1", "4e15", "1.5e15",
	} {
		body := `{"model":"gpt-4o-mini","max_tokens":` + mt + `,"messages":[{"role":"user","content":"hi"}]}`
		resp, b := post(t, s, "/v1/chat/completions", testKey("a"), body)
		if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("max_tokens %s: status %d; want 400 or 429: %s", mt, resp.StatusCode, b)
		}
		checkRetryWithin(t, "max_tokens "+mt, resp, horizon)
		for _, tenant := range []string{"a", "b"} {
			resp, b := post(t, s, "/v1/chat/completions", testKey(tenant), `{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("after max_tokens %s, tenant %s: status %d; want 200: %s", mt, tenant, resp.StatusCode, b)
			}
		}
	}
	for _, p := range []string{"tpm", "tenant-tpm"} {
		if r := remaining(t, s, "a", p); r < 0 || r > 40_000 {
			t.Errorf("%s remaining = %d; want within [0, limit]", p, r)
		}
	}
}

// checkRetryWithin fails unless every wait resp advises is within d.
func checkRetryWithin(t testing.TB, what string, resp *http.Response, d time.Duration) {
	t.Helper()
	if v := resp.Header.Get("Retry-After"); v != "" {
		if secs, err := strconv.ParseInt(v, 10, 64); err != nil || time.Duration(secs)*time.Second > d+time.Second {
			t.Errorf("%s: Retry-After %q; want at most %v", what, v, d)
		}
	}
	if v := resp.Header.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err != nil || time.Duration(ms)*time.Millisecond > d {
			t.Errorf("%s: retry-after-ms %q; want at most %v", what, v, d)
		}
	}
}

// The usage an upstream reports is untrusted: an absurd, negative,
// malformed or missing figure still gives the client the upstream's
// answer, is charged as the request reserved (never nothing, never the
// absurd figure), and is counted; a figure in another number form is read.
func TestUntrustedUsageIsChargedAsReserved(t *testing.T) {
	up := newRecorder(t)
	s := startProxy(t, pointAt(up.URL), withPolicy(t, `
  - {name: tpm, key: [global], unit: tokens, algorithm: quota, period: month, limit: 1G} # counts exactly: no refill between the probes
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 5M}
`, []string{"a"}, ""))
	const req = `{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"user","content":"Hello there"}]}`
	// A bad count is replaced by the reservation's figure for that count
	// (the estimated prompt, about ten tokens; the output limit, 100), a
	// good one is kept.
	badPrompt := func(n int64) bool { return n >= 2 && n <= 30 }
	for _, tc := range []struct {
		name, usage string
		fallback    string // the reason counted, "" for none
		charged     func(int64) bool
	}{
		{"honest", `{"prompt_tokens":11,"completion_tokens":1,"total_tokens":12}`, "", func(n int64) bool { return n == 12 }},
		{"exponent form", `{"prompt_tokens":1.1e1,"completion_tokens":1.0,"total_tokens":12}`, "", func(n int64) bool { return n == 12 }},
		{"absurd prompt", `{"prompt_tokens":1000000000000000000,"completion_tokens":1,"total_tokens":1000000000000000001}`, "implausible_input", badPrompt},
		{"absurd prompt, exponent", `{"prompt_tokens":1e18,"completion_tokens":1}`, "implausible_input", badPrompt},
		{"negative prompt", `{"prompt_tokens":-1,"completion_tokens":1}`, "negative", badPrompt},
		{"not a number", `{"prompt_tokens":"lots","completion_tokens":1}`, "malformed", badPrompt},
		{"overflowing number", `{"prompt_tokens":1e400,"completion_tokens":1}`, "", badPrompt},
		{"absurd completion", `{"prompt_tokens":11,"completion_tokens":1e18}`, "implausible_output", reserved},
		{"negative completion", `{"prompt_tokens":11,"completion_tokens":-5}`, "negative", reserved},
		{"no usage", ``, "missing", reserved},
		{"usage not an object", `[1,2]`, "", reserved},
	} {
		up.setUsage(tc.usage)
		before := remaining(t, s, "a", "tpm")
		spendBefore := remaining(t, s, "a", "spend")
		var fbBefore float64
		if tc.fallback != "" {
			fbBefore = scrape(t, s, "llmproxy_usage_fallbacks_total", "reason", tc.fallback)
		}
		resp, b := post(t, s, "/v1/chat/completions", testKey("a"), req)
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"chat.completion"`)) {
			t.Errorf("%s: status %d, body %s; want the upstream's 200", tc.name, resp.StatusCode, b)
		}
		charged := before - remaining(t, s, "a", "tpm")
		if !tc.charged(charged) {
			t.Errorf("%s: charged %d tokens", tc.name, charged)
		}
		if spent := spendBefore - remaining(t, s, "a", "spend"); spent <= 0 || spent > 1000 {
			t.Errorf("%s: charged %d micro-dollars; want the small cost of at most the reservation", tc.name, spent)
		}
		if tc.fallback != "" {
			if got := scrape(t, s, "llmproxy_usage_fallbacks_total", "reason", tc.fallback) - fbBefore; got != 1 {
				t.Errorf("%s: llmproxy_usage_fallbacks_total{reason=%q} rose by %v; want 1", tc.name, tc.fallback, got)
			}
		}
	}
}

// reserved reports whether n tokens is what the test request reserves: its
// prompt (a dozen tokens) plus max_tokens 100.
func reserved(n int64) bool { return n >= 100 && n <= 130 }

// A model without a price is never free under a spend limit: a model of
// the built-in table and a fine-tuned one are charged their (base)
// price, an unknown one is refused with 400 unless the policy file names
// a fallback price, which is then charged.
func TestUnpricedModelsAreNotFree(t *testing.T) {
	up := newRecorder(t)
	up.setUsage(`{"prompt_tokens":1000,"completion_tokens":1000}`)
	const spend = "  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 100M}\n"
	chat := func(model string) string {
		return `{"model":"` + model + `","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
	}
	s := startProxy(t, pointAt(up.URL), withPolicy(t, spend, []string{"a"}, ""))
	for _, model := range []string{"o1-pro", "ft:gpt-4o-mini-2024-07-18:acme:custom:abc123", "gpt-4o-mini"} {
		before := remaining(t, s, "a", "spend")
		resp, b := post(t, s, "/v1/chat/completions", testKey("a"), chat(model))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", model, resp.StatusCode, b)
		}
		if spent := before - remaining(t, s, "a", "spend"); spent <= 0 {
			t.Errorf("%s: charged %d micro-dollars; want its price", model, spent)
		}
	}
	n := len(up.requests())
	for _, model := range []string{"my-local-llm", "ft:my-local-llm:acme::x", "o9-ultra"} {
		resp, b := post(t, s, "/v1/chat/completions", testKey("a"), chat(model))
		checkError(t, model, resp, b, http.StatusBadRequest, "model_not_priced")
	}
	if got := len(up.requests()); got != n {
		t.Errorf("the upstream received %d requests for unpriced models; want none", got-n)
	}

	// With a fallback price, the unknown model is charged that price:
	// 2000 tokens at $10 and $30 per million is 40,000 micro-dollars.
	s = startProxy(t, pointAt(up.URL), withPolicy(t, spend, []string{"a"},
		"prices:\n  unpriced: fallback\n  fallback: {input: 10, output: 30}\n"))
	before := remaining(t, s, "a", "spend")
	resp, b := post(t, s, "/v1/chat/completions", testKey("a"), chat("my-local-llm"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fallback price: status %d: %s", resp.StatusCode, b)
	}
	if spent := before - remaining(t, s, "a", "spend"); spent != 40_000 {
		t.Errorf("fallback price: charged %d micro-dollars; want 40000", spent)
	}
	if got := scrape(t, s, "llmproxy_prices_fallbacks_total"); got != 1 {
		t.Errorf("llmproxy_prices_fallbacks_total = %v; want 1", got)
	}
}

// A body whose pricing fields are ambiguous (a repeated key, a key in
// another case) is refused before it is priced or forwarded: the gateway
// never reserves for one reading while the upstream applies another.
func TestAmbiguousBodiesAreRefused(t *testing.T) {
	up := newRecorder(t)
	s := startProxy(t, pointAt(up.URL), withPolicy(t, `
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
`, []string{"a"}, ""))
	for _, body := range []string{
		`{"model":"gpt-4o-mini","max_tokens":30000,"MAX_TOKENS":1,"messages":[]}`,
		`{"model":"gpt-4o-mini","max_tokens":30000,"max_tokens":1,"messages":[]}`,
		`{"model":"gpt-4o-mini","Max_Tokens":1,"max_tokens":30000,"messages":[]}`,
		`{"model":"gpt-4o-mini","max_completion_tokens":30000,"Max_Completion_Tokens":1,"messages":[]}`,
		`{"model":"gpt-4o-mini","model":"o1-pro","messages":[]}`,
		`{"model":"gpt-4o-mini","Model":"o1-pro","messages":[]}`,
		`{"model":"gpt-4o-mini","n":1,"N":8,"messages":[]}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a","content":"` + strings.Repeat("b", 1000) + `"}]}`,
		`{"model":"gpt-4o-mini","messages":[],"Messages":[{"role":"user","content":"` + strings.Repeat("b", 1000) + `"}]}`,
	} {
		resp, b := post(t, s, "/v1/chat/completions", testKey("a"), body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%.90s: status %d; want 400: %s", body, resp.StatusCode, b)
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Errorf("the upstream received %d ambiguous bodies; want none", n)
	}
}

// hostileBody is an 8 MiB chat body of tiny messages.
func hostileBody() []byte {
	const msg = `{"role":"user","content":"a"},`
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-4o-mini","messages":[`)
	for b.Len() < 8<<20-len(msg)-64 {
		b.WriteString(msg)
	}
	b.WriteString(`{"role":"user","content":"a"}]}`)
	return b.Bytes()
}

// heapPeak samples the heap's object bytes until stop is closed and
// returns the largest figure seen.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// Eight parallel 8 MiB bodies of ~280k tiny messages each: from a tenant
// over its request rate they are refused before they are read; from a
// tenant within its limits they are read and priced within the parse
// budget, without a per-message tree. Either way the heap grows by at most
// 256 MiB over the eight bodies. (The time taken is logged, not asserted:
// the race detector and a shared machine make timings meaningless here.)
func TestHostileBodiesBoundedMemory(t *testing.T) {
	up := newRecorder(t)
	s := startProxy(t, pointAt(up.URL), withPolicy(t, `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 10, per: 1h}
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 1k, per: 1m}
`, []string{"throttled", "fresh"}, "http: {max_body: 8MiB}\n"))
	body := hostileBody()
	// The throttled tenant uses up its request rate.
	for range 10 {
		if resp, b := post(t, s, "/v1/chat/completions", testKey("throttled"), smallChat); resp.StatusCode != http.StatusOK {
			t.Fatalf("a request within the rate: status %d: %s", resp.StatusCode, b)
		}
	}
	for _, tc := range []struct {
		tenant string
		status int
	}{
		{"throttled", http.StatusTooManyRequests}, // refused before its body is read
		{"fresh", http.StatusTooManyRequests},     // read and priced: far more than 1k tokens
	} {
		runtime.GC()
		base := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(base)
		stop := make(chan struct{})
		peak := heapPeak(stop)
		start := time.Now()
		var wg sync.WaitGroup
		statuses := make([]int, 8)
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testKey(tc.tenant))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Logf("%s: request %d: %v", tc.tenant, i, err)
					statuses[i] = -1
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				statuses[i] = resp.StatusCode
			}()
		}
		wg.Wait()
		took := time.Since(start)
		close(stop)
		grew := int64(<-peak) - int64(base[0].Value.Uint64())
		t.Logf("%s: 8 × %.1f MiB bodies answered in %v, heap grew by at most %d MiB", tc.tenant, float64(len(body))/(1<<20), took, grew>>20)
		for i, st := range statuses {
			if st != tc.status {
				t.Errorf("%s: request %d: status %d; want %d", tc.tenant, i, st, tc.status)
			}
		}
		if grew > 256<<20 {
			t.Errorf("%s: the heap grew by %d MiB while 8 hostile bodies were answered; want at most 256 MiB", tc.tenant, grew>>20)
		}
	}
	if n := len(up.requests()); n != 10 {
		t.Errorf("the upstream received %d requests; want the ten within the rate only", n)
	}
}

// The bytes of request bodies read and priced at once are bounded by the
// parse budget: with a budget of one body, parallel bodies are read one
// after another, and a body that cannot get room within the wait is
// refused with 503 rather than read.
func TestParseBudgetBoundsBodiesInFlight(t *testing.T) {
	up := newRecorder(t)
	s := startProxy(t, pointAt(up.URL), withPolicy(t, rpmPolicy, []string{"a"}, ""), func(o *options) {
		o.gw.ParseBudget, o.gw.ParseBudgetWait = 64<<10, 300*time.Millisecond
	})
	// One slow client holds the whole budget while it sends its body.
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", testKey("a"), 64<<10)
	// Once the gateway is reading that body, another one waits the
	// budget's wait and is refused. (Until then a small body may still
	// get through: try again.) The slow body is never finished, so only
	// the wait can end the refused one's; its length is a real timer's,
	// which a busy machine can lengthen but not shorten: only the lower
	// bound is checked here, and the exact wait on a testing/synctest
	// clock by the gateway package's TestBudgetRefusesAfterWait.
	var (
		resp *http.Response
		b    []byte
		took time.Duration
	)
	eventually(t, 5*time.Second, "a body refused while the budget is full", func() bool {
		start := time.Now()
		resp, b = post(t, s, "/v1/chat/completions", testKey("a"), smallChat)
		took = time.Since(start)
		return resp.StatusCode != http.StatusOK
	})
	checkError(t, "a body while the budget is full", resp, b, http.StatusServiceUnavailable, "server_busy")
	if took < 300*time.Millisecond {
		t.Errorf("refused after %v; want after the budget's wait of 300ms", took)
	}
	conn.Close()
	eventually(t, 5*time.Second, "the budget is free again", func() bool {
		resp, _ := post(t, s, "/v1/chat/completions", testKey("a"), smallChat)
		return resp.StatusCode == http.StatusOK
	})
}

// A healthy stream that lives longer than max_hold keeps its concurrency
// permit (the controller renews the lease of a live request), so the cap
// still holds while it runs; once it ends, the permit is free. The
// controller's clock is fake, moved past max_hold and past twice
// max_hold while the stream runs; the stream goes on until the test
// finishes it.
func TestLongStreamKeepsItsPermit(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	s := startProxy(t, withPolicy(t, `
  - {name: one-at-a-time, key: [tenant], algorithm: concurrency, limit: 1, max_hold: 1s}
`, []string{"a"}, ""), func(o *options) {
		o.clock = clk
		o.simRate, o.simTokens = 20, 1_000_000 // until FinishStreams
	})
	stream := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(stream))
		req.Header.Set("Authorization", "Bearer "+testKey("a"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && (resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("[DONE]"))) {
			err = fmt.Errorf("status %d, body %.200s", resp.StatusCode, b)
		}
		done <- err
	}()
	start := clk.Now()
	eventually(t, 5*time.Second, "the stream holds the permit", func() bool { return inflight(t, s) == 1 })
	// Past max_hold, and again past twice max_hold, the stream still
	// counts: a second request is refused.
	for _, at := range []time.Duration{1500 * time.Millisecond, 2200 * time.Millisecond} {
		clk.Set(start.Add(at))
		select {
		case err := <-done:
			t.Fatalf("the stream ended by %v on the controller's clock (%v); want it running until the test finishes it", at, err)
		default:
		}
		resp, b := post(t, s, "/v1/chat/completions", testKey("a"), smallChat)
		checkError(t, fmt.Sprintf("a second request %v into a stream, max_hold 1s", at), resp, b, http.StatusTooManyRequests, "concurrency_limit_exceeded")
	}
	s.sim.FinishStreams()
	if err := <-done; err != nil {
		t.Fatalf("stream: %v", err)
	}
	if resp, b := post(t, s, "/v1/chat/completions", testKey("a"), smallChat); resp.StatusCode != http.StatusOK {
		t.Errorf("after the stream: status %d: %s", resp.StatusCode, b)
	}
}
