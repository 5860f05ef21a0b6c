package budget_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/pipenet"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

var secret = []byte("0123456789abcdef-test-secret")

// receiver is a webhook receiver: it verifies each POST's signature as a
// real receiver would, and answers with the statuses of its script in
// turn (200 once the script is spent).
type receiver struct {
	URL       string
	transport http.RoundTripper // to reach it; nil for the default one
	mu        sync.Mutex
	script    []int
	attempts  []time.Time
	got       []budget.Warning
	hold      chan struct{} // when set, each request waits for it
	active    atomic.Int64  // requests waiting for hold
	hang      atomic.Int64  // requests still to hang until the sender gives up
	badSig    atomic.Int64
}

// newReceiver serves a receiver on a loopback port.
func newReceiver(t *testing.T, script ...int) *receiver {
	r := &receiver{script: script}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// newPipeReceiver serves a receiver on in-memory connections, for a test
// in a testing/synctest bubble: the sender's deadlines and backoffs and
// the receiver's clock are the bubble's.
func newPipeReceiver(t *testing.T, script ...int) *receiver {
	r := &receiver{script: script, URL: "http://receiver.test/hook"}
	ln := pipenet.Listen()
	srv := &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return ln.Dial() }}
	r.transport = tr
	t.Cleanup(func() { tr.CloseIdleConnections(); srv.Close() })
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if r.hang.Add(-1) >= 0 {
		// Once the body is read, the server notices the sender hanging
		// up at its deadline.
		_, _ = io.Copy(io.Discard, req.Body)
		<-req.Context().Done()
		return
	}
	if r.hold != nil {
		r.active.Add(1)
		select {
		case <-r.hold:
		case <-req.Context().Done():
			return
		}
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		return
	}
	if err := budget.Verify(secret, req.Header.Get(budget.SignatureHeader), body, time.Now(), 5*time.Minute); err != nil {
		r.badSig.Add(1)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var wn budget.Warning
	if err := json.Unmarshal(body, &wn); err != nil || wn.ID != req.Header.Get(budget.EventIDHeader) || req.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, time.Now())
	status := http.StatusOK
	if len(r.script) > 0 {
		status, r.script = r.script[0], r.script[1:]
	}
	if status == http.StatusOK {
		r.got = append(r.got, wn)
	}
	r.mu.Unlock()
	w.WriteHeader(status)
}

func (r *receiver) delivered() []budget.Warning {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]budget.Warning(nil), r.got...)
}

// newWebhook returns a webhook delivering to r.
func newWebhook(t *testing.T, r *receiver, mod func(*budget.WebhookConfig)) *budget.Webhook {
	t.Helper()
	cfg := budget.WebhookConfig{URL: r.URL, Secret: secret, Timeout: time.Second, Attempts: 4,
		Backoff: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond, Queue: 16}
	if mod != nil {
		mod(&cfg)
	}
	h, err := budget.NewWebhook(cfg, budget.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if r.transport != nil {
		budget.SetTransport(h, r.transport)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// waitStats polls h's counts until cond holds, with no deadline: a
// condition that never holds is ended by the test timeout.
func waitStats(t *testing.T, h *budget.Webhook, what string, cond func(budget.WebhookStats) bool) budget.WebhookStats {
	t.Helper()
	var s budget.WebhookStats
	poll.Until(t, time.Second, what, func() bool { s = h.Stats(); return cond(s) })
	return s
}

var sample = budget.Warning{
	ID: "6f1c0ffee", Tenant: "acme", Policy: "monthly", Threshold: 80, Unit: limits.UnitCost, Used: 812, Limit: 1000,
	PeriodStart: t0, PeriodEnd: t0.AddDate(0, 1, 0), Time: t0.Add(time.Hour),
}

// TestWebhookRetries answers 503, a hang past the attempt's deadline, and
// 429 before accepting: the warning arrives once, signed, after three
// retries spaced by the attempt's deadline and the growing backoff,
// drawn between its half and its whole. It runs in a testing/synctest
// bubble, so the spacings are the sender's own, to the nanosecond.
func TestWebhookRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPipeReceiver(t, 503, 429)
		r.hang.Store(1)
		h := newWebhook(t, r, func(c *budget.WebhookConfig) { c.Timeout = 100 * time.Millisecond })
		start := time.Now()
		h.Notify(sample)
		s := waitStats(t, h, "delivery", func(s budget.WebhookStats) bool { return s.Delivered+s.Failed > 0 })
		if s != (budget.WebhookStats{Delivered: 1, Retried: 3}) {
			t.Errorf("stats = %+v; want 1 delivered after 3 retries", s)
		}
		got := r.delivered()
		if len(got) != 1 || got[0] != sample {
			t.Fatalf("received %+v; want the warning once, as sent", got)
		}
		if r.badSig.Load() != 0 {
			t.Errorf("%d attempts failed the signature check", r.badSig.Load())
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.attempts) != 3 {
			t.Fatalf("%d attempts answered; want 3 (503, 429, 200) after the one that hung", len(r.attempts))
		}
		// The hung attempt's 100ms deadline, then backoffs of 20, 40 and
		// 80ms (Backoff doubling up to MaxBackoff), each drawn in [d/2, d].
		prev := start
		for i, want := range []struct{ min, max time.Duration }{
			{100*time.Millisecond + 10*time.Millisecond, 100*time.Millisecond + 20*time.Millisecond},
			{20 * time.Millisecond, 40 * time.Millisecond},
			{40 * time.Millisecond, 80 * time.Millisecond},
		} {
			if d := r.attempts[i].Sub(prev); d < want.min || d > want.max {
				t.Errorf("attempt %d came %v after the one before; want %v to %v", i+2, d, want.min, want.max)
			}
			prev = r.attempts[i]
		}
	})
}

