package admission_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/poll"
)

// TestStatusFigures: over random traffic with overruns settled (debt) on
// every algorithm, each Status an admitted ticket or a rejection reports
// keeps the header rule: Reset within [0, Window] for the rate
// algorithms; for a concurrency limit, 0 while it has room and its retry
// hint once it is at capacity or refusing, never "Remaining 0, Reset 0".
func TestStatusFigures(t *testing.T) {
	const hint = 1500 * time.Millisecond
	tokens := limits.UnitTokens
	policies := []admission.Policy{
		{Name: "tb", Unit: tokens, Algorithm: limits.TokenBucket, Limit: 100, Per: 10 * time.Second, Burst: 40},
		{Name: "fw", Unit: tokens, Algorithm: limits.FixedWindow, Limit: 200, Per: 7 * time.Second},
		{Name: "sw", Unit: tokens, Algorithm: limits.SlidingWindow, Limit: 200, Per: 9 * time.Second},
		{Name: "sl", Unit: tokens, Algorithm: limits.SlidingLog, Limit: 200, Per: 5 * time.Second},
		{Name: "qd", Unit: tokens, Algorithm: limits.Quota, Limit: 5000, Period: limits.PeriodDay},
		{Name: "cc", Algorithm: limits.Concurrency, Limit: 3, RetryHint: hint, MaxHold: time.Minute},
	}
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 14))
		clock := admissiontest.NewClock(backendtest.Epoch.Add(time.Duration(rng.Int64N(int64(30 * 24 * time.Hour)))))
		for _, p := range policies {
			c, err := admission.New(admission.Config{Policies: []admission.Policy{p}}, admission.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			check := func(step int, what string, s admission.Status) {
				t.Helper()
				if p.Algorithm == limits.Concurrency {
					atCapacity := s.Remaining == 0 || what == "rejection"
					if (atCapacity && s.Reset != hint) || (!atCapacity && s.Reset != 0) {
						t.Fatalf("%s seed %d step %d: %s status %+v; want Reset %v at capacity, 0 otherwise", p.Name, seed, step, what, s, hint)
					}
					return
				}
				if s.Reset < 0 || s.Reset > s.Window || s.Window <= 0 {
					t.Fatalf("%s seed %d step %d: %s status Reset %v, Window %v; want 0 <= Reset <= Window", p.Name, seed, step, what, s.Reset, s.Window)
				}
			}
			var open []admission.Ticket
			var admitted, rejected int
			for i := range 600 {
				clock.Advance(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
				if len(open) > 0 && rng.IntN(3) == 0 {
					j := rng.IntN(len(open))
					// Overruns up to five times the estimate leave debt.
					open[j].Settle(admission.Usage{Tokens: rng.Int64N(300), TokensKnown: true})
					open = append(open[:j], open[j+1:]...)
					continue
				}
				tk, err := c.TryAdmit(context.Background(), admission.Request{Tenant: "t", Tokens: 1 + rng.Int64N(60)})
				var rej *admission.Rejection
				switch {
				case err == nil:
					admitted++
					for _, s := range tk.Statuses(nil) {
						check(i, "admitted", s)
					}
					open = append(open, tk)
				case errors.As(err, &rej):
					rejected++
					check(i, "rejection", rej.Status)
				default:
					t.Fatal(err)
				}
			}
			for _, tk := range open {
				tk.Done()
			}
			if admitted == 0 || rejected == 0 {
				t.Fatalf("%s seed %d: %d admitted, %d rejected: the traffic does not exercise the limit", p.Name, seed, admitted, rejected)
			}
		}
	}
}

// TestTicketQueueWait: a ticket admitted after waiting in a queue tells
// how long; one admitted at once, or settled, tells zero.
func TestTicketQueueWait(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "cc", Algorithm: limits.Concurrency, Limit: 1, Queue: limits.Queue{Size: 1},
	}}}, admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := c.Admit(ctx, admission.Request{})
	if err != nil || first.QueueWait() != 0 {
		t.Fatalf("first Admit = %v, QueueWait %v; want admitted at once", err, first.QueueWait())
	}
	done := make(chan admission.Ticket)
	go func() {
		tk, err := c.Admit(ctx, admission.Request{})
		if err != nil {
			t.Error(err)
		}
		done <- tk
	}()
	poll.Until(t, time.Second, "the second request to queue", func() bool { return c.Stats()[0].Queued == 1 })
	clock.Advance(750 * time.Millisecond)
	first.Done()
	second := <-done
	if got := second.QueueWait(); got != 750*time.Millisecond {
		t.Errorf("queued for 750ms: QueueWait() = %v; want 750ms", got)
	}
	second.Done()
	if got := second.QueueWait(); got != 0 {
		t.Errorf("settled: QueueWait() = %v; want 0", got)
	}
}
