package admission_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

const (
	interactive = 10 // priority of the interactive class
	batch       = 0
)

// interactiveShare reserves 70% for interactive traffic, which leaves 30%
// to every other class.
var interactiveShare = []limits.Share{{Priority: interactive, Percent: 70}}

// enqueueClasses queues n requests of each class, batch first, each class
// from several tenants.
func enqueueClasses(t *testing.T, c *admission.Controller, rec *recorder, n int, out chan<- result) {
	t.Helper()
	ctx := context.Background()
	for _, class := range []struct {
		name string
		prio int
	}{{"batch", batch}, {"interactive", interactive}} {
		for i := range n {
			enqueue(t, c, rec, ctx, admission.Request{Tenant: fmt.Sprintf("%s-%d", class.name, i%3), Priority: class.prio}, class.name, out)
		}
	}
}

// TestQueueSharesConcurrency: on a shared concurrency cap, interactive
// and batch requests waiting together are served 70/30 (each at least its
// share, within one request), not strictly by priority; once no
// interactive request waits, batch borrows every slot.
func TestQueueSharesConcurrency(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, concurrencyPolicy(1, limits.Queue{Size: 100, Shares: interactiveShare}, limits.KeyGlobal))
	holder, err := c.Admit(context.Background(), admission.Request{Tenant: "first"})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan result, 40)
	enqueueClasses(t, c, rec, 20, out)
	served := map[string]int{}
	var order []string
	for i := range 40 {
		holder.Done()
		r := receive(t, "a waiter to be served", out)
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		holder = r.tk
		order = append(order, r.name)
		if i < 20 {
			served[r.name]++
		}
	}
	holder.Done()
	if served["interactive"] < 13 || served["batch"] < 5 {
		t.Errorf("first 20 served: %v; want interactive >= 13 and batch >= 5 (70%%/30%% within one request)\norder %v", served, order)
	}
	last := order[len(order)-1]
	if last != "batch" {
		t.Errorf("last served %s; want batch, which borrows the slots interactive no longer needs", last)
	}
}

// TestQueueSharesRate: the same on a global rate limit of one request per
// 100ms, served on the fake clock as the bucket refills.
func TestQueueSharesRate(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	p := admission.Policy{
		Name: "rps", Algorithm: limits.TokenBucket, Limit: 10, Per: time.Second, Burst: 1,
		Queue: limits.Queue{Size: 100, Shares: interactiveShare},
	}
	c := newController(t, clock, rec, p)
	if _, err := c.Admit(context.Background(), admission.Request{Tenant: "first"}); err != nil {
		t.Fatal(err)
	}
	out := make(chan result, 20)
	enqueueClasses(t, c, rec, 10, out)
	served := map[string]int{}
	for i := range 10 {
		clock.Advance(100 * time.Millisecond)
		r := receive(t, "a waiter to be served", out)
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		served[r.name]++
	}
	if served["interactive"] < 6 || served["batch"] < 2 {
		t.Errorf("10 served: %v; want interactive >= 6 and batch >= 2 (70%%/30%% within one request)", served)
	}
}

// TestQueueSharesConcurrencyHeld: on a concurrency cap a share is a share
// of the permits held. Batch requests that run long must not take over
// the slots interactive requests, short ones, free: while interactive
// requests wait, batch holds at most its 30% of the 10 slots.
func TestQueueSharesConcurrencyHeld(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, concurrencyPolicy(10, limits.Queue{Size: 100, Shares: interactiveShare}, limits.KeyGlobal))
	ctx := context.Background()
	var short []admission.Ticket // interactive tickets, settled one by one
	for range 10 {
		tk, err := c.Admit(ctx, admission.Request{Tenant: "i", Priority: interactive})
		if err != nil {
			t.Fatal(err)
		}
		short = append(short, tk)
	}
	out := make(chan result, 80)
	enqueueClasses(t, c, rec, 40, out)
	held := map[string]int{"interactive": 10}
	// 40 steps: 37 interactive and 3 batch requests admitted, so some of
	// either class still waits at the end.
	for i := range 40 {
		tk := short[0]
		short = short[1:]
		tk.Done()
		held["interactive"]--
		r := receive(t, "a waiter to be served", out)
		if r.err != nil {
			t.Fatalf("step %d: %v", i, r.err)
		}
		held[r.name]++
		if r.name == "interactive" {
			short = append(short, r.tk)
		} // batch tickets run on: never settled here
		if held["batch"] > 3 {
			t.Fatalf("step %d: batch holds %d of 10 slots while interactive requests wait; want at most 3 (30%%)", i, held["batch"])
		}
	}
	if held["batch"] != 3 || held["interactive"] != 7 {
		t.Errorf("held %v; want batch 3, interactive 7", held)
	}
}
