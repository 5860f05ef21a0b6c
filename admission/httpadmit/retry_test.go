package httpadmit_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestRetryCountTakesHeldPlace: a request whose X-Stainless-Retry-Count
// is 1 or more is a retry. Once the tenant's retries show, its refusals
// by a full queue hold places: a new request finds its place taken, a
// malformed or zero count is not a retry, and a retry at its hint takes
// the place and waits its turn.
func TestRetryCountTakesHeldPlace(t *testing.T) {
	srv, clk, ctl, _ := holdServer(t, []admission.Policy{{
		Name: "rate", Algorithm: limits.TokenBucket, Limit: 1, Per: 10 * time.Second,
		Queue: limits.Queue{Size: 4, PerTenant: 2, Timeout: time.Hour},
	}}, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{Keys: keys}))
	queued := func(n int) func() bool {
		return func() bool { _, q := inFlight(ctl, "rate"); return q == n }
	}
	placesHeld := func() int {
		for _, s := range ctl.Stats() {
			if s.Name == "rate" {
				return s.Held
			}
		}
		return -1
	}
	type answer struct {
		status int
		held   string // X-Retry-Held
		after  string // Retry-After
	}
	get := func(count string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequest("GET", srv.URL+"/item", nil)
			req.Header.Set("Authorization", "Bearer "+keyNoisy)
			if count != "" {
				req.Header.Set("X-Stainless-Retry-Count", count)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				out <- answer{}
				return
			}
			resp.Body.Close()
			out <- answer{resp.StatusCode, resp.Header.Get("X-Retry-Held"), resp.Header.Get("Retry-After")}
		}()
		return out
	}
	want := func(what string, got <-chan answer, status int, held string, after time.Duration) {
		t.Helper()
		a := <-got
		if a.status != status || a.held != held {
			t.Errorf("%s: status %d, X-Retry-Held %q; want %d, %q", what, a.status, a.held, status, held)
		}
		if after > 0 && a.after != strconv.Itoa(int(after/time.Second)) {
			t.Errorf("%s: Retry-After %q; want %v", what, a.after, after)
		}
	}
	want("the first request", get(""), 200, "", 0)
	first := get("")
	waitFor(t, "a request to queue", queued(1))
	second := get("")
	waitFor(t, "two requests to queue", queued(2))
	// noisy's part of the queue is full: its first retry is refused, and
	// from then on its refusals hold a place each, one turn apart.
	want("the first retry", get("1"), 429, "true", 20*time.Second)
	want("a new request", get(""), 429, "true", 30*time.Second)
	clk.Advance(10 * time.Second)
	want("the first waiter", first, 200, "", 0)
	// One waiter and places held fill noisy's part: new requests and
	// requests that do not count a retry are refused, each hint a turn
	// later, and none holds a place beyond a minute.
	for i, count := range []string{"", "0", "x1", "1000"} {
		want("a request with retry count "+count, get(count), 429, "true", time.Duration(30+10*i)*time.Second)
	}
	want("a request told to come back in over a minute", get("-1"), 429, "", 70*time.Second)
	clk.Advance(10 * time.Second)
	want("the second waiter", second, 200, "", 0)
	// At 20 s the first retry's place is due: the retry takes it, and
	// with it and the places held noisy's part is full again.
	n := placesHeld()
	retry := get("2")
	waitFor(t, "the retry to take its place", queued(1))
	if got := placesHeld(); got != n-1 {
		t.Errorf("places held after the retry: %d; want %d", got, n-1)
	}
	want("a new request beside the retry", get(""), 429, "true", 0)
	clk.Advance(10 * time.Second)
	want("the retry", retry, 200, "", 0)
}
