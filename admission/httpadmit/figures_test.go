package httpadmit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
	"github.com/sluicehq/sluice/internal/poll"
)

// figureServer serves, behind the middleware on loopback with a fake
// clock, a handler that prices each request at its "Cost" header (in
// tokens, for policies counting tokens) and settles it at its "Actual"
// header when there is one.
func figureServer(t *testing.T, policies []admission.Policy, opts ...httpadmit.Option) (*httptest.Server, *admissiontest.Clock) {
	t.Helper()
	clk := admissiontest.NewClock(t0)
	ctl, err := admission.New(admission.Config{Policies: policies}, admission.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]httpadmit.Option{
		httpadmit.WithLogger(slog.New(slog.DiscardHandler)),
		httpadmit.WithTicketInContext(),
		httpadmit.WithRequest(func(r *http.Request, req *admission.Request) error {
			if c := r.Header.Get("Cost"); c != "" {
				_, err := fmt.Sscan(c, &req.Tokens)
				return err
			}
			return nil
		}),
	}, opts...)
	mw, err := httpadmit.New(ctl, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Actual"); a != "" {
			n, _ := strconv.ParseInt(a, 10, 64)
			tk, _ := httpadmit.TicketFrom(r.Context())
			tk.Settle(admission.Usage{Tokens: n, TokensKnown: true})
		}
	})))
	t.Cleanup(srv.Close)
	return srv, clk
}

// TestLimitFigures checks the rule of the package doc per algorithm, on a
// fake clock: t is the time until the partition is fully available again
// and never more than the window w; X-RateLimit-* repeat q, r and t of
// one policy.
func TestLimitFigures(t *testing.T) {
	type step struct {
		at         time.Duration // from t0 (12:00:00 UTC, on a minute)
		cost       string        // tokens estimated; "" for 1 request
		actual     string        // tokens settled at; "" for the estimate
		status     int
		rateLimit  string // the RateLimit field
		xReset     string // X-RateLimit-Reset
		retryAfter string // Retry-After on a rejection
	}
	tokens := func(p admission.Policy) admission.Policy { p.Unit = limits.UnitTokens; return p }
	for _, tc := range []struct {
		name   string
		policy admission.Policy
		steps  []step
	}{{
		// Burst 20 refilled at 5 per second: w = 4 s. An overrun settled
		// at 40 leaves the bucket 20 in debt: 8 s from full, reported as
		// the window, 4.
		name:   "token bucket",
		policy: tokens(admission.Policy{Name: "tb", Algorithm: limits.TokenBucket, Limit: 5, Per: time.Second, Burst: 20}),
		steps: []step{
			{at: 0, cost: "1", status: 200, rateLimit: `"tb";r=19;t=1`, xReset: "1"},
			{at: 0, cost: "1", actual: "40", status: 200, rateLimit: `"tb";r=18;t=1`, xReset: "1"},
			{at: 0, cost: "1", status: 429, rateLimit: `"tb";r=0;t=4`, xReset: "4", retryAfter: "5"},
			{at: 10 * time.Second, cost: "10", status: 200, rateLimit: `"tb";r=10;t=2`, xReset: "2"},
		},
	}, {
		name:   "fixed window",
		policy: admission.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 2, Per: time.Minute},
		steps: []step{
			{at: 10 * time.Second, status: 200, rateLimit: `"fw";r=1;t=50`, xReset: "50"},
			{at: 20 * time.Second, status: 200, rateLimit: `"fw";r=0;t=40`, xReset: "40"},
			{at: 30 * time.Second, status: 429, rateLimit: `"fw";r=0;t=30`, xReset: "30", retryAfter: "30"},
			{at: 61 * time.Second, status: 200, rateLimit: `"fw";r=1;t=59`, xReset: "59"},
		},
	}, {
		// One request 8 s into a 60 s window is remembered, weighted, until
		// 112 s from now: reported as the window, never 112.
		name:   "sliding window",
		policy: tokens(admission.Policy{Name: "sw", Algorithm: limits.SlidingWindow, Limit: 100, Per: time.Minute}),
		steps: []step{
			{at: 8 * time.Second, cost: "1", status: 200, rateLimit: `"sw";r=99;t=60`, xReset: "60"},
			{at: 70 * time.Second, cost: "1", status: 200, rateLimit: `"sw";r=98;t=60`, xReset: "60"},
			// The previous window's weight alone decays by the window's end.
			{at: 170 * time.Second, cost: "0", status: 200, rateLimit: `"sw";r=99;t=10`, xReset: "10"},
		},
	}, {
		name:   "sliding log",
		policy: admission.Policy{Name: "sl", Algorithm: limits.SlidingLog, Limit: 3, Per: time.Minute},
		steps: []step{
			{at: 0, status: 200, rateLimit: `"sl";r=2;t=60`, xReset: "60"},
			{at: 20 * time.Second, status: 200, rateLimit: `"sl";r=1;t=60`, xReset: "60"},
			{at: 30 * time.Second, status: 200, rateLimit: `"sl";r=0;t=60`, xReset: "60"},
			// The oldest leaves at 60 s (Retry-After 20), the newest at 90 s.
			{at: 40 * time.Second, status: 429, rateLimit: `"sl";r=0;t=50`, xReset: "50", retryAfter: "20"},
		},
	}, {
		// A daily quota at noon: 12 hours to the period's end.
		name:   "quota",
		policy: admission.Policy{Name: "qd", Algorithm: limits.Quota, Limit: 1, Period: limits.PeriodDay},
		steps: []step{
			{at: 0, status: 200, rateLimit: `"qd";r=0;t=43200`, xReset: "43200"},
			{at: time.Hour, status: 403, rateLimit: `"qd";r=0;t=39600`, xReset: "39600", retryAfter: "39600"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.policy.Key = []limits.KeyPart{limits.KeyTenant}
			srv, clk := figureServer(t, []admission.Policy{tc.policy})
			for i, s := range tc.steps {
				clk.Set(t0.Add(s.at))
				resp := call(t, srv, "GET", "/v1/x", "", "Cost", s.cost, "Actual", s.actual)
				h := resp.Header
				if resp.StatusCode != s.status || h.Get("RateLimit") != s.rateLimit || h.Get("X-RateLimit-Reset") != s.xReset || h.Get("Retry-After") != s.retryAfter {
					t.Errorf("step %d at +%v: %d RateLimit=%s X-RateLimit-Reset=%s Retry-After=%q; want %d %s %s %q",
						i, s.at, resp.StatusCode, h.Get("RateLimit"), h.Get("X-RateLimit-Reset"), h.Get("Retry-After"),
						s.status, s.rateLimit, s.xReset, s.retryAfter)
				}
				checkWithinWindow(t, i, h)
			}
		})
	}
}

