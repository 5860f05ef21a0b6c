package admission_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// inFlight returns the cost in flight of each policy of c, by name.
func inFlight(c *admission.Controller) map[string]int64 {
	m := map[string]int64{}
	for _, s := range c.Stats() {
		m[s.Name] = s.InFlight
	}
	return m
}

// statsOf returns the stats of c's policy name; Queued and Held are -1
// when there is none.
func statsOf(c *admission.Controller, name string) admission.PolicyStats {
	for _, s := range c.Stats() {
		if s.Name == name {
			return s
		}
	}
	return admission.PolicyStats{Queued: -1, Held: -1}
}

// queuedOn returns the number of requests waiting in c's policy name.
func queuedOn(c *admission.Controller, name string) int { return statsOf(c, name).Queued }

// TestQueueHoldsNoOtherPermits: a request waiting in a tenant's queue
// holds no permit of the global cap decided before it. With a global cap
// of 4 and tenant a's cap of 2 with a queue, 7 requests of a run 2 and
// queue 5, and b's request is admitted under the global cap; a's waiters
// are served as a's requests end, each taking its global permit again.
func TestQueueHoldsNoOtherPermits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := admissiontest.NewClock(backendtest.Epoch)
		c := newController(t, clock, nil,
			admission.Policy{Name: "global", Key: []limits.KeyPart{limits.KeyGlobal}, Algorithm: limits.Concurrency, Limit: 4},
			admission.Policy{Name: "tenant", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 2,
				Queue: limits.Queue{Size: 10, Timeout: time.Minute}})
		ctx := context.Background()
		served := make(chan admission.Ticket, 7)
		for range 7 {
			go func() {
				tk, err := c.Admit(ctx, admission.Request{Tenant: "a"})
				if err != nil {
					t.Error(err)
				}
				served <- tk
			}()
			// One after the other: each is admitted or queued before
			// the next arrives.
			synctest.Wait()
		}
		// Errors, not fatal ones, from here: the requests must all end
		// for the bubble to.
		if got := queuedOn(c, "tenant"); got != 5 {
			t.Errorf("a's requests queued = %d; want 5", got)
		}
		if got := inFlight(c); got["global"] != 2 || got["tenant"] != 2 {
			t.Errorf("in flight with 5 of a's requests queued = %v; want global 2, tenant 2", got)
		}
		b, err := c.TryAdmit(ctx, admission.Request{Tenant: "b"})
		if err != nil {
			t.Errorf("b's request with 2 of the global cap's 4 permits held: %v; want admitted", err)
		}
		for i := range 7 {
			(<-served).Done()
			synctest.Wait()
			if got, want := inFlight(c)["global"], int64(1+min(2, 6-i)); got != want {
				t.Errorf("global in flight after %d of a's requests ended = %d; want %d", i+1, got, want)
			}
		}
		b.Done()
		if got := inFlight(c); got["global"] != 0 || got["tenant"] != 0 {
			t.Errorf("in flight after every request ended = %v; want none", got)
		}
	})
}

// TestQueueRetakesAllOrNothing: a waiter whose own policy has room again
// while the global cap it gave back is full keeps its place and takes
// nothing, then is served once the global cap has room, holding both.
func TestQueueRetakesAllOrNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := admissiontest.NewClock(backendtest.Epoch)
		c := newController(t, clock, nil,
			admission.Policy{Name: "global", Key: []limits.KeyPart{limits.KeyGlobal}, Algorithm: limits.Concurrency, Limit: 4, MaxHold: time.Hour},
			admission.Policy{Name: "tenant", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 2, MaxHold: 10 * time.Second,
				Queue: limits.Queue{Size: 10, Timeout: time.Minute}})
		c.Close() // leases are renewed only by their callers, who renew none here
		ctx := context.Background()
		var running []admission.Ticket
		for range 2 {
			tk, err := c.Admit(ctx, admission.Request{Tenant: "a"})
			if err != nil {
				t.Fatal(err)
			}
			running = append(running, tk)
		}
		served := make(chan error, 1)
		var third admission.Ticket
		go func() {
			var err error
			third, err = c.Admit(ctx, admission.Request{Tenant: "a"})
			served <- err
		}()
		synctest.Wait()
		var others []admission.Ticket
		for _, tenant := range []string{"b", "c"} {
			tk, err := c.TryAdmit(ctx, admission.Request{Tenant: tenant})
			if err != nil {
				t.Fatalf("%s: %v; want admitted while a's third request waits", tenant, err)
			}
			others = append(others, tk)
		}
		if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "d"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
			t.Fatalf("d with 4 requests running: %v; want the global cap's refusal", err)
		}
		// a's two running requests lose their tenant leases (never
		// renewed), not their global ones: the waiter's own policy has
		// room, the global cap none.
		clock.Advance(10 * time.Second)
		synctest.Wait()
		select {
		case err := <-served:
			t.Fatalf("a's third request served with the global cap full (err %v)", err)
		default:
		}
		if got := inFlight(c); got["global"] != 4 || got["tenant"] != 0 {
			t.Fatalf("in flight while the waiter cannot be served = %v; want global 4, tenant 0", got)
		}
		others[0].Done()
		clock.Advance(time.Second)
		synctest.Wait()
		if err := <-served; err != nil {
			t.Fatalf("a's third request once the global cap has room: %v", err)
		}
		if got := inFlight(c); got["global"] != 4 || got["tenant"] != 1 {
			t.Fatalf("in flight once the waiter is served = %v; want global 4, tenant 1", got)
		}
		for _, tk := range append(running, others[1], third) {
			tk.Done()
		}
		if got := inFlight(c); got["global"] != 0 || got["tenant"] != 0 {
			t.Errorf("in flight after every request ended = %v; want none", got)
		}
	})
}

