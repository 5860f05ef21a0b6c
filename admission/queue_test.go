package admission_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/poll"
)

// patience is how long a wait of these tests goes before it logs that it
// still waits. No wait has a deadline (package poll): a wait that can
// never end runs into the test binary's -timeout, whose report shows it.
const patience = 20 * time.Second

// waitFor waits until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, patience, what, cond)
}

// receive returns the next value from ch, logging every patience that it
// still waits.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(patience)
	defer timer.Stop()
	for {
		select {
		case v := <-ch:
			return v
		case <-timer.C:
			t.Logf("still waiting for %s", what)
			timer.Reset(patience)
		}
	}
}

type result struct {
	name string
	tk   admission.Ticket
	err  error
}

// enqueue starts an Admit in a goroutine and waits until it is queued.
func enqueue(t *testing.T, c *admission.Controller, rec *recorder, ctx context.Context, r admission.Request, name string, out chan<- result) {
	t.Helper()
	// Count only this tenant's Queued decisions: other goroutines may
	// report theirs late, after Stats already shows them waiting.
	before := rec.queuedOf(r.Tenant)
	go func() {
		tk, err := c.Admit(ctx, r)
		out <- result{name, tk, err}
	}()
	waitFor(t, name+" to queue", func() bool { return rec.queuedOf(r.Tenant) > before })
}

func concurrencyPolicy(limit int64, q limits.Queue, key ...limits.KeyPart) admission.Policy {
	return admission.Policy{Name: "inflight", Key: key, Algorithm: limits.Concurrency, Limit: limit, Queue: q}
}

func TestQueueOrder(t *testing.T) {
	for _, order := range []limits.Order{limits.OldestFirst, limits.NewestFirst} {
		t.Run(order.String(), func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			rec := &recorder{}
			c := newController(t, clock, rec, concurrencyPolicy(1, limits.Queue{Size: 3, Order: order}, limits.KeyTenant))
			ctx := context.Background()
			holder, err := c.Admit(ctx, admission.Request{Tenant: "a"})
			if err != nil {
				t.Fatal(err)
			}
			out := make(chan result, 4)
			for i := 1; i <= 3; i++ {
				enqueue(t, c, rec, ctx, admission.Request{Tenant: "a", Operation: fmt.Sprint(i)}, fmt.Sprint(i), out)
			}
			// The queue holds 3: a fourth is refused at once.
			_, err = c.Admit(ctx, admission.Request{Tenant: "a"})
			if !errors.Is(err, admission.ErrQueueFull) {
				t.Fatalf("fourth waiter: err = %v; want ErrQueueFull", err)
			}
			var served []string
			holder.Done()
			for i := 0; i < 3; i++ {
				r := receive(t, "a waiter to be served", out)
				if r.err != nil {
					t.Fatal(r.err)
				}
				served = append(served, r.name)
				r.tk.Done()
			}
			want := "[1 2 3]"
			if order == limits.NewestFirst {
				want = "[3 2 1]"
			}
			if fmt.Sprint(served) != want {
				t.Errorf("served %v; want %s", served, want)
			}
		})
	}
}

