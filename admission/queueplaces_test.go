package admission_test

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// maxHeldWait is the furthest hint a queue holds a place for.
const maxHeldWait = time.Minute

// heldOn returns the places c's policy name holds for retries.
func heldOn(c *admission.Controller, name string) int { return statsOf(c, name).Held }

// spentTokenQueue returns a controller on a fake clock (with the recorder
// of its decisions) whose one policy, tpm, allows 600 tokens a minute (10
// a second) with a queue of six, perTenant of it one tenant's, and whose
// bucket is spent.
func spentTokenQueue(t *testing.T, perTenant int) (*admission.Controller, *admissiontest.Clock, *recorder) {
	t.Helper()
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, admission.Policy{
		Name: "tpm", Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 600, Per: time.Minute,
		Queue: limits.Queue{Size: 6, PerTenant: perTenant, Timeout: time.Hour},
	})
	tk, err := c.Admit(context.Background(), admission.Request{Tenant: "x", Tokens: 600})
	if err != nil {
		t.Fatal(err)
	}
	tk.Done()
	return c, clock, rec
}

// TestQueueHeldPlaces: once a tenant marks its retries, each refusal of
// its requests by a full queue holds a place for the retry: later hints
// count it, the tenant's new requests find it taken (another tenant's
// do not), the retry takes it at its hint (not before), the queue keeps
// it when its waiters are gone, and a place whose retry does not come is
// given up heldGrace after its time. A tenant that does not mark retries
// holds no place.
func TestQueueHeldPlaces(t *testing.T) {
	c, clock, rec := spentTokenQueue(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan result, 8)
	served := func(n int) {
		t.Helper()
		for range n {
			if r := receive(t, "a waiter", out); r.err != nil {
				t.Errorf("%s: %v", r.name, r.err)
			} else {
				r.tk.Done()
			}
		}
	}
	// Each request takes a second of the rate; a1, b1, a2 are served at
	// 1s, 2s and 3s.
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a", Tokens: 10}, "a1", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "b", Tokens: 10}, "b1", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a", Tokens: 10}, "a2", out)
	check := func(what string, queued, held int) {
		t.Helper()
		if q, h := queuedOn(c, "tpm"), heldOn(c, "tpm"); q != queued || h != held {
			t.Errorf("%s: %d queued, %d places held; want %d, %d", what, q, h, queued, held)
		}
	}
	refused := func(what string, r admission.Request, want time.Duration, held int) {
		t.Helper()
		before := heldOn(c, "tpm")
		_, err := c.Admit(ctx, r)
		var rej *admission.Rejection
		if !errors.As(err, &rej) || rej.Reason != admission.ReasonQueueFull || rej.RetryAfter != want {
			t.Fatalf("%s: %v; want queue_full, retry after %v", what, err, want)
		}
		if got := heldOn(c, "tpm"); got != held {
			t.Errorf("after %s: %d places held; want %d", what, got, held)
		}
		// The refusal says whether it holds a place for the retry.
		if rej.Held != (held > before) {
			t.Errorf("%s: Held = %v with %d places held before, %d after", what, rej.Held, before, held)
		}
	}
	// a's part is full: the 30 tokens waiting are served in 3s.
	refused("a's request, retries unmarked", admission.Request{Tenant: "a", Tokens: 10}, 3*time.Second, 0)
	refused("a's first marked retry", admission.Request{Tenant: "a", Tokens: 10, Retry: true}, 3*time.Second, 1)
	// From now on a's refusals hold places, and the hints count the
	// retries they wait for, once a turn of a and b.
	refused("a's next request", admission.Request{Tenant: "a", Tokens: 10}, 5*time.Second, 2)
	clock.Advance(time.Second)
	served(1)
	// a's part has room for one waiter, but its places take it.
	refused("a's request with its places due", admission.Request{Tenant: "a", Tokens: 10}, 6*time.Second, 3)
	// Before its time a retry takes no place.
	refused("a's retry before its time", admission.Request{Tenant: "a", Tokens: 10, Retry: true}, 8*time.Second, 4)
	clock.Advance(2 * time.Second)
	served(2)
	check("the waiters served", 0, 4)
	// Its time (3s): the retry takes its place. Places never refuse
	// another tenant: c finds room.
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a", Tokens: 10, Retry: true}, "a's retry", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "c", Tokens: 10}, "c", out)
	check("the retry took its place", 2, 3)
	// The retry of the place due at 5s never comes: at 7s it is given up.
	clock.Advance(5 * time.Second)
	served(2)
	check("at 8s", 0, 2)
	// The last place is given up at 11s, and the queue with it.
	clock.Advance(4 * time.Second)
	check("at 12s", 0, 0)
}

func isQueueFull(err error) bool {
	var rej *admission.Rejection
	return errors.As(err, &rej) && rej.Reason == admission.ReasonQueueFull
}

