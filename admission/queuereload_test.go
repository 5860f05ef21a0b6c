package admission_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// queueUp starts n requests of tenant on c one after the other, each
// admitted or queued before the next arrives, and returns the channel
// their tickets arrive on once admitted.
func queueUp(t *testing.T, c *admission.Controller, tenant string, n int) <-chan admission.Ticket {
	served := make(chan admission.Ticket, n)
	for range n {
		go func() {
			tk, err := c.Admit(context.Background(), admission.Request{Tenant: tenant})
			if err != nil {
				t.Error(err)
				return
			}
			served <- tk
		}()
		synctest.Wait()
	}
	return served
}

// TestQueueServedUnderReloadedCap: a reload that lowers a concurrency cap
// applies to the requests already waiting in its queue, as to those
// arriving: with 3 running under a cap of 3 lowered to 1, a waiter is
// served only once none runs; one that raises it (1 to 3) lets the
// waiters in at the queue's next attempt, without waiting for the
// running request to end. Before, a waiter was served under the cap it
// queued under: 3 ran under a cap of 1, and waiters stayed queued after a
// raise until the queue timed them out.
func TestQueueServedUnderReloadedCap(t *testing.T) {
	p := admission.Policy{Name: "tenant", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 3,
		Queue: limits.Queue{Size: 10, Timeout: time.Hour}}
	reload := func(t *testing.T, c *admission.Controller, limit int64) {
		t.Helper()
		q := p
		q.Limit = limit
		if err := c.SetConfig(admission.Config{Policies: []admission.Policy{q}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("lowered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			c := newController(t, clock, nil, p)
			served := queueUp(t, c, "a", 5)
			if got := queuedOn(c, "tenant"); got != 2 {
				t.Fatalf("queued = %d; want 2", got)
			}
			reload(t, c, 1)
			// The requests end one by one in the order they were
			// admitted: the first waiter is served once the three
			// running ones have ended, the second after it.
			for i, want := range []int64{2, 1, 1, 1, 0} {
				(<-served).Done()
				clock.Advance(time.Second) // the queue's next attempts
				synctest.Wait()
				if got := inFlight(c)["tenant"]; got != want {
					t.Errorf("in flight after %d ended = %d; want %d under the reloaded cap of 1", i+1, got, want)
				}
			}
		})
	})
	t.Run("raised", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			q := p
			q.Limit = 1
			c := newController(t, clock, nil, q)
			served := queueUp(t, c, "a", 3)
			reload(t, c, 3)
			clock.Advance(time.Second) // the queue's next attempt
			synctest.Wait()
			if got, q := inFlight(c)["tenant"], queuedOn(c, "tenant"); got != 3 || q != 0 {
				t.Errorf("after a reload raising the cap to 3: %d in flight, %d queued; want 3 and 0", got, q)
			}
			for range 3 {
				(<-served).Done()
			}
		})
	})
}

// TestQueueRetakesUnderReloadedCap: a waiter gives back the global cap's
// permit it took while it waits in its tenant's queue, and takes it again
// when served: under the global cap in force then. With the global cap
// lowered from 2 to 1 while tenant b's request holds one permit, a's
// waiter is not served when a's running request ends, only once b's has.
func TestQueueRetakesUnderReloadedCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := admissiontest.NewClock(backendtest.Epoch)
		global := admission.Policy{Name: "global", Key: []limits.KeyPart{limits.KeyGlobal}, Algorithm: limits.Concurrency, Limit: 2}
		tenant := admission.Policy{Name: "tenant", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 1,
			Queue: limits.Queue{Size: 10, Timeout: time.Hour}}
		c := newController(t, clock, nil, global, tenant)
		served := queueUp(t, c, "a", 2)
		b, err := c.TryAdmit(context.Background(), admission.Request{Tenant: "b"})
		if err != nil {
			t.Fatal(err)
		}
		global.Limit = 1
		if err := c.SetConfig(admission.Config{Policies: []admission.Policy{global, tenant}}); err != nil {
			t.Fatal(err)
		}
		(<-served).Done()
		clock.Advance(time.Second)
		synctest.Wait()
		if got := inFlight(c); got["global"] != 1 || got["tenant"] != 1 {
			t.Errorf("in flight after a's running request ended = %v; want b's alone (global 1, tenant 1): the global cap is 1", got)
		}
		b.Done()
		clock.Advance(time.Second)
		synctest.Wait()
		if got := inFlight(c); got["global"] != 1 || got["tenant"] != 1 {
			t.Errorf("in flight after b's request ended = %v; want a's waiter served alone: global 1, tenant 1", got)
		}
		(<-served).Done()
	})
}