// TestQueueGivesBackBegunPermits: a staged request waiting in a queue at
// Continue gives back the permits Begin took too, and takes them again
// when served.
func TestQueueGivesBackBegunPermits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := admissiontest.NewClock(backendtest.Epoch)
		c := newController(t, clock, nil,
			admission.Policy{Name: "global", Key: []limits.KeyPart{limits.KeyGlobal}, Algorithm: limits.Concurrency, Limit: 2},
			admission.Policy{Name: "tenant", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 1,
				Queue: limits.Queue{Size: 10, Timeout: time.Minute}})
		ctx := context.Background()
		first, err := c.Admit(ctx, admission.Request{Tenant: "a"})
		if err != nil {
			t.Fatal(err)
		}
		second, err := c.Begin(ctx, admission.Request{Tenant: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if got := inFlight(c)["global"]; got != 2 {
			t.Fatalf("global in flight after Begin = %d; want 2", got)
		}
		continued := make(chan error, 1)
		go func() { continued <- second.Continue(ctx, admission.Request{Tenant: "a"}) }()
		synctest.Wait()
		if got := inFlight(c)["global"]; got != 1 {
			t.Errorf("global in flight while the second request waits = %d; want 1", got)
		}
		b, err := c.TryAdmit(ctx, admission.Request{Tenant: "b"})
		if err != nil {
			t.Errorf("b's request while a's second waits: %v; want admitted", err)
		}
		first.Done()
		synctest.Wait()
		if err := <-continued; err != nil {
			t.Fatalf("a's second request once a's first ended: %v", err)
		}
		// a's second request and b's, each under its own tenant's cap.
		if got := inFlight(c); got["global"] != 2 || got["tenant"] != 2 {
			t.Errorf("in flight once the second request is served = %v; want global 2, tenant 2", got)
		}
		second.Done()
		b.Done()
		if got := inFlight(c); got["global"] != 0 || got["tenant"] != 0 {
			t.Errorf("in flight after every request ended = %v; want none", got)
		}
	})
}

// TestLeaseAfterLongWait: a request that waited in a queue longer than
// MaxHold keeps the leases it takes after the wait, and those it took
// again when served. a's second request waits a minute for its
// per-minute rate; the concurrency cap it then passes (MaxHold 30s) takes
// a lease that starts then, not when the request arrived: b is refused
// by the cap while a's request runs, and a's Renew finds its lease held.
// Before, the lease was taken as of the arrival instant, so born expired:
// the first renewal lost it.
func TestLeaseAfterLongWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := admissiontest.NewClock(backendtest.Epoch)
		c := newController(t, clock, nil,
			admission.Policy{Name: "rpm", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 1, Per: time.Minute,
				Queue: limits.Queue{Size: 4, Timeout: 10 * time.Minute}},
			admission.Policy{Name: "cap", Key: []limits.KeyPart{limits.KeyGlobal}, Algorithm: limits.Concurrency, Limit: 1, MaxHold: 30 * time.Second,
				Queue: limits.Queue{Size: 4, Timeout: 10 * time.Minute}})
		defer c.Close()
		ctx := context.Background()
		first, err := c.Admit(ctx, admission.Request{Tenant: "a"})
		if err != nil {
			t.Fatal(err)
		}
		first.Done()
		served := make(chan admission.Ticket, 1)
		go func() {
			tk, err := c.Admit(ctx, admission.Request{Tenant: "a"}) // waits a minute for rpm
			if err != nil {
				t.Error(err)
			}
			served <- tk
		}()
		synctest.Wait()
		clock.Advance(time.Minute)
		synctest.Wait()
		second := <-served
		if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "b"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
			t.Errorf("b while a's request runs: %v; want the cap's refusal", err)
		}
		if err := second.Renew(); err != nil {
			t.Errorf("Renew of a's request after its wait: %v; want its lease held", err)
		}
		second.Done()
		third, err := c.TryAdmit(ctx, admission.Request{Tenant: "b"})
		if err != nil {
			t.Errorf("b once a's request ended: %v", err)
		} else {
			third.Done()
		}
	})
}