// TestQueueHeldPlacesBounded: a retry takes its place only while its
// tenant's waiters are fewer than its part of the queue: however the
// hints went, places never let a tenant have more waiting than its part.
func TestQueueHeldPlacesBounded(t *testing.T) {
	c, clock, rec := spentTokenQueue(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan result, 4)
	// z's request at the head is served at 59s: nobody is before.
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "z", Tokens: 590}, "z", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a", Tokens: 10}, "a1", out)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a", Tokens: 10}, "a2", out)
	for _, r := range []admission.Request{{Tenant: "a", Tokens: 10, Retry: true}, {Tenant: "a", Tokens: 10}} {
		if _, err := c.Admit(ctx, r); !isQueueFull(err) {
			t.Fatalf("a's request with its part full: %v; want queue_full", err)
		}
	}
	if h := heldOn(c, "tpm"); h != 2 {
		t.Fatalf("%d places held; want 2", h)
	}
	clock.Advance(4 * time.Second)
	// Both places are due, but a1 and a2 still fill a's part of two.
	if _, err := c.Admit(ctx, admission.Request{Tenant: "a", Tokens: 10, Retry: true}); !isQueueFull(err) {
		t.Errorf("a's retry with its part full of waiters: %v; want queue_full", err)
	}
	if q := queuedOn(c, "tpm"); q != 3 {
		t.Errorf("%d waiting; want 3 (z, a1 and a2)", q)
	}
	cancel()
	for range 3 {
		receive(t, "a waiter to give up", out)
	}
}

// TestQueuePartOfOneHoldsNoPlace: places take at most all but one of a
// tenant's part, so a part of one holds none, and its refusals do not
// say one is held (a client told so waits its hint exactly, for a place
// that a new request of its tenant could take).
func TestQueuePartOfOneHoldsNoPlace(t *testing.T) {
	c, _, rec := spentTokenQueue(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan result, 1)
	enqueue(t, c, rec, ctx, admission.Request{Tenant: "a", Tokens: 10}, "a1", out)
	for _, r := range []admission.Request{{Tenant: "a", Tokens: 10, Retry: true}, {Tenant: "a", Tokens: 10}, {Tenant: "a", Tokens: 10, Retry: true}} {
		_, err := c.Admit(ctx, r)
		var rej *admission.Rejection
		if !errors.As(err, &rej) || rej.Reason != admission.ReasonQueueFull || rej.RetryAfter <= 0 || rej.Held {
			t.Errorf("a's request (retry %v) with its part of one full: %v; want queue_full with a hint, no place held", r.Retry, err)
		}
	}
	if h := heldOn(c, "tpm"); h != 0 {
		t.Errorf("%d places held; want none", h)
	}
	cancel()
	receive(t, "a waiter to give up", out)
}

// TestQueueHeldPlacesUnderOverload runs two tenants offering twice a
// policy's rate each and a light one, open loop at random instants, every
// request refused by a full queue retried once after its hint: the
// retries of a tenant that marks them find their places (those of one
// that does not mostly find its own new requests in them), the two share
// the rate equally (within 15% over the measured interval) whether one or
// both mark, the light tenant is served at the first try (at least 95%,
// as without places), and the policy admits no more than its rate.
func TestQueueHeldPlacesUnderOverload(t *testing.T) {
	for _, tc := range []struct {
		name   string
		seed   uint64
		bMarks bool
	}{
		{"a marks/seed=1", 1, false},
		{"a marks/seed=2", 2, false},
		{"both mark/seed=1", 1, true},
		{"both mark/seed=2", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) { overload(t, tc.seed, tc.bMarks) })
	}
}