// TestWebhookGivesUp: a status retrying cannot change is not retried,
// and a receiver that keeps failing gets Attempts attempts.
func TestWebhookGivesUp(t *testing.T) {
	for _, tc := range []struct {
		script   []int
		attempts int
	}{
		{[]int{400}, 1},
		{[]int{302}, 1}, // a redirect is not followed
		{[]int{500, 502, 503, 504, 500}, 4},
	} {
		synctest.Test(t, func(t *testing.T) {
			r := newPipeReceiver(t, tc.script...)
			h := newWebhook(t, r, nil)
			h.Notify(sample)
			s := waitStats(t, h, "giving up", func(s budget.WebhookStats) bool { return s.Failed+s.Delivered > 0 })
			if s.Failed != 1 || s.Delivered != 0 || int(s.Retried) != tc.attempts-1 {
				t.Errorf("script %v: stats %+v; want 1 failed after %d attempts", tc.script, s, tc.attempts)
			}
			r.mu.Lock()
			if len(r.attempts) != tc.attempts {
				t.Errorf("script %v: %d attempts; want %d", tc.script, len(r.attempts), tc.attempts)
			}
			r.mu.Unlock()
		})
	}
}

// TestWebhookQueueBound holds the receiver: the workers hold one warning
// each, the queue the next 3, and every other is dropped at once and
// counted; released, the held and queued ones are delivered. It runs in
// a testing/synctest bubble: "at once" is before the bubble's clock moves.
func TestWebhookQueueBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPipeReceiver(t)
		r.hold = make(chan struct{})
		h := newWebhook(t, r, func(c *budget.WebhookConfig) { c.Queue = 3 })
		const workers = 4
		for i := range workers {
			w := sample
			w.ID = string(rune('a' + i))
			h.Notify(w)
			// A worker takes it to the receiver before the next comes, so
			// none waits in the queue of 3.
			synctest.Wait()
		}
		// Every worker holds a warning and the queue is empty.
		if n := r.inFlight(); n != workers {
			t.Fatalf("%d requests reached the receiver; want %d", n, workers)
		}
		start := time.Now()
		for range 100 {
			h.Notify(sample)
		}
		if el := time.Since(start); el != 0 {
			t.Errorf("100 Notify calls took %v against a stuck receiver; they must not wait", el)
		}
		if s := h.Stats(); s.Dropped != 97 {
			t.Errorf("dropped %d; want 97 (100 minus a queue of 3)", s.Dropped)
		}
		close(r.hold)
		waitStats(t, h, "delivering the held and queued warnings", func(s budget.WebhookStats) bool { return s.Delivered == workers+3 })
	})
}

// inFlight is the number of requests waiting for hold.
func (r *receiver) inFlight() int { return int(r.active.Load()) }

