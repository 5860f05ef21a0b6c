package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// contention is a random set of classes waiting on one queue: priorities
// 0..k-1, shares for some of them, requests of random cost from three
// tenants, and the classes that always have a waiter (steady); the
// others come and go.
type contention struct {
	q       *queue
	rng     *rand.Rand
	shares  []limits.Share
	left    int // the percent of the priorities without a share
	steady  []bool
	waiting []int
	maxCost int64
}

func newContention(rng *rand.Rand, maxCost int64) *contention {
	k := 2 + rng.IntN(5)
	c := &contention{rng: rng, left: 100, steady: make([]bool, k), waiting: make([]int, k), maxCost: maxCost}
	for prio := range k {
		if c.left > 0 && rng.IntN(3) > 0 {
			pct := 1 + rng.IntN(c.left)
			if rng.IntN(4) == 0 {
				pct = c.left
			}
			c.shares = append(c.shares, limits.Share{Priority: prio, Percent: pct})
			c.left -= pct
		}
	}
	if len(c.shares) == 0 {
		c.shares = []limits.Share{{Priority: 0, Percent: 1 + rng.IntN(100)}}
		c.left = 100 - c.shares[0].Percent
	}
	c.q = newQueue("k", c.shares)
	for prio := range k {
		if c.steady[prio] = rng.IntN(2) == 0; c.steady[prio] {
			c.push(prio)
		}
	}
	return c
}

func (c *contention) push(prio int) {
	c.q.push(&waiter{tenant: fmt.Sprint(c.rng.IntN(3)), prio: prio, h: &held{est: 1 + c.rng.Int64N(c.maxCost)}})
	c.waiting[prio]++
}

// arrive queues a request of each class that comes and goes, at random.
func (c *contention) arrive() {
	for prio, steady := range c.steady {
		if !steady && c.rng.IntN(4) == 0 {
			c.push(prio)
		}
	}
}

// serve takes w, about to be admitted, out of the queue, and queues the
// next request of a steady class.
func (c *contention) serve(w *waiter) {
	c.q.charge(w.prio, w.h.est)
	c.q.pop(w)
	if c.waiting[w.prio]--; c.steady[w.prio] && c.waiting[w.prio] == 0 {
		c.push(w.prio)
	}
}

// floor returns share group g's percent, and whether one of its
// priorities always has a waiter.
func (c *contention) floor(g int) (percent int, always bool) {
	percent = c.left
	if g < len(c.shares) {
		percent = c.shares[g].Percent
	}
	for prio, steady := range c.steady {
		always = always || (steady && c.q.groupOf(prio) == g)
	}
	return percent, always
}

// TestSharesFloorProperty: under random contention (random classes,
// shares, tenants and costs, some classes always waiting, others coming
// and going), every share group that always has a waiter is served at
// least its percent of the cost admitted, less a slack of two of the
// largest requests per group.
func TestSharesFloorProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 3))
	for trial := range 300 {
		c := newContention(rng, 1+rng.Int64N(100))
		served := make([]int64, len(c.shares)+1)
		var total int64
		for range 3000 {
			c.arrive()
			w := c.q.peek()
			if w == nil {
				continue
			}
			c.serve(w)
			served[c.q.groupOf(w.prio)] += w.h.est
			total += w.h.est
		}
		for g := range served {
			percent, always := c.floor(g)
			floor := total*int64(percent)/100 - 2*int64(len(served))*c.maxCost
			if always && served[g] < floor {
				t.Fatalf("trial %d: shares %v, steady %v: group %d served %d of %d; want >= %d (%d%%)", trial, c.shares, c.steady, g, served[g], total, floor, percent)
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
		c := newContention(rng, 1+rng.Int64N(5))
		q := c.q
		q.slots = &slotLoad{byPrio: map[int]int64{}}
		capacity := c.maxCost * (10 + rng.Int64N(40))
		free := capacity
		type running struct {
			prio      int
			cost, end int64
		}
		var run []running
		sum := make([]int64, len(c.shares)+1) // held, summed over ticks after warmup
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
			c.arrive()
			for {
				w := q.peek()
				if w == nil || w.h.est > free {
					break
				}
				c.serve(w)
				free -= w.h.est
				q.slots.byPrio[w.prio] += w.h.est
				// Durations differ by class, so long requests would
				// crowd out short ones if shares counted admissions.
				run = append(run, running{w.prio, w.h.est, tick + 1 + int64(w.prio*7) + rng.Int64N(20)})
			}
			if tick >= warmup {
				for prio, cost := range q.slots.byPrio {
					sum[q.groupOf(prio)] += cost
				}
			}
		}
		for g := range sum {
			percent, always := c.floor(g)
			avg := float64(sum[g]) / (ticks - warmup)
			// Each other group may round its share up by a request.
			floor := float64(capacity*int64(percent))/100 - float64(int64(len(sum))*c.maxCost)
			if always && avg < floor {
				t.Fatalf("trial %d: shares %v steady %v capacity %d: group %d holds %.2f on average; want >= %.2f (%d%%)", trial, c.shares, c.steady, capacity, g, avg, floor, percent)
			}
		}
	}
}