// checkWithinWindow asserts t <= w for a response's one policy.
func checkWithinWindow(t *testing.T, i int, h http.Header) {
	t.Helper()
	_, after, ok := strings.Cut(h.Get("RateLimit-Policy"), ";w=")
	if !ok {
		t.Fatalf("step %d: RateLimit-Policy %q has no window", i, h.Get("RateLimit-Policy"))
	}
	var w int64
	if _, err := fmt.Sscan(after, &w); err != nil {
		t.Fatalf("step %d: RateLimit-Policy %q: %v", i, h.Get("RateLimit-Policy"), err)
	}
	if reset := intHeader(t, &http.Response{Header: h}, "X-RateLimit-Reset"); reset > w {
		t.Errorf("step %d: X-RateLimit-Reset %d beyond the window %d", i, reset, w)
	}
}

// holdServer serves behind the middleware a handler that holds each
// request until release receives, with a fake clock.
func holdServer(t *testing.T, policies []admission.Policy, opts ...httpadmit.Option) (srv *httptest.Server, clk *admissiontest.Clock, ctl *admission.Controller, release chan struct{}) {
	t.Helper()
	clk = admissiontest.NewClock(t0)
	ctl, err := admission.New(admission.Config{Policies: policies}, admission.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, append([]httpadmit.Option{httpadmit.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	release = make(chan struct{})
	srv = httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
	})))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv, clk, ctl, release
}

// async sends a request in the background; its response comes on the
// channel.
func async(t *testing.T, srv *httptest.Server, path string) <-chan *http.Response {
	ch := make(chan *http.Response, 1)
	go func() {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Error(err)
			ch <- nil
			return
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- resp
	}()
	return ch
}

// waitFor waits until cond holds, with no deadline (package poll).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, what, cond)
}

