package redisstore

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// breaker stops calls to a failing Redis. It counts round trips, not
// calls: a pipeline carrying a hundred calls of a burst is one answer of
// the server, and one slow answer is not an outage. It opens when at
// least threshold of the last 2×threshold round trips failed (half of
// them; a threshold above 32 counts as 32), and every call then fails at
// once until cooldown has passed; then one probe call goes through, whose
// success closes it (and forgets the round trips counted) and whose
// failure opens it for another cooldown. The probe holds a ticket, and
// only its own end frees the slot: a call sent before the breaker opened
// that fails or is abandoned meanwhile lets no second probe through. The
// closed path costs two atomic
// loads and one compare-and-swap, and no clock read. The cooldown is
// measured on clock.
type breaker struct {
	threshold int
	mask      uint64 // the last 2×threshold round trips
	cooldown  int64  // ns
	clock     admission.Clock
	onChange  func(open bool)

	// history holds the outcome of the latest round trips, one bit each
	// (1: failed), the latest in the lowest bit.
	history   atomic.Uint64
	openUntil atomic.Int64 // unix ns by clock; 0 when closed
	// probing holds the ticket of the probe on its way (0: none); tickets
	// counts the tickets given, so that a probe that ends late cannot free
	// the slot of the next.
	probing atomic.Uint64
	tickets atomic.Uint64
}

// newBreaker returns a closed breaker whose cooldown is measured on clock.
func newBreaker(threshold int, cooldown time.Duration, clock admission.Clock, onChange func(open bool)) *breaker {
	threshold = min(threshold, 32)
	return &breaker{threshold: threshold, mask: 1<<(2*threshold) - 1, cooldown: int64(cooldown), clock: clock, onChange: onChange}
}

// allow reports whether a call may go to Redis now, and when it goes as
// the open breaker's probe, its ticket (0 otherwise), which the call
// passes to failure and abandon.
func (b *breaker) allow() (probe uint64, ok bool) {
	until := b.openUntil.Load()
	if until == 0 {
		return 0, true
	}
	if b.refusing() || b.probing.Load() != 0 {
		return 0, false
	}
	t := b.tickets.Add(1)
	if !b.probing.CompareAndSwap(0, t) {
		return 0, false
	}
	return t, true
}

// refusing reports whether the breaker is open and its cooldown has not
// passed: allow would refuse. It takes no probe slot.
func (b *breaker) refusing() bool {
	until := b.openUntil.Load()
	return until != 0 && b.clock.Now().UnixNano() < until
}

// record shifts a round trip's outcome into the history and returns how
// many of the last 2×threshold failed.
func (b *breaker) record(failed bool) int {
	var bit uint64
	if failed {
		bit = 1
	}
	for {
		h := b.history.Load()
		n := (h<<1 | bit) & b.mask
		if n == h || b.history.CompareAndSwap(h, n) {
			return bits.OnesCount64(n)
		}
	}
}

// success records a round trip that Redis answered.
func (b *breaker) success() {
	b.record(false)
	if b.openUntil.Load() != 0 {
		if b.openUntil.Swap(0) != 0 {
			b.history.Store(0) // the failures that opened it are forgotten
			b.onChange(false)
		}
		b.probing.Store(0)
	}
}

// failure records a round trip that failed; probe is the ticket of the
// probe it carried, if any (0 otherwise). The probe's failure opens the
// breaker for another cooldown and frees its slot; the failure of a call
// sent before the breaker opened changes neither.
func (b *breaker) failure(probe uint64) {
	if probe != 0 && b.probing.Load() == probe {
		if until := b.openUntil.Load(); until != 0 {
			b.openUntil.CompareAndSwap(until, b.clock.Now().UnixNano()+b.cooldown)
			b.probing.CompareAndSwap(probe, 0)
			return
		}
	}
	if b.record(true) >= b.threshold {
		if b.openUntil.CompareAndSwap(0, b.clock.Now().UnixNano()+b.cooldown) {
			b.onChange(true)
		}
	}
}

// abandon records a call that ended without an answer that says anything
// about Redis (its caller gave up, or it left the queue unsent); probe is
// its ticket, and frees the probe slot if the call is still its holder.
func (b *breaker) abandon(probe uint64) {
	if probe != 0 {
		b.probing.CompareAndSwap(probe, 0)
	}
}