func TestQueueTimeoutAndDeadline(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, concurrencyPolicy(1, limits.Queue{Size: 5, Timeout: 2 * time.Second}, limits.KeyTenant))
	ctx := context.Background()
	holder, err := c.Admit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan result, 1)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a"}, "w", out)
	clock.Advance(1999 * time.Millisecond)
	// The clock runs the timeout, if due, within Advance: still queued.
	if n := c.Stats()[0].Queued; n != 1 {
		t.Fatalf("after 1999ms: %d queued; want the waiter still in the queue", n)
	}
	clock.Advance(time.Millisecond)
	r := receive(t, "the queue timeout", out)
	var rej *admission.Rejection
	if !errors.As(r.err, &rej) || rej.Reason != admission.ReasonQueueTimeout || !errors.Is(r.err, admission.ErrQueueTimeout) {
		t.Fatalf("after the queue timeout: err = %v", r.err)
	}
	if n := rec.count(admission.Timeout); n != 1 {
		t.Errorf("timeout decisions = %d; want 1", n)
	}
	// A caller's own deadline ends the wait too, as a queue timeout.
	dctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	_, err = c.Admit(dctx, admission.Request{Tenant: "a"})
	if !errors.Is(err, admission.ErrQueueTimeout) {
		t.Fatalf("deadline while queued: err = %v", err)
	}
	// Cancellation is the caller's error, not a rejection.
	cctx, cancel2 := context.WithCancel(ctx)
	enqueue(t, c, rec, cctx, admission.Request{Tenant: "a"}, "c", out)
	cancel2()
	if r := receive(t, "the canceled waiter", out); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled while queued: err = %v", r.err)
	}
	holder.Done()
	if tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"}); err != nil {
		t.Fatalf("slot leaked by the waiters that left: %v", err)
	} else {
		tk.Done()
	}
}

// emptyRateQueue returns a controller with one token a second per tenant
// and a queue, whose tenant "a" has just used its token.
func emptyRateQueue(t *testing.T) (*admissiontest.Clock, *recorder, *admission.Controller) {
	t.Helper()
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, admission.Policy{
		Name: "rps", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 1, Per: time.Second,
		Queue: limits.Queue{Size: 10, Timeout: 5 * time.Second},
	})
	tk, err := c.Admit(context.Background(), admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	tk.Done()
	return clock, rec, c
}

func TestRateQueue(t *testing.T) {
	clock, rec, c := emptyRateQueue(t)
	ctx := context.Background()
	out := make(chan result, 2)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a"}, "1", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a"}, "2", out)
	clock.Advance(time.Second)
	r := receive(t, "the first waiter", out)
	if r.err != nil || r.name != "1" {
		t.Fatalf("after 1s: %s %v; want 1 admitted", r.name, r.err)
	}
	// The clock runs the queue's dispatch within Advance: 2 still waits.
	if n := c.Stats()[0].Queued; n != 1 {
		t.Fatalf("after 1s: %d queued; want 2 still waiting for its token", n)
	}
	clock.Advance(time.Second)
	if r := receive(t, "the second waiter", out); r.err != nil || r.name != "2" {
		t.Fatalf("after 2s: %s %v", r.name, r.err)
	}
	// A request that cannot fit before the queue timeout is refused at
	// once with the rate's retry-after instead of queueing to time out.
	big := admission.Request{Tenant: "b", Operation: "x"}
	c2 := newController(t, clock, nil, admission.Policy{
		Name: "tpm", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 60, Per: time.Minute,
		Queue: limits.Queue{Size: 10, Timeout: 5 * time.Second},
	})
	big.Tokens = 60
	if tk, err := c2.Admit(ctx, big); err != nil {
		t.Fatal(err)
	} else {
		tk.Done()
	}
	big.Tokens = 10
	_, err := c2.Admit(ctx, big)
	var rej *admission.Rejection
	if !errors.As(err, &rej) || rej.Reason != admission.ReasonRate || rej.RetryAfter != 10*time.Second {
		t.Fatalf("hopeless wait: err = %v; want an immediate rate rejection with retry 10s", err)
	}
}

func TestQueuePriority(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, concurrencyPolicy(1, limits.Queue{Size: 10}))
	ctx := context.Background()
	holder, _ := c.Admit(ctx, admission.Request{Tenant: "a"})
	out := make(chan result, 3)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a", Priority: 0}, "low", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "b", Priority: 5}, "high", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "c", Priority: 1}, "mid", out)
	holder.Done()
	var served []string
	for i := 0; i < 3; i++ {
		r := receive(t, "a waiter to be served", out)
		served = append(served, r.name)
		r.tk.Done()
	}
	if fmt.Sprint(served) != "[high mid low]" {
		t.Errorf("served %v; want [high mid low]", served)
	}
}