func inFlight(ctl *admission.Controller, policy string) (inflight int64, queued int) {
	for _, s := range ctl.Stats() {
		if s.Name == policy {
			return s.InFlight, s.Queued
		}
	}
	return 0, 0
}

// TestConcurrencyFigures: a concurrency limit at capacity reports r=0
// with its retry hint as t, never "r=0;t=0" (retry now); and beside a rate
// policy the X-RateLimit-* trio describes the rate policy until the
// concurrency limit is what stops the caller.
func TestConcurrencyFigures(t *testing.T) {
	srv, _, ctl, release := holdServer(t, []admission.Policy{
		{Name: "rpm", Algorithm: limits.FixedWindow, Limit: 60, Per: time.Minute},
		{Name: "conc", Algorithm: limits.Concurrency, Limit: 2, RetryHint: 3 * time.Second},
	}, httpadmit.WithRetryAfterMs(true))
	first := call(t, srv, "GET", "/x", "")
	if got, want := first.Header.Get("RateLimit"), `"rpm";r=59;t=60, "conc";r=1;t=0`; got != want {
		t.Errorf("one in flight: RateLimit = %s; want %s", got, want)
	}
	// conc has 1 of 2 left (0.5), rpm 59 of 60: the trio is rpm's.
	if l, r, s := first.Header.Get("X-RateLimit-Limit"), first.Header.Get("X-RateLimit-Remaining"), first.Header.Get("X-RateLimit-Reset"); l != "60" || r != "59" || s != "60" {
		t.Errorf("one in flight: X-RateLimit-Limit/Remaining/Reset = %s/%s/%s; want 60/59/60 (the rate policy)", l, r, s)
	}
	held := []<-chan *http.Response{async(t, srv, "/hold"), async(t, srv, "/hold")}
	waitFor(t, "two requests in flight", func() bool { n, _ := inFlight(ctl, "conc"); return n == 2 })
	rej := call(t, srv, "GET", "/x", "")
	if rej.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("at capacity: status %d; want 429", rej.StatusCode)
	}
	want := map[string]string{
		"RateLimit": `"conc";r=0;t=3`, "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "3",
		"Retry-After": "3", "Retry-After-Ms": "3000",
	}
	for k, v := range want {
		if got := rej.Header.Get(k); got != v {
			t.Errorf("at capacity: %s = %q; want %q", k, got, v)
		}
	}
	release <- struct{}{}
	release <- struct{}{}
	for _, ch := range held {
		resp := <-ch
		if resp == nil {
			t.Fatal("held request failed")
		}
		// The first admitted leaves room: the trio is rpm's. The second
		// fills the limit: the trio is the concurrency limit's, with its
		// hint.
		got := resp.Header.Get("RateLimit") + " " + resp.Header.Get("X-RateLimit-Limit") + "/" +
			resp.Header.Get("X-RateLimit-Remaining") + "/" + resp.Header.Get("X-RateLimit-Reset")
		if got != `"rpm";r=58;t=60, "conc";r=1;t=0 60/58/60` && got != `"rpm";r=57;t=60, "conc";r=0;t=3 2/0/3` {
			t.Errorf("held request: RateLimit and X-RateLimit-Limit/Remaining/Reset = %s", got)
		}
	}
}

// TestRetryAfterMs: a true wait of 0.2 s reads Retry-After 1 and, with
// the option, Retry-After-Ms 200 and retry_after_ms in the problem; not
// without it.
func TestRetryAfterMs(t *testing.T) {
	tb := admission.Policy{Name: "tb", Algorithm: limits.TokenBucket, Limit: 5, Per: time.Second, Burst: 1}
	for _, on := range []bool{false, true} {
		srv, _ := figureServer(t, []admission.Policy{tb}, httpadmit.WithRetryAfterMs(on))
		if resp := call(t, srv, "GET", "/x", ""); resp.StatusCode != 200 {
			t.Fatalf("first request: status %d", resp.StatusCode)
		}
		rej := call(t, srv, "GET", "/x", "")
		var p httpadmit.Problem
		if err := json.NewDecoder(rej.Body).Decode(&p); err != nil {
			t.Fatal(err)
		}
		wantMs, wantP := "", int64(0)
		if on {
			wantMs, wantP = "200", 200
		}
		if rej.StatusCode != 429 || rej.Header.Get("Retry-After") != "1" || rej.Header.Get("Retry-After-Ms") != wantMs ||
			p.RetryAfter != 1 || p.RetryAfterMs != wantP {
			t.Errorf("WithRetryAfterMs(%v): %d Retry-After=%q Retry-After-Ms=%q problem=%+v; want 429, 1, %q, retry_after_ms %d",
				on, rej.StatusCode, rej.Header.Get("Retry-After"), rej.Header.Get("Retry-After-Ms"), p, wantMs, wantP)
		}
	}
}

