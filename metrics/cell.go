package metrics

import (
	"sync"
	"sync/atomic"
)

// A pair counts events and their summed cost with one atomic addition on
// the hot path: the count lives in the low countBits bits of one word and
// the cost in the high bits. Whoever sees a field pass half its range
// drains the word into base under mu; readers take mu too, so a read sees
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
	// drainCount and drainCost leave half of each field's range as
	// headroom for additions racing with a drain.
	drainCount = 1 << (countBits - 1)
	drainCost  = 1 << (63 - countBits)
	// bigCost is the largest cost added through the packed word; larger
	// (and negative) costs take the locked path.
	bigCost = 1 << 32
)

// add counts one event of the given cost. It returns the packed word after
// the addition, which changes with every event: callers use it as a cheap
// sequence number for sampling.
func (p *pair) add(cost int64) uint64 {
	if cost < 0 || cost >= bigCost {
		p.addSlow(cost)
		return uint64(cost)
	}
	v := p.packed.Add(uint64(cost)<<countBits | 1)
	if v&countMask >= drainCount || v>>countBits >= drainCost {
		p.drain()
	}
	return v
}

// sampled reports whether the event numbered seq is one of the sampled
// ones, one in mask+1 (a power of two). A mixing function (the 64-bit finaliser of MurmurHash3)
// spreads the picks so that periodic traffic does not alias with them.
func sampled(seq, mask uint64) bool {
	seq ^= seq >> 33
	seq *= 0xff51afd7ed558ccd
	seq ^= seq >> 33
	seq *= 0xc4ceb9fe1a85ec53
	seq ^= seq >> 33
	return seq&mask == 0
}

// addSlow counts an event whose cost does not fit the packed word;
// negative costs count as zero.
func (p *pair) addSlow(cost int64) {
	p.mu.Lock()
	p.count++
	if cost > 0 {
		p.cost += uint64(cost)
	}
	p.mu.Unlock()
}

func (p *pair) drain() {
	p.mu.Lock()
	v := p.packed.Swap(0)
	p.count += v & countMask
	p.cost += v >> countBits
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
