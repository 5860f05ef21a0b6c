package metrics

import (
	"sync"
	"sync/atomic"
)

// A pair counts events and their summed cost with one atomic addition on
// the hot path: the count lives in the low countBits bits of one word and
// the cost in the high bits. Whoever sees the count pass half its range
// drains the word into the locked totals; readers take mu too, so a read sees
// either the word before a drain or after it, never both or neither, and
// the totals never go backwards.
type pair struct {
	packed atomic.Uint64
	mu     sync.Mutex
	count  uint64 // drained counts, guarded by mu
	cost   uint64 // drained costs, guarded by mu
}

const (
	countBits = 20
	countMask = 1<<countBits - 1
	// drainCount leaves half of the count's range as headroom for
	// additions racing with a drain.
	drainCount = 1 << (countBits - 1)
	// bigCost bounds the cost of one event added through the packed word
	// (larger and negative costs take the locked path), so that the cost
	// field (64 - countBits = 44 bits) cannot overflow before the count
	// triggers a drain: 2^20 events × 2^23 = 2^43.
	bigCost = 1 << 23
)

// add counts one event of the given cost.
func (p *pair) add(cost int64) {
	if v, ok := p.tryAdd(cost); !ok {
		p.finish(cost, v)
	}
}

// tryAdd is add's common case, small enough to be inlined: one atomic
// addition. When it reports !ok the caller must call finish with the same
// cost and the word returned.
func (p *pair) tryAdd(cost int64) (uint64, bool) {
	if uint64(cost) >= bigCost { // negative costs do not fit either
		return 0, false
	}
	v := p.packed.Add(uint64(cost)<<countBits | 1)
	return v, v&countMask < drainCount
}

// finish completes an add that tryAdd could not: v == 0 means the event
// was not counted (its cost does not fit the packed word; a negative cost
// counts as zero), otherwise the word needs draining into the totals.
func (p *pair) finish(cost int64, v uint64) {
	p.mu.Lock()
	w := p.packed.Swap(0)
	p.count += w & countMask
	p.cost += w >> countBits
	if v == 0 {
		p.count++
		p.cost += uint64(max(cost, 0))
	}
	p.mu.Unlock()
}

// load returns the totals so far.
func (p *pair) load() (count, cost uint64) {
	p.mu.Lock()
	v := p.packed.Load()
	count, cost = p.count+v&countMask, p.cost+v>>countBits
	p.mu.Unlock()
	return count, cost
}