// TestServerTimingQueue: a request admitted after 1.02 s in a queue
// carries "queue;dur=1020"; one admitted at once carries none, and the
// option turns the entry off.
func TestServerTimingQueue(t *testing.T) {
	for _, on := range []bool{true, false} {
		srv, clk, ctl, release := holdServer(t, []admission.Policy{{
			Name: "conc", Algorithm: limits.Concurrency, Limit: 1, Queue: limits.Queue{Size: 5},
		}}, httpadmit.WithServerTiming(on))
		first := async(t, srv, "/hold")
		waitFor(t, "one in flight", func() bool { n, _ := inFlight(ctl, "conc"); return n == 1 })
		second := async(t, srv, "/x")
		waitFor(t, "one queued", func() bool { _, q := inFlight(ctl, "conc"); return q == 1 })
		clk.Advance(1020 * time.Millisecond)
		release <- struct{}{}
		r1, r2 := <-first, <-second
		if r1 == nil || r2 == nil {
			t.Fatal("a request failed")
		}
		if got := r1.Header.Get("Server-Timing"); got != "" {
			t.Errorf("admitted at once: Server-Timing = %q; want none", got)
		}
		want := "queue;dur=1020"
		if !on {
			want = ""
		}
		if r2.StatusCode != 200 || r2.Header.Get("Server-Timing") != want {
			t.Errorf("WithServerTiming(%v), queued 1.02 s: %d Server-Timing = %q; want 200 %q", on, r2.StatusCode, r2.Header.Get("Server-Timing"), want)
		}
	}
}

func TestSetQueueTiming(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{{1020 * time.Millisecond, "queue;dur=1020"}, {1500 * time.Microsecond, "queue;dur=1.5"}, {1, "queue;dur=0"}, {0, ""}, {-time.Second, ""}} {
		h := http.Header{}
		limitheaders.SetQueueTiming(h, tt.d)
		if got := h.Get("Server-Timing"); got != tt.want {
			t.Errorf("SetQueueTiming(%v) = %q; want %q", tt.d, got, tt.want)
		}
	}
}

func TestTightest(t *testing.T) {
	rate := func(name string, limit, remaining int64, reset time.Duration) admission.Status {
		return admission.Status{Policy: name, Algorithm: limits.FixedWindow, Limit: limit, Remaining: remaining, Reset: reset, Window: time.Minute}
	}
	conc := func(limit, remaining int64) admission.Status {
		return admission.Status{Policy: "conc", Algorithm: limits.Concurrency, Limit: limit, Remaining: remaining}
	}
	for _, tt := range []struct {
		name string
		sts  []admission.Status
		want string
	}{
		{"none", nil, ""},
		{"least room by fraction", []admission.Status{rate("rpm", 60, 30, time.Second), rate("tpm", 1000, 100, time.Second)}, "tpm"},
		{"equal fractions: the longer reset", []admission.Status{rate("a", 10, 0, 5*time.Second), rate("b", 20, 0, 50*time.Second), rate("c", 5, 0, 7*time.Second)}, "b"},
		{"a concurrency limit with room stays behind a full rate policy", []admission.Status{conc(4, 1), rate("rpm", 60, 60, 0)}, "rpm"},
		{"a concurrency limit at capacity", []admission.Status{rate("rpm", 60, 1, time.Second), conc(4, 0)}, "conc"},
		{"a concurrency limit alone", []admission.Status{conc(4, 3)}, "conc"},
		{"no limit", []admission.Status{rate("zero", 0, 0, 0)}, ""},
	} {
		got := ""
		if i := limitheaders.Tightest(tt.sts); i >= 0 {
			got = tt.sts[i].Policy
		}
		if got != tt.want {
			t.Errorf("%s: Tightest = %q; want %q", tt.name, got, tt.want)
		}
	}
}
