package admission_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestQueueFullBehindWaitersFigures: a request refused queue_full (or
// timed out) behind requests already waiting carries its own partition's
// figures, never those a request of another tenant left in the ticket the
// controller reuses for it: a 429 must not tell tenant b that it has 99
// permits left because tenant a had.
func TestQueueFullBehindWaitersFigures(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	p := concurrencyPolicy(100, limits.Queue{Size: 1}, limits.KeyTenant)
	p.Unit = limits.UnitTokens
	c := newController(t, clock, rec, p)
	ctx := context.Background()
	holder, err := c.Admit(ctx, admission.Request{Tenant: "b", Tokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Done()
	out := make(chan result, 1)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "b", Tokens: 1}, "w", out)
	defer func() {
		holder.Done()
		if r := receive(t, "the waiter", out); r.err == nil {
			r.tk.Done()
		}
	}()
	// Tickets are pooled (and the race detector's pool drops some Puts):
	// try a few times for tenant b's refusal to reuse tenant a's ticket.
	for i := 0; i < 20; i++ {
		tk, err := c.Admit(ctx, admission.Request{Tenant: "a", Tokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		tk.Done()
		_, err = c.Admit(ctx, admission.Request{Tenant: "b", Tokens: 1})
		var rej *admission.Rejection
		if !errors.As(err, &rej) || rej.Reason != admission.ReasonQueueFull {
			t.Fatalf("Admit(b) behind a full queue = %v; want queue_full", err)
		}
		if rej.Status.Remaining != 0 || rej.Status.Limit != 100 || rej.RetryAfter != limits.DefaultRetryHint {
			t.Fatalf("queue_full status: remaining %d, limit %d, retry %v; want 0, 100, %v",
				rej.Status.Remaining, rej.Status.Limit, rej.RetryAfter, limits.DefaultRetryHint)
		}
	}
}
