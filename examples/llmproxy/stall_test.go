package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
)

// Two streams whose clients stopped reading count against the concurrency
// cap for as long as they are open, past max_hold: the controller renews
// their leases whatever their clients do. (Renewed on client progress,
// with max_hold 20s and the default client write timeout of 30s, the two
// stalled streams stopped counting at 20s, and a third request was
// admitted over a cap of 2 while they were still open.)
func TestStalledStreamsCountPastMaxHold(t *testing.T) {
	clock := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	rec := newRecorder(t)
	s := startProxy(t, edgePolicy(t, rec, `
  - {name: conc, key: [tenant], algorithm: concurrency, limit: 2, max_hold: 20s}
`, []string{"a"}, "", ""), func(o *options) { o.clock = clock })
	for range 2 {
		stalledStream(t, s, testKey("a"))
	}
	eventually(t, 5*time.Second, "both stalled streams reach the upstream", func() bool { return len(rec.requests()) == 2 })
	// 25s on the controller's clock; the streams' writes wait for their
	// clients on the real one (the client write timeout, 30s, cuts them
	// after the test).
	for range 25 {
		clock.Advance(time.Second)
	}
	resp, b := post(t, s, "/v1/chat/completions", testKey("a"), smallChat)
	checkError(t, "a third request 25s into two stalled streams (cap 2, max_hold 20s)", resp, b, http.StatusTooManyRequests, "concurrency_limit_exceeded")
	if v := scrape(t, s, "admission_inflight", "policy", "conc"); v != 2 {
		t.Errorf("conc in flight 25s into two stalled streams = %v; want 2", v)
	}
}