// overload runs TestQueueHeldPlacesUnderOverload's scenario with seed;
// b marks its retries when bMarks.
func overload(t *testing.T, seed uint64, bMarks bool) {
	synctest.Test(t, func(t *testing.T) {
		clock := admissiontest.NewClock(backendtest.Epoch)
		const cost, rate = 10, 10 // tokens per request, per second
		c := newController(t, clock, nil, admission.Policy{
			Name: "tpm", Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 60 * rate, Per: time.Minute,
			Queue: limits.Queue{Size: 12, PerTenant: 4, Timeout: 30 * time.Second},
		})
		ctx := context.Background()
		start := clock.Now()
		type tally struct{ sent, firstOK, retries, retriesOK, served, servedIn int }
		var mu sync.Mutex
		tallies := map[string]*tally{"a": {}, "b": {}, "c": {}}
		// The first minute warms up: the hints of a's first refusals,
		// before its first retry shows that it marks them, hold no place.
		const warmup, run = time.Minute, 3 * time.Minute
		type retry struct {
			at       time.Time
			r        admission.Request
			measured bool
		}
		var due []retry
		send := func(r admission.Request, retried, measured bool) {
			go func() {
				tk, err := c.Admit(ctx, r)
				mu.Lock()
				defer mu.Unlock()
				tl := tallies[r.Tenant]
				if err == nil {
					tk.Done()
					tl.served++
					if d := clock.Now().Sub(start); d >= warmup && d < run {
						tl.servedIn++
					}
					if retried && measured {
						tl.retriesOK++
					} else if !retried {
						tl.firstOK++
					}
					return
				}
				var rej *admission.Rejection
				if !errors.As(err, &rej) {
					t.Errorf("%s: %v", r.Tenant, err)
					return
				}
				if !retried && rej.RetryAfter > 0 && rej.RetryAfter <= time.Minute {
					again := r
					// Only a marks its retries (as an SDK's retry-count
					// header does); b's retry looks like a new request.
					again.Retry = r.Tenant == "a" || r.Tenant == "b" && bMarks
					due = append(due, retry{clock.Now().Add(rej.RetryAfter), again, measured})
				}
			}()
		}
		const step = 100 * time.Millisecond
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := 0; ; i++ {
			now := clock.Now()
			measured := now.Sub(start) >= warmup
			if now.Sub(start) < run {
				// Open loop, at random instants (seeded: the run is the
				// same every time): a and b send 2 requests a second on
				// average, c one every 4 s.
				for _, tn := range []struct {
					name string
					p    float64
				}{{"a", 0.2}, {"b", 0.2}, {"c", 0.025}} {
					if rng.Float64() < tn.p {
						tallies[tn.name].sent++
						send(admission.Request{Tenant: tn.name, Tokens: cost}, false, measured)
						synctest.Wait()
					}
				}
			}
			synctest.Wait()
			mu.Lock()
			// Retries go in the order of their time, then tenant: the
			// run is the same every time.
			slices.SortStableFunc(due, func(x, y retry) int {
				if c := x.at.Compare(y.at); c != 0 {
					return c
				}
				if c := strings.Compare(x.r.Tenant, y.r.Tenant); c != 0 {
					return c
				}
				return cmp.Compare(b2i(x.measured), b2i(y.measured))
			})
			var later []retry
			for _, d := range due {
				if d.at.After(now) {
					later = append(later, d)
					continue
				}
				if d.measured {
					tallies[d.r.Tenant].retries++
				}
				mu.Unlock()
				send(d.r, true, d.measured)
				synctest.Wait()
				mu.Lock()
			}
			due = later
			mu.Unlock()
			synctest.Wait()
			mu.Lock()
			pending := len(due)
			mu.Unlock()
			if now.Sub(start) >= run && pending == 0 && queuedOn(c, "tpm") == 0 {
				break
			}
			clock.Advance(step)
		}
		synctest.Wait()
		elapsed := clock.Now().Sub(start)
		a, b, l := tallies["a"], tallies["b"], tallies["c"]
		t.Logf("over %v: a sent %d, served %d (%d from the warm-up to the end of the arrivals; first try %d; after the warm-up, retries %d of %d); b sent %d, served %d (%d; first try %d; retries %d of %d); c sent %d, served %d",
			elapsed, a.sent, a.served, a.servedIn, a.firstOK, a.retriesOK, a.retries, b.sent, b.served, b.servedIn, b.firstOK, b.retriesOK, b.retries, l.sent, l.served)
		if a.retries == 0 || float64(a.retriesOK) < 0.9*float64(a.retries) {
			t.Errorf("a's marked retries: %d of %d served; want at least 90%%", a.retriesOK, a.retries)
		}
		switch {
		case bMarks && (b.retries == 0 || float64(b.retriesOK) < 0.9*float64(b.retries)):
			t.Errorf("b's marked retries: %d of %d served; want at least 90%%", b.retriesOK, b.retries)
		case !bMarks && float64(b.retriesOK) >= 0.5*float64(b.retries):
			t.Errorf("b's unmarked retries: %d of %d served; the scenario is meant to show them losing their room to b's new requests", b.retriesOK, b.retries)
		}
		if mean := float64(a.servedIn+b.servedIn) / 2; float64(max(a.servedIn, b.servedIn)-min(a.servedIn, b.servedIn)) > 0.15*mean {
			t.Errorf("a served %d, b %d between the warm-up and the end of the arrivals: the places held for retries change the tenants' shares", a.servedIn, b.servedIn)
		}
		if float64(l.firstOK) < 0.95*float64(l.sent) {
			t.Errorf("c, the light tenant: %d of %d served at the first try; want at least 95%%", l.firstOK, l.sent)
		}
		if admitted, most := int64(a.served+b.served+l.served)*cost, 60*rate+int64(elapsed/time.Second+1)*rate; admitted > most {
			t.Errorf("admitted %d tokens in %v; the policy allows at most %d", admitted, elapsed, most)
		}
		clock.Advance(maxHeldWait + 2*time.Second)
		if h := heldOn(c, "tpm"); h != 0 {
			t.Errorf("a minute after the run: %d places held; want 0", h)
		}
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
