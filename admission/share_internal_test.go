package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// TestSharesFloorProperty: under random contention (random classes,
// shares, tenants and costs, some classes always waiting, others coming
// and going), every share group that always has a waiter is served at
// least its percent of the cost admitted, less a slack of two of the
// largest requests per group.
func TestSharesFloorProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 3))
	for trial := range 300 {
		k := 2 + rng.IntN(5) // priorities 0..k-1
		var shares []limits.Share
		left := 100
		for prio := range k {
			if left == 0 || rng.IntN(3) == 0 {
				continue // a priority without a share: the rest's group
			}
			pct := 1 + rng.IntN(left)
			if rng.IntN(4) == 0 {
				pct = left
			}
			shares = append(shares, limits.Share{Priority: prio, Percent: pct})
			left -= pct
		}
		if len(shares) == 0 {
			shares = []limits.Share{{Priority: 0, Percent: 1 + rng.IntN(100)}}
			left = 100 - shares[0].Percent
		}
		q := newQueue("k", shares)
		maxCost := 1 + rng.Int64N(100)
		steady := make([]bool, k) // always has a waiter
		waiting := make([]int, k)
		push := func(prio int) {
			q.push(&waiter{tenant: fmt.Sprint(rng.IntN(3)), prio: prio, h: &held{est: 1 + rng.Int64N(maxCost)}})
			waiting[prio]++
		}
		for prio := range k {
			steady[prio] = rng.IntN(2) == 0
			if steady[prio] {
				push(prio)
			}
		}
		served := make([]int64, len(shares)+1)
		var total int64
		for range 3000 {
			for prio := range k {
				if !steady[prio] && rng.IntN(4) == 0 {
					push(prio)
				}
			}
			w := q.peek()
			if w == nil {
				continue
			}
			q.charge(w.prio, w.h.est)
			q.pop(w)
			waiting[w.prio]--
			served[q.groupOf(w.prio)] += w.h.est
			total += w.h.est
			if steady[w.prio] && waiting[w.prio] == 0 {
				push(w.prio)
			}
		}
		for g := range served {
			percent := left
			if g < len(shares) {
				percent = shares[g].Percent
			}
			always := false
			for prio := range k {
				always = always || (steady[prio] && q.groupOf(prio) == g)
			}
			floor := total*int64(percent)/100 - 2*int64(len(served))*maxCost
			if always && served[g] < floor {
				t.Fatalf("trial %d: shares %v, steady %v: group %d served %d of %d; want >= %d (%d%%)", trial, shares, steady, g, served[g], total, floor, percent)
			}
		}
	}
}

