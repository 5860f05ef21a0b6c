package httpadmit_test

import (
	"net/http"
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
		Queue: limits.Queue{Size: 4, PerTenant: 1, Timeout: time.Hour},
	}}, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{Keys: keys}))
	queued := func() bool {
		_, n := inFlight(ctl, "rate")
		return n == 1
	}
	held := make(chan string, 16) // each answer's X-Retry-Held
	get := func(count string) <-chan int {
		out := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest("GET", srv.URL+"/item", nil)
			req.Header.Set("Authorization", "Bearer "+keyNoisy)
			if count != "" {
				req.Header.Set("X-Stainless-Retry-Count", count)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				out <- 0
				return
			}
			resp.Body.Close()
			held <- resp.Header.Get("X-Retry-Held")
			out <- resp.StatusCode
		}()
		return out
	}
	want := func(what string, got <-chan int, status int, isHeld string) {
		t.Helper()
		if s := <-got; s != status {
			t.Errorf("%s: status %d; want %d", what, s, status)
		}
		if h := <-held; h != isHeld {
			t.Errorf("%s: X-Retry-Held %q; want %q", what, h, isHeld)
		}
	}
	want("the first request", get(""), 200, "")
	waiting := get("")
	waitFor(t, "a request to queue", queued)
	// noisy's part of the queue is full: its first retry is refused, and
	// from then on its refusals hold a place each (due at 10s, then 20s).
	want("the first retry", get("1"), 429, "true")
	want("a new request", get(""), 429, "true")
	clk.Advance(10 * time.Second)
	want("the waiter", waiting, 200, "")
	// The queue is empty, but the places are noisy's: new requests and
	// requests that do not count a retry are refused.
	for _, count := range []string{"", "0", "x1", "1000", "-1"} {
		want("a request with retry count "+count, get(count), 429, "true")
	}
	retry := get("2")
	waitFor(t, "the retry to take its place", queued)
	clk.Advance(10 * time.Second)
	want("the retry", retry, 200, "")
}