// TestQueueFairness: a noisy tenant's backlog on a shared cap must not
// delay a quiet tenant's request behind all of it.
func TestQueueFairness(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, concurrencyPolicy(1, limits.Queue{Size: 2000}, limits.KeyGlobal))
	ctx := context.Background()
	holder, err := c.Admit(ctx, admission.Request{Tenant: "noisy"})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan result, 1001)
	for i := 0; i < 1000; i++ {
		go func() {
			tk, err := c.Admit(ctx, admission.Request{Tenant: "noisy"})
			out <- result{"noisy", tk, err}
		}()
	}
	waitFor(t, "1000 noisy waiters", func() bool { return c.Stats()[0].Queued == 1000 })
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "quiet"}, "quiet", out)
	holder.Done()
	served := 1
	for ; ; served++ {
		r := receive(t, "a waiter to be served", out)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.name == "quiet" {
			// Round robin: at most one noisy request before the quiet one.
			if served > 2 {
				t.Errorf("quiet tenant served %d-th; want within 2", served)
			}
			r.tk.Done()
			break
		}
		r.tk.Done()
	}
	// Drain the rest: the noisy waiters not served before the quiet one
	// (served-1 of them were), so that a late quiet tenant fails the test
	// above rather than hanging it here.
	for i := served - 1; i < 1000; i++ {
		r := receive(t, "a noisy waiter to be served", out)
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.tk.Done()
	}
	if s := c.Stats()[0]; s.Queued != 0 || s.InFlight != 0 {
		t.Errorf("after draining: queued %d, in flight %d", s.Queued, s.InFlight)
	}
}

// TestCancellationStorm: 10,000 waiters give up; no slot leaks and every
// goroutine ends.
func TestCancellationStorm(t *testing.T) {
	baseline := runtime.NumGoroutine()
	c := newController(t, admission.SystemClock{}, nil, concurrencyPolicy(3, limits.Queue{Size: 20000}, limits.KeyGlobal))
	ctx := context.Background()
	var holders []admission.Ticket
	for i := 0; i < 3; i++ {
		tk, err := c.Admit(ctx, admission.Request{Tenant: "h"})
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, tk)
	}
	cctx, cancel := context.WithCancel(ctx)
	var ended atomic.Int64
	var mu sync.Mutex
	errs := map[string]int{}
	for i := 0; i < 10000; i++ {
		go func() {
			defer ended.Add(1)
			tk, err := c.Admit(cctx, admission.Request{Tenant: fmt.Sprintf("t%d", i%50)})
			if err == nil {
				tk.Done()
			}
			mu.Lock()
			errs[fmt.Sprint(err)]++
			mu.Unlock()
		}()
	}
	waitFor(t, "10000 waiters", func() bool { return c.Stats()[0].Queued == 10000 })
	// Release one holder while the storm cancels: some waiters may win the
	// slot, the rest are canceled.
	go holders[0].Done()
	cancel()
	waitFor(t, "10000 waiters to return", func() bool { return ended.Load() == 10000 })
	holders[1].Done()
	holders[2].Done()
	if s := c.Stats()[0]; s.Queued != 0 || s.InFlight != 0 {
		t.Fatalf("after the storm: queued %d, in flight %d; want 0, 0 (%v)", s.Queued, s.InFlight, errs)
	}
	for i := 0; i < 3; i++ {
		if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "x"}); err != nil {
			t.Fatalf("slot %d leaked: %v", i, err)
		}
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= baseline+2 })
	if errs[context.Canceled.Error()] == 0 {
		t.Errorf("no waiter saw its cancellation: %v", errs)
	}
}