// TestVerify checks what a receiver refuses.
func TestVerify(t *testing.T) {
	body := []byte(`{"tenant":"acme"}`)
	now := time.Unix(1_767_225_600, 0)
	good := budget.Sign(secret, now, body)
	for _, tc := range []struct {
		name   string
		secret []byte
		header string
		body   []byte
		at     time.Time
		ok     bool
	}{
		{"as signed", secret, good, body, now, true},
		{"within the tolerance", secret, good, body, now.Add(4 * time.Minute), true},
		{"a rotated secret among several v1", secret, budget.Sign([]byte("another-secret-of-16+"), now, body) + "," + strings.SplitN(good, ",", 2)[1], body, now, true},
		{"replayed later", secret, good, body, now.Add(10 * time.Minute), false},
		{"another body", secret, good, []byte(`{"tenant":"evil"}`), now, false},
		{"another secret", []byte("not-the-secret-at-all"), good, body, now, false},
		{"no timestamp", secret, strings.SplitN(good, ",", 2)[1], body, now, false},
		{"no signature", secret, "t=1767225600", body, now, false},
		{"garbage", secret, "v1=zz,t=x", body, now, false},
		{"oversized", secret, good + strings.Repeat(",v1=00", 400), body, now, false},
	} {
		err := budget.Verify(tc.secret, tc.header, tc.body, tc.at, 5*time.Minute)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, budget.ErrSignature) {
			t.Errorf("%s: Verify = %v; want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestWebhookConfig refuses what cannot work.
func TestWebhookConfig(t *testing.T) {
	base := budget.WebhookConfig{URL: "http://127.0.0.1:1/", Secret: secret, Timeout: time.Second, Attempts: 1, Backoff: time.Second, MaxBackoff: time.Second, Queue: 1}
	for _, mod := range []func(*budget.WebhookConfig){
		func(c *budget.WebhookConfig) { c.Secret = []byte("short") },
		func(c *budget.WebhookConfig) { c.Queue = 0 },
		func(c *budget.WebhookConfig) { c.Attempts = 0 },
		func(c *budget.WebhookConfig) { c.MaxBackoff = time.Millisecond },
		func(c *budget.WebhookConfig) { c.URL = "ftp://example.com" },
	} {
		c := base
		mod(&c)
		if h, err := budget.NewWebhook(c); err == nil {
			_ = h.Close()
			t.Errorf("NewWebhook(%+v) = nil error; want one", c)
		}
	}
}

// TestWebhookURLRedacted: a malformed URL with credentials is refused
// with an error that shows it without its password, not left to fail at
// every delivery with a log line that shows it whole.
func TestWebhookURLRedacted(t *testing.T) {
	c := budget.WebhookConfig{URL: "http://alice:hunter2pw@127.0.0.1:9x/", Secret: secret, Timeout: time.Second, Attempts: 1, Backoff: time.Second, MaxBackoff: time.Second, Queue: 1}
	h, err := budget.NewWebhook(c)
	if err == nil {
		_ = h.Close()
		t.Fatal("NewWebhook(malformed URL) = nil error; want one")
	}
	if msg := err.Error(); strings.Contains(msg, "hunter2pw") || !strings.Contains(msg, "http://alice:xxxxx@127.0.0.1:9x/") {
		t.Errorf("NewWebhook(malformed URL) = %q; want the URL without its password", msg)
	}
}

// TestWebhookShutdown delivers what is queued and under way before
// closing, and drops (and counts) what comes after.
func TestWebhookShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPipeReceiver(t, 503)
		h := newWebhook(t, r, nil)
		for range 10 {
			h.Notify(sample)
		}
		if err := h.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.Notify(sample)
		if s := h.Stats(); s.Delivered != 10 || s.Retried != 1 || s.Dropped != 1 {
			t.Errorf("stats after Shutdown = %+v; want 10 delivered (one after a retry), the late one dropped", s)
		}
		if got := len(r.delivered()); got != 10 {
			t.Errorf("receiver got %d; want 10", got)
		}
	})
}

// TestWebhookFailureLogHidesURL: a receiver URL whose path and query
// carry its secret (as chat services' incoming-webhook URLs do) is not
// written in the log line of a failed delivery, which names its scheme
// and host only.
func TestWebhookFailureLogHidesURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := ln.Addr().String()
	ln.Close() // nothing listens: the delivery fails with a transport error
	var logged syncbuf.Buffer
	cfg := budget.WebhookConfig{URL: "http://" + host + "/services/T0/B0/pathsecret?token=querysecret", Secret: secret,
		Timeout: time.Second, Attempts: 1, Backoff: time.Millisecond, MaxBackoff: time.Millisecond, Queue: 1}
	h, err := budget.NewWebhook(cfg, budget.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	h.Notify(sample)
	waitStats(t, h, "the delivery failing", func(s budget.WebhookStats) bool { return s.Failed == 1 })
	_ = h.Close() // the count comes before the log line: Close waits for the worker to write it
	out := logged.String()
	if !strings.Contains(out, "budget webhook delivery failed") || !strings.Contains(out, "http://"+host) {
		t.Fatalf("log %q; want the failure, naming the receiver's host", out)
	}
	for _, s := range []string{"pathsecret", "querysecret", "/services/"} {
		if strings.Contains(out, s) {
			t.Errorf("log %q holds %q of the receiver's URL", out, s)
		}
	}
}
