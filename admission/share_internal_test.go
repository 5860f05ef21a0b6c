package admission

import (
	"fmt"
	"math/rand/v2"
	"testing"

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