// TestQueueTimeoutRacesGrant: a queue timeout firing while the waiter is
// being served must not touch the waiter's ticket, which the controller
// reuses at once (run with -race).
func TestQueueTimeoutRacesGrant(t *testing.T) {
	c := newController(t, admission.SystemClock{}, nil, concurrencyPolicy(1, limits.Queue{Size: 4, Timeout: time.Millisecond}, limits.KeyTenant))
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 300 && time.Now().Before(deadline); i++ {
		holder, err := c.Admit(ctx, admission.Request{Tenant: "a"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if tk, err := c.Admit(ctx, admission.Request{Tenant: "a", Model: "m"}); err == nil {
				tk.Done()
			}
		}()
		time.Sleep(time.Duration(i%3) * 400 * time.Microsecond)
		holder.Done()
		receive(t, "the racing waiter to return", done)
		// Reuse tickets while late timers may still fire.
		for j := 0; j < 3; j++ {
			if tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "b", Operation: "x"}); err == nil {
				tk.Done()
			}
		}
	}
	if s := c.Stats()[0]; s.Queued != 0 || s.InFlight != 0 {
		t.Fatalf("queued %d, in flight %d after the races; want 0, 0", s.Queued, s.InFlight)
	}
}

// TestTryAdmitBehindWaiters: a request that will not wait is refused while
// others wait, with the time the queue is next served as its retry-after.
func TestTryAdmitBehindWaiters(t *testing.T) {
	clock, rec, c := emptyRateQueue(t)
	ctx := context.Background()
	out := make(chan result, 1)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a"}, "w", out)
	clock.Advance(300 * time.Millisecond)
	// The bucket has 0.3 tokens and a waiter is first in line: TryAdmit is
	// refused even once a token is there, and told when the queue moves.
	_, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"})
	var rej *admission.Rejection
	if !errors.As(err, &rej) || rej.Reason != admission.ReasonRate || rej.RetryAfter != 700*time.Millisecond {
		t.Fatalf("TryAdmit behind a waiter: %v; want a rate rejection with retry 700ms", err)
	}
	clock.Advance(700 * time.Millisecond)
	if r := receive(t, "the waiter", out); r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	} else {
		r.tk.Done()
	}
}

// TestQueueRemovedOnReload: a reload that removes a policy's queue makes
// the next request over the limit rejected at once, not queued.
func TestQueueRemovedOnReload(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	p := concurrencyPolicy(1, limits.Queue{Size: 4}, limits.KeyTenant)
	c := newController(t, clock, nil, p)
	ctx := context.Background()
	holder, err := c.Admit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	p.Queue = limits.Queue{}
	if err := c.SetConfig(admission.Config{Policies: []admission.Policy{p}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Admit(ctx, admission.Request{Tenant: "a"})
		done <- err
	}()
	// Answered while the holder still holds its permit: a request that
	// queued would wait for it.
	if err := receive(t, "the answer over the cap without a queue", done); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("over the cap without a queue: err = %v; want ErrConcurrencyLimited", err)
	}
	holder.Done()
}

// clockMover moves a fake clock by d when it sees a request queued, as a
// test or a timer does when the waiter's goroutine is descheduled right
// after joining the queue.
type clockMover struct {
	admission.NopObserver
	clock *admissiontest.Clock
	d     time.Duration
}

func (m clockMover) Decision(d *admission.Decision) {
	if d.Outcome == admission.Queued {
		m.clock.Advance(m.d)
	}
}

// TestQueueTimeoutCountsFromJoining: the queue timeout runs from the moment
// a request joins the queue, so the clock reaching that moment plus the
// timeout ends the wait even when it gets there before the waiter's
// goroutine runs again.
func TestQueueTimeoutCountsFromJoining(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, clockMover{clock: clock, d: 2 * time.Second},
		concurrencyPolicy(1, limits.Queue{Size: 5, Timeout: 2 * time.Second}, limits.KeyTenant))
	ctx := context.Background()
	holder, err := c.Admit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Done()
	out := make(chan error, 1)
	go func() {
		_, err := c.Admit(ctx, admission.Request{Tenant: "a"})
		out <- err
	}()
	if err := receive(t, "the queue timeout", out); !errors.Is(err, admission.ErrQueueTimeout) {
		t.Fatalf("Admit = %v; want ErrQueueTimeout", err)
	}
	if s := c.Stats()[0]; s.Queued != 0 || s.InFlight != 1 {
		t.Errorf("queued %d, in flight %d; want 0, 1", s.Queued, s.InFlight)
	}
}

