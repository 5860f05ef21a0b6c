package httpretry_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission/httpretry"
	"github.com/sluicehq/sluice/internal/pipenet"
)

// server answers the first fails requests with status and hint headers,
// then 200; it records the bodies it received.
type server struct {
	URL    string
	base   http.RoundTripper // reaches it; nil for the default transport
	calls  atomic.Int64
	mu     sync.Mutex
	bodies []string
	counts []string // the requests' X-Stainless-Retry-Count
}

// newServer serves a server on a loopback port.
func newServer(t *testing.T, fails int, status int, hdr func() http.Header) *server {
	s := &server{}
	srv := httptest.NewServer(s.handler(fails, status, hdr))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// newPipeServer serves a server on in-memory connections, for a test in
// a testing/synctest bubble: the retries' waits are on the bubble's
// clock.
func newPipeServer(t *testing.T, fails int, status int, hdr func() http.Header) *server {
	s := &server{URL: "http://upstream.test/"}
	ln := pipenet.Listen()
	srv := &http.Server{Handler: s.handler(fails, status, hdr), ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return ln.Dial() }}
	s.base = tr
	t.Cleanup(func() { tr.CloseIdleConnections(); srv.Close() })
	return s
}

func (s *server) handler(fails int, status int, hdr func() http.Header) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(b))
		s.counts = append(s.counts, r.Header.Get("X-Stainless-Retry-Count"))
		s.mu.Unlock()
		if int(n) <= fails {
			for k, v := range hdr() {
				w.Header()[k] = v
			}
			w.WriteHeader(status)
			io.WriteString(w, `{"error":"slow down"}`)
			return
		}
		io.WriteString(w, "ok")
	})
}

// fakeClock records sleeps and moves its time by them.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

func hdr(kv ...string) func() http.Header {
	return func() http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
}

// TestRetryAfterMsRealWait: with the default clock and sleep, a
// retry-after-ms hint of 120ms is waited for, jittered in [120ms, 480ms]
// (the default jitter of 3), and wins over Retry-After. It runs in a
// testing/synctest bubble, so the wait is measured exactly.
func TestRetryAfterMsRealWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newPipeServer(t, 1, 429, hdr("retry-after-ms", "120", "Retry-After", "1"))
		c := &http.Client{Transport: &httpretry.Transport{Base: s.base}}
		start := time.Now()
		resp, err := c.Get(s.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if el := time.Since(start); resp.StatusCode != 200 || s.calls.Load() != 2 || el < 120*time.Millisecond || el > 480*time.Millisecond {
			t.Errorf("status %d after %d calls in %v; want 200 after 2 calls in [120ms, 480ms] (retry-after-ms wins over Retry-After)", resp.StatusCode, s.calls.Load(), el)
		}
	})
}

func TestHintForms(t *testing.T) {
	start := time.Now().Truncate(time.Second)
	tests := []struct {
		name   string
		status int
		hdr    func() http.Header
		want   time.Duration
	}{
		{"retry-after-ms", 429, hdr("retry-after-ms", "1500.5"), 1500*time.Millisecond + 500*time.Microsecond},
		{"Retry-After seconds", 429, hdr("Retry-After", "3"), 3 * time.Second},
		{"Retry-After date", 503, hdr("Retry-After", start.Add(7*time.Second).UTC().Format(http.TimeFormat)), 7 * time.Second},
		{"x-should-retry true on 400", 400, hdr("x-should-retry", "true", "Retry-After", "2"), 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, 2, tt.status, tt.hdr)
			clk := &fakeClock{now: start}
			// A draw of 0.5 with the default jitter of 3 waits 2.5 times the hint.
			c := &http.Client{Transport: &httpretry.Transport{Now: clk.Now, Sleep: clk.Sleep, Rand: func() float64 { return 0.5 }}}
			resp, err := c.Get(s.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || s.calls.Load() != 3 {
				t.Fatalf("status %d after %d calls; want 200 after 3", resp.StatusCode, s.calls.Load())
			}
			// The date is relative to the clock, which the first wait moved.
			w := tt.want + 3*tt.want/2
			want := []time.Duration{w, w}
			if strings.Contains(tt.name, "date") {
				want[1] = 0
			}
			if fmt.Sprint(clk.sleeps) != fmt.Sprint(want) {
				t.Errorf("waits = %v; want %v", clk.sleeps, want)
			}
		})
	}
}

