package upstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/upstream"
)

// TestWakeOnReport: requests wait in the queue of a budget the provider
// reported spent, with no refill known (Azure's remaining alone: it
// holds a minute). A new report that the budget has room serves them at
// once, with the clock still: no idle time while waiters exist and the
// budget allows. A report that says nothing new serves no one.
func TestWakeOnReport(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	s, _ := upstream.New(upstream.Config{})
	c := newController(t, clock, s, limits.Policy{
		Name: "tpm", Store: "upstream", Key: []limits.KeyPart{limits.KeyModel}, Unit: limits.UnitTokens,
		Algorithm: limits.TokenBucket, Limit: 100_000, Per: time.Minute, Queue: limits.Queue{Size: 10, Timeout: time.Hour},
	})
	s.Observe("gpt-4o", *withReceived(tokens(0, -1), clock.Now()))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // on failure, the waiters give up
	for range 3 {
		go func() {
			if tk, err := c.Admit(ctx, admission.Request{Tenant: "t", Model: "gpt-4o", Tokens: 100}); err == nil {
				tk.Done()
			}
		}()
	}
	waitFor(t, "three requests waiting", func() bool { return queued(c) == 3 })
	s.Observe("gpt-4o", *withReceived(tokens(50, -1), clock.Now()))
	if n := queued(c); n != 3 {
		t.Fatalf("after a report of 50 tokens left, %d wait; want 3 (none fits)", n)
	}
	// Observe serves the queue before it returns.
	s.Observe("gpt-4o", *withReceived(tokens(250, -1), clock.Now()))
	if n := queued(c); n != 1 {
		t.Errorf("after a report of 250 tokens left, %d wait; want 1 (two fit)", n)
	}
	s.Observe("gpt-4o", *withReceived(tokens(100, -1), clock.Now()))
	if n := queued(c); n != 0 {
		t.Errorf("after a report of 100 tokens left, %d wait; want 0", n)
	}
}

func withReceived(r *upstream.Report, at time.Time) *upstream.Report {
	r.Received = at
	return r
}