// TestSlotLoadBounded: the in-flight load of a concurrency partition with
// shares forgets leases never settled once the store has reclaimed them,
// and settled ones at once.
func TestSlotLoadBounded(t *testing.T) {
	clock := &stepClock{now: time.Unix(1_800_000_000, 0)}
	p := Policy{Name: "slots", Algorithm: limits.Concurrency, Limit: 1000, MaxHold: time.Second,
		Queue: limits.Queue{Size: 10, Shares: []limits.Share{{Priority: 1, Percent: 50}}}}
	c, err := New(Config{Policies: []Policy{p}}, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	leases := func() int {
		qs := c.cfg.Load().byName["slots"].queues
		sh := qs.shard("")
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if l := sh.slots[""]; l != nil {
			return len(l.leases)
		}
		return 0
	}
	for round := range 20 {
		for range 100 {
			if _, err := c.Admit(context.Background(), Request{Priority: round % 2}); err != nil {
				t.Fatal(err)
			}
		}
		clock.now = clock.now.Add(2 * time.Second) // every lease expires
		if n := leases(); n > 200 {
			t.Fatalf("round %d: %d leases tracked; want at most 200 (those of the last two rounds)", round, n)
		}
	}
	tk, _ := c.Admit(context.Background(), Request{})
	before := leases()
	tk.Done()
	if after := leases(); after != before-1 {
		t.Errorf("settling a ticket: %d leases tracked, then %d; want one fewer", before, after)
	}
}

// stepClock is a clock moved by hand whose timers never fire.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time { return c.now }

func (c *stepClock) AfterFunc(time.Duration, func()) Timer { return stopped{} }

type stopped struct{}

func (stopped) Stop() bool { return false }

// TestSlotSharesFloorProperty: on a simulated concurrency partition of
// random capacity, with requests of random cost and of durations that
// differ by class, from random classes (some always waiting, others
// coming and going), every share group that always has a waiter holds on
// average at least its percent of the capacity, less one largest request
// per group.
// (Without preemption a group whose requests all end at once waits for
// the others' to end before it is back at its share: the floor holds on
// average, and whenever a permit frees the group furthest below its share
// takes it.)
func TestSlotSharesFloorProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	const ticks, warmup = 3000, 300
	for trial := range 150 {
		k := 2 + rng.IntN(4)
		var shares []limits.Share
		left := 100
		for prio := range k {
			if left > 0 && rng.IntN(3) > 0 {
				pct := 1 + rng.IntN(left)
				shares = append(shares, limits.Share{Priority: prio, Percent: pct})
				left -= pct
			}
		}
		if len(shares) == 0 {
			shares = []limits.Share{{Priority: 0, Percent: 50}}
			left = 50
		}
		q := newQueue("k", shares)
		q.slots = &slotLoad{byPrio: map[int]int64{}}
		maxCost := 1 + rng.Int64N(5)
		capacity := maxCost * (10 + rng.Int64N(40))
		free := capacity
		steady := make([]bool, k)
		waiting := make([]int, k)
		push := func(prio int) {
			q.push(&waiter{tenant: fmt.Sprint(rng.IntN(3)), prio: prio, h: &held{est: 1 + rng.Int64N(maxCost)}})
			waiting[prio]++
		}
		for prio := range k {
			if steady[prio] = rng.IntN(2) == 0; steady[prio] {
				push(prio)
			}
		}
		type running struct {
			prio      int
			cost, end int64
		}
		var run []running
		sum := make([]int64, len(shares)+1) // held, summed over ticks after warmup
		for tick := int64(0); tick < ticks; tick++ {
			kept := run[:0]
			for _, r := range run {
				if r.end > tick {
					kept = append(kept, r)
					continue
				}
				free += r.cost
				if q.slots.byPrio[r.prio] -= r.cost; q.slots.byPrio[r.prio] == 0 {
					delete(q.slots.byPrio, r.prio)
				}
			}
			run = kept
			for prio := range k {
				if !steady[prio] && rng.IntN(3) == 0 {
					push(prio)
				}
			}
			for {
				w := q.peek()
				if w == nil || w.h.est > free {
					break
				}
				q.charge(w.prio, w.h.est)
				q.pop(w)
				waiting[w.prio]--
				free -= w.h.est
				q.slots.byPrio[w.prio] += w.h.est
				// Durations differ by class, so long requests would
				// crowd out short ones if shares counted admissions.
				run = append(run, running{w.prio, w.h.est, tick + 1 + int64(w.prio*7) + rng.Int64N(20)})
				if steady[w.prio] && waiting[w.prio] == 0 {
					push(w.prio)
				}
			}
			if tick >= warmup {
				for prio, cost := range q.slots.byPrio {
					sum[q.groupOf(prio)] += cost
				}
			}
		}
		for g := range sum {
			percent := left
			if g < len(shares) {
				percent = shares[g].Percent
			}
			always := false
			for prio := range k {
				always = always || (steady[prio] && q.groupOf(prio) == g)
			}
			avg := float64(sum[g]) / (ticks - warmup)
			// Each other group may round its share up by a request.
			floor := float64(capacity*int64(percent))/100 - float64(int64(len(sum))*maxCost)
			if always && avg < floor {
				t.Fatalf("trial %d: shares %v steady %v capacity %d: group %d holds %.2f on average; want >= %.2f (%d%%)", trial, shares, steady, capacity, g, avg, floor, percent)
			}
		}
	}
}