func TestShouldRetryFalse(t *testing.T) {
	s := newServer(t, 5, 503, hdr("x-should-retry", "false", "Retry-After", "1"))
	clk := &fakeClock{now: time.Now()}
	c := &http.Client{Transport: &httpretry.Transport{Now: clk.Now, Sleep: clk.Sleep}}
	resp, err := c.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || s.calls.Load() != 1 || len(clk.sleeps) != 0 {
		t.Errorf("status %d after %d calls, waits %v; want 503 after 1 call and no wait", resp.StatusCode, s.calls.Load(), clk.sleeps)
	}
}

// TestDeadlineNeverExceeded: a hint that would end past the deadline is
// not waited for; the 429 comes back at once with its headers.
func TestDeadlineNeverExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newPipeServer(t, 5, 429, hdr("Retry-After", "5"))
		c := &http.Client{Transport: &httpretry.Transport{Base: s.base}}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL, nil)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if el := time.Since(start); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "5" || s.calls.Load() != 1 || el != 0 {
			t.Errorf("status %d, Retry-After %q after %d calls in %v; want the 429 at once", resp.StatusCode, resp.Header.Get("Retry-After"), s.calls.Load(), el)
		}
	})
}

// TestBackoffWithinDeadline: without hints, jittered backoff; every wait
// ends before the deadline and the budget is kept.
func TestBackoffWithinDeadline(t *testing.T) {
	s := newServer(t, 100, 502, hdr())
	start := time.Now()
	clk := &fakeClock{now: start}
	tr := &httpretry.Transport{Now: clk.Now, Sleep: clk.Sleep, MaxAttempts: 10, BaseDelay: time.Second, MaxDelay: 8 * time.Second,
		Rand: func() float64 { return 0.999 }}
	deadline := start.Add(20 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL, nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 {
		t.Errorf("status %d; want the last 502", resp.StatusCode)
	}
	if !clk.Now().Before(deadline) {
		t.Errorf("waited until %v; deadline %v", clk.Now().Sub(start), deadline.Sub(start))
	}
	// 1, 2, 4, 8 (·0.999) = 14.985 s; the next 8 s would pass the deadline.
	if got := len(clk.sleeps); got != 4 || s.calls.Load() != 5 {
		t.Errorf("waits %v, %d calls; want 4 waits, 5 calls", clk.sleeps, s.calls.Load())
	}
	for i, d := range clk.sleeps {
		if ceil := min(8*time.Second, time.Second<<i); d > ceil {
			t.Errorf("wait %d = %v > cap %v", i, d, ceil)
		}
	}
}

func TestAttemptBudget(t *testing.T) {
	s := newServer(t, 100, 503, hdr("Retry-After", "0"))
	c := &http.Client{Transport: &httpretry.Transport{MaxAttempts: 3}}
	resp, err := c.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || s.calls.Load() != 3 {
		t.Errorf("status %d after %d calls; want 503 after 3", resp.StatusCode, s.calls.Load())
	}
	// Retries are numbered, as the OpenAI and Anthropic SDKs number them:
	// a server that holds a place for a refused request's retry knows it.
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Equal(s.counts, []string{"", "1", "2"}) {
		t.Errorf("X-Stainless-Retry-Count of the attempts = %q; want none, 1, 2", s.counts)
	}
}

func TestPostOnlyWithIdempotencyKey(t *testing.T) {
	s := newServer(t, 1, 429, hdr("Retry-After", "0"))
	c := &http.Client{Transport: &httpretry.Transport{}}
	resp, err := c.Post(s.URL, "application/json", strings.NewReader(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || s.calls.Load() != 1 {
		t.Fatalf("POST without key: status %d after %d calls; want 429 after 1 (never retried)", resp.StatusCode, s.calls.Load())
	}
	s2 := newServer(t, 1, 429, hdr("Retry-After", "0"))
	req, _ := http.NewRequest("POST", s2.URL, strings.NewReader(`{"n":2}`))
	req.Header.Set("Idempotency-Key", "op-42")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || s2.calls.Load() != 2 || s2.bodies[0] != `{"n":2}` || s2.bodies[1] != `{"n":2}` {
		t.Errorf("POST with key: status %d after %d calls, bodies %q; want 200 after 2 with the body replayed", resp.StatusCode, s2.calls.Load(), s2.bodies)
	}
}

func TestUnreplayableBodyNotRetried(t *testing.T) {
	s := newServer(t, 1, 503, hdr("Retry-After", "0"))
	req, _ := http.NewRequest("PUT", s.URL, io.NopCloser(strings.NewReader("stream")))
	req.GetBody = nil
	resp, err := (&http.Client{Transport: &httpretry.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || s.calls.Load() != 1 {
		t.Errorf("PUT with a one-shot body: status %d after %d calls; want 503 after 1", resp.StatusCode, s.calls.Load())
	}
}

func TestMaxWait(t *testing.T) {
	s := newServer(t, 1, 429, hdr("Retry-After", "3600"))
	clk := &fakeClock{now: time.Now()}
	resp, err := (&http.Client{Transport: &httpretry.Transport{Now: clk.Now, Sleep: clk.Sleep}}).Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || len(clk.sleeps) != 0 {
		t.Errorf("hour-long hint: status %d, waits %v; want the 429 without waiting", resp.StatusCode, clk.sleeps)
	}
}

// TestJitterBounds: a jittered hint is never shorter than the hint, and
// never longer than MaxWait or the time left before the deadline; a hint
// for which the server holds a place (HeldHeader) is waited exactly.
func TestJitterBounds(t *testing.T) {
	tests := []struct {
		name     string
		jitter   float64
		rand     float64
		maxWait  time.Duration
		deadline time.Duration // 0: none
		want     time.Duration // with a deadline: the wait is in [10s, want)
		held     bool
	}{
		{"exact", -1, 0.999, 0, 0, 10 * time.Second, false},
		{"lowest draw", 0, 0, 0, 0, 10 * time.Second, false},
		{"default", 0, 0.5, 0, 0, 25 * time.Second, false},
		{"configured", 0.5, 0.5, 0, 0, 12500 * time.Millisecond, false},
		{"capped at 10", 50, 0.5, time.Hour, 0, time.Minute, false},
		{"cut at MaxWait", 0, 0.5, 20 * time.Second, 0, 15 * time.Second, false},
		{"cut at the deadline", 0, 0.999, 0, 15 * time.Second, 15 * time.Second, false},
		{"a place held", 0, 0.999, 0, 0, 10 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hdr("Retry-After-Ms", "10000")
			if tt.held {
				h = hdr("Retry-After-Ms", "10000", httpretry.HeldHeader, "true")
			}
			s := newServer(t, 1, 429, h)
			// The deadline is on the real clock, the fake one starts there.
			clk := &fakeClock{now: time.Now()}
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, clk.Now().Add(tt.deadline))
				defer cancel()
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", s.URL, nil)
			tr := &httpretry.Transport{Now: clk.Now, Sleep: clk.Sleep, Jitter: tt.jitter, MaxWait: tt.maxWait,
				Rand: func() float64 { return tt.rand }}
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || len(clk.sleeps) != 1 {
				t.Fatalf("status %d, waits %v; want 200 after one wait", resp.StatusCode, clk.sleeps)
			}
			if got := clk.sleeps[0]; tt.deadline > 0 && (got < 10*time.Second || got >= tt.want) || tt.deadline == 0 && got != tt.want {
				t.Errorf("wait = %v; want %v", got, tt.want)
			}
		})
	}
}

// TestRetriesPerHostCapped: with MaxRetriesPerHost 1, a request that
// would retry while another one is retrying to the same host gets its 429
// back at once; once that retry has ended, the host's slot is free again.
func TestRetriesPerHostCapped(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1, 2, 4:
			w.Header().Set("Retry-After-Ms", "10")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	sleeping, wake := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	tr := &httpretry.Transport{MaxRetriesPerHost: 1, Sleep: func(ctx context.Context, d time.Duration) error {
		if first.CompareAndSwap(false, true) {
			close(sleeping)
			<-wake
		}
		return nil
	}}
	c := &http.Client{Transport: tr}
	done := make(chan int)
	go func() {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Error(err)
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-sleeping
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || calls.Load() != 2 {
		t.Errorf("second request while the first retries: status %d after %d calls; want 429 after 2 (not retried)", resp.StatusCode, calls.Load())
	}
	close(wake)
	if code := <-done; code != 200 || calls.Load() != 3 {
		t.Errorf("first request: status %d after %d calls; want 200 after 3", code, calls.Load())
	}
	resp, err = c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || calls.Load() != 5 {
		t.Errorf("third request after the first ended: status %d after %d calls; want 200 after 5 (retried)", resp.StatusCode, calls.Load())
	}
}

// A client that waits for what the server asks, here a 429 with
// retry-after-ms: 50.
func Example() {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("retry-after-ms", "50")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "done")
	}))
	defer srv.Close()
	client := &http.Client{Transport: &httpretry.Transport{MaxAttempts: 3}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", calls.Load(), "attempts")
	// Output: 200 done after 2 attempts
}