// TestQueuePerTenant: on a global policy, a tenant that has its
// queue.per_tenant places waiting is refused queue_full, and another
// tenant still finds a place, is served in turn, and nothing leaks.
func TestQueuePerTenant(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, concurrencyPolicy(1, limits.Queue{Size: 4, PerTenant: 2}, limits.KeyGlobal))
	ctx := context.Background()
	holder, err := c.Admit(ctx, admission.Request{Tenant: "noisy"})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan result, 4)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "noisy"}, "noisy", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "noisy", Priority: 5}, "noisy", out)
	// Its two places are taken, in any class: a third is refused at once,
	// although the queue has room.
	_, err = c.Admit(ctx, admission.Request{Tenant: "noisy"})
	var rej *admission.Rejection
	if !errors.As(err, &rej) || rej.Reason != admission.ReasonQueueFull {
		t.Fatalf("noisy's third waiter: err = %v; want queue_full", err)
	}
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "quiet"}, "quiet", out)
	holder.Done()
	for i := 0; i < 3; i++ {
		r := receive(t, "a waiter to be served", out)
		if r.err != nil {
			t.Fatalf("%s: %v", r.name, r.err)
		}
		r.tk.Done()
	}
	if s := c.Stats()[0]; s.Queued != 0 || s.InFlight != 0 {
		t.Errorf("after draining: queued %d, in flight %d", s.Queued, s.InFlight)
	}
}

// TestQueueFullHint: a request refused because a rate policy's queue is
// full is told to retry when the policy's rate has served the waiters
// ahead of it (not at once, as it would find the same full queue): the
// whole queue's tokens, or, when only the tenant's part of it is full,
// its own waiters' tokens once a turn of the tenants waiting.
func TestQueueFullHint(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, admission.Policy{
		Name: "tpm", Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 600, Per: time.Minute, // 10 tokens a second
		Queue: limits.Queue{Size: 4, PerTenant: 2, Timeout: time.Hour},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if tk, err := c.Admit(ctx, admission.Request{Tenant: "x", Tokens: 600}); err != nil {
		t.Fatal(err)
	} else {
		tk.Done()
	}
	out := make(chan result, 4)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a", Tokens: 50}, "a1", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a", Tokens: 50}, "a2", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "b", Tokens: 200}, "b", out)
	for _, tc := range []struct {
		tenant string
		want   time.Duration
	}{
		// a's part is full: its 100 tokens, once a turn of a and b.
		{"a", 20 * time.Second},
	} {
		_, err := c.Admit(ctx, admission.Request{Tenant: tc.tenant, Tokens: 10})
		var rej *admission.Rejection
		if !errors.As(err, &rej) || rej.Reason != admission.ReasonQueueFull || rej.RetryAfter != tc.want {
			t.Errorf("%s, its part of the queue full: %v; want queue_full, retry after %v", tc.tenant, err, tc.want)
		}
	}
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "c", Tokens: 100}, "c", out)
	// The queue is full: its 400 tokens take 40s.
	_, err := c.Admit(ctx, admission.Request{Tenant: "d", Tokens: 10})
	var rej *admission.Rejection
	if !errors.As(err, &rej) || rej.Reason != admission.ReasonQueueFull || rej.RetryAfter != 40*time.Second {
		t.Errorf("the queue full: %v; want queue_full, retry after 40s", err)
	}
	// Served, the waiters leave room: d's retry after the hint is queued.
	clock.Advance(40 * time.Second)
	for range 4 {
		if r := receive(t, "a waiter", out); r.err != nil {
			t.Fatalf("%s: %v", r.name, r.err)
		}
	}
	if n := c.Stats()[0].Queued; n != 0 {
		t.Errorf("after the hint: %d still wait; want 0", n)
	}
}
