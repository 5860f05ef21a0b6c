package memstore

import (
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// cell is the state of one partition in memory. Its fields mean different
// things per algorithm:
//
//	token bucket    a = tokens (negative: debt), t = instant of a (ns)
//	fixed window    a = count, t = window start (ns)
//	sliding window  a = current count, b = previous count, t = window start (ns)
//	sliding log     log holds (instant, cost) entries, a = their sum
//	concurrency     a = cost in flight, leases hold each grant, t = lease counter
//	quota           a = used, t = period start (ns)
type cell struct {
	a, b float64
	t    int64
	used int64    // last use (ns), for idle eviction
	calm int64    // from this instant (ns) the cell is neutral: see calmAt
	x    *cellExt // leases or log entries; nil for the other algorithms
}

// cellExt holds what only concurrency and sliding-log partitions need,
// keeping the common cell at 48 bytes.
type cellExt struct {
	leases []lease
	log    ring
}

func (c *cell) ext() *cellExt {
	if c.x == nil {
		c.x = &cellExt{}
	}
	return c.x
}

// lease is a concurrency grant: released by its ticket, or when it expires.
type lease struct {
	id, n, exp int64
}

// ring is a sliding log: admissions ordered by instant.
type ring struct {
	buf        []entry
	head, size int
}

type entry struct{ at, cost int64 }

func (r *ring) at(i int) *entry { return &r.buf[(r.head+i)%len(r.buf)] }

func (r *ring) push(e entry) {
	if r.size == len(r.buf) {
		n := max(4, 2*len(r.buf))
		buf := make([]entry, n)
		for i := 0; i < r.size; i++ {
			buf[i] = *r.at(i)
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = e
	r.size++
}

func (r *ring) pop() {
	r.head = (r.head + 1) % len(r.buf)
	r.size--
}

// trim drops the newest entries while they cost nothing (refunded whole),
// so that the newest entry, which a partition's reset is computed from,
// holds permits.
func (r *ring) trim() {
	for r.size > 0 && r.at(r.size-1).cost == 0 {
		r.size--
	}
}

func floorNonNeg(v float64) int64 {
	if v <= 0 {
		return 0
	}
	return int64(v)
}

// acquire evaluates n permits against c at now (nanoseconds since the
// epoch). It takes them only if they fit.
func (c *cell) acquire(l *limits.Limit, n int64, now int64, g *backend.Grant) {
	switch l.Algorithm {
	case limits.TokenBucket:
		c.bucketAcquire(l, n, now, g)
	case limits.FixedWindow:
		c.fixedAcquire(l, n, now, g)
	case limits.SlidingWindow:
		c.slidingAcquire(l, n, now, g)
	case limits.SlidingLog:
		c.logAcquire(l, n, now, g)
	case limits.Concurrency:
		c.concAcquire(l, n, now, g)
	default:
		c.quotaAcquire(l, n, now, g)
	}
}

// adjust charges (delta > 0) or refunds (delta < 0) what g holds, within
// the debt bound: a token bucket's level stays in [-capacity, capacity], a
// counting partition's count (window, sliding log, quota) in [0, limit].
func (c *cell) adjust(l *limits.Limit, g *backend.Grant, delta int64, now int64) {
	if delta == 0 {
		return
	}
	d := float64(delta)
	switch l.Algorithm {
	case limits.TokenBucket:
		c.bucketFill(l, now)
		capacity := float64(l.Capacity())
		c.a = min(max(c.a-d, -capacity), capacity)
	case limits.FixedWindow:
		c.fixedRoll(l, now)
		if g.Stamp == c.t || delta > 0 {
			c.a = bounded(c.a, d, l)
		}
	case limits.SlidingWindow:
		c.slidingRoll(l, now)
		switch {
		case g.Stamp == c.t || delta > 0:
			c.a = bounded(c.a, d, l)
		case g.Stamp == c.t-int64(l.Per):
			c.b = bounded(c.b, d, l)
		}
	case limits.SlidingLog:
		c.logAdjust(l, g, delta, now)
	case limits.Concurrency:
		// In-flight cost is what was reserved; it is released whole.
		return
	default:
		start, _ := limits.QuotaPeriod(l, now)
		if c.t != start {
			c.t, c.a = start, 0
		}
		if g.Stamp == start || delta > 0 {
			c.a = bounded(c.a, d, l)
		}
	}
	g.Taken += delta
	g.Remaining, _ = c.standing(l, now)
}

// bounded returns count changed by d within the debt bound of the
// counting algorithms: a refund (d < 0) lowers it by d, to zero at most;
// a charge raises it by d, to l.Amount at most, and never lowers it. l is
// the limit in force, which a reload may have lowered since the count was
// taken: a count above it (left by a higher limit) counts admissions that
// happened, and a charge must not forget them.
func bounded(count, d float64, l *limits.Limit) float64 {
	if d < 0 {
		return max(count+d, 0)
	}
	return max(count, min(count+d, float64(l.Amount)))
}

// standing returns what the partition has left at now under l, and the
// cost its live leases hold (concurrency), as an acquisition at now would
// find them before taking anything: a bucket refilled, a window rolled,
// log entries and leases past their time left out. It changes nothing in
// c, so reading the figures (Stats) never alters a decision.
func (c *cell) standing(l *limits.Limit, now int64) (remaining, inflight int64) {
	used := c.a
	switch l.Algorithm {
	case limits.TokenBucket:
		a := c.a
		if now > c.t {
			perNs, _ := l.Rates()
			a += float64(now-c.t) * perNs
		}
		return floorNonNeg(min(float64(l.Capacity()), a)), 0
	case limits.FixedWindow:
		if windowStart(now, l.Per) > c.t {
			used = 0
		}
	case limits.SlidingWindow:
		s := *c
		s.slidingRoll(l, now)
		used = math.Ceil(s.b*s.slidingWeight(l, now) + s.a)
	case limits.SlidingLog:
		if c.x != nil {
			r := &c.x.log
			for i := 0; i < r.size && r.at(i).at <= now-int64(l.Per); i++ {
				used -= float64(r.at(i).cost)
			}
		}
	case limits.Concurrency:
		used = 0
		if c.x != nil {
			for _, ls := range c.x.leases {
				if ls.exp > now {
					used += float64(ls.n)
				}
			}
		}
		inflight = int64(used)
	default:
		if start, _ := limits.QuotaPeriod(l, now); c.t != start {
			used = 0
		}
	}
	return max(0, l.Amount-int64(used)), inflight
}

// calmAt returns the instant (ns) from which c holds nothing a fresh
// partition would not, so that dropping it changes no decision, judged by
// the limit l of the partition's own last request. A sweep compares times
// only, so a request of another plan never judges (and refills, or drops)
// a partition with its own limit.
func (c *cell) calmAt(l *limits.Limit) int64 {
	switch l.Algorithm {
	case limits.TokenBucket:
		capacity := float64(l.Capacity())
		if c.a >= capacity {
			return c.t
		}
		_, nsPer := l.Rates()
		return c.t + int64(limits.CeilDuration((capacity-c.a)*nsPer))
	case limits.FixedWindow:
		if c.a == 0 {
			return 0
		}
		return windowStart(c.t, l.Per) + int64(l.Per)
	case limits.SlidingWindow:
		switch {
		case c.a > 0:
			return windowStart(c.t, l.Per) + 2*int64(l.Per)
		case c.b > 0:
			return windowStart(c.t, l.Per) + int64(l.Per)
		}
		return 0
	case limits.SlidingLog:
		if c.x == nil || c.x.log.size == 0 {
			return 0
		}
		return c.x.log.at(c.x.log.size-1).at + int64(l.Per)
	case limits.Concurrency:
		calm := int64(0)
		if c.x != nil {
			for i := range c.x.leases {
				calm = max(calm, c.x.leases[i].exp)
			}
		}
		return calm
	default:
		if c.a == 0 {
			return 0
		}
		_, end := limits.QuotaPeriod(l, c.t)
		return end
	}
}

// snapshot returns a copy of c that an acquisition can change without
// changing c: the sliding log's ring is shared (an acquisition of nothing
// only moves the copy's head past expired entries, and its caller holds
// the lock), the leases, which reclaiming reorders, are copied.
func (c *cell) snapshot() cell {
	s := *c
	if c.x != nil {
		x := *c.x
		x.leases = slices.Clone(x.leases)
		s.x = &x
	}
	return s
}

// Token bucket.

func (c *cell) bucketFill(l *limits.Limit, now int64) {
	perNs, _ := l.Rates()
	c.fill(float64(l.Capacity()), perNs, now)
}

// fill refills a token bucket up to its capacity, and brings a level
// outside [-capacity, capacity] (left by a larger capacity before a
// reload, even at this very instant) within it.
func (c *cell) fill(capacity, perNs float64, now int64) {
	if now > c.t {
		c.a += float64(now-c.t) * perNs
		c.t = now
	}
	// Compared, not min/max: those order NaNs and signed zeros, which a
	// level never is, at a few instructions more on every decision.
	if c.a > capacity {
		c.a = capacity
	} else if c.a < -capacity {
		c.a = -capacity
	}
}

func (c *cell) bucketAcquire(l *limits.Limit, n int64, now int64, g *backend.Grant) {
	perNs, _ := l.Rates()
	capacity := l.Capacity()
	c.fill(float64(capacity), perNs, now)
	*g = backend.Grant{Limit: capacity, Stamp: now}
	if float64(n) <= c.a {
		c.a -= float64(n)
		g.OK, g.Taken = true, n
	}
	backend.BucketFigures(l, n, c.a, g)
}

// windowStart returns the start (ns) of the window of length per that
// holds now (ns).
func windowStart(now int64, per time.Duration) int64 {
	p := int64(per)
	start := now - now%p
	if now%p < 0 {
		start -= p
	}
	return start
}

// Fixed window.

// fixedRoll starts a new window when now is past the one c counts: when
// the window of l holding now starts after c's. A window of another
// length (a reload that changed the policy's, or a plan's on a partition
// its tenant shares with others) that starts no later than c's keeps the
// count: the admissions it holds happened in that window too, and a
// count reset by every request judged with the other length would
// refuse nobody.
func (c *cell) fixedRoll(l *limits.Limit, now int64) {
	if start := windowStart(now, l.Per); start > c.t {
		c.t, c.a = start, 0
	}
}

func (c *cell) fixedAcquire(l *limits.Limit, n int64, now int64, g *backend.Grant) {
	c.fixedRoll(l, now)
	reset := time.Duration(windowStart(now, l.Per) + int64(l.Per) - now)
	*g = backend.Grant{Limit: l.Amount, Stamp: c.t, Reset: reset}
	c.take(l, n, g, reset)
}

// take adds n to a counting partition (fixed window, quota) when it fits
// under the limit; retry is the wait when it does not.
func (c *cell) take(l *limits.Limit, n int64, g *backend.Grant, retry time.Duration) {
	switch {
	case c.a+float64(n) <= float64(l.Amount):
		c.a += float64(n)
		g.OK, g.Taken = true, n
	case n > l.Amount:
		g.RetryAfter = limits.Never
	default:
		g.RetryAfter = retry
	}
	g.Remaining = l.Amount - min(int64(c.a), l.Amount)
}

// Sliding window counter.

// slidingRoll moves c's windows on to the one of l holding now, when it
// starts after c's current one (see fixedRoll: a window of another length
// starting no later keeps the counts).
func (c *cell) slidingRoll(l *limits.Limit, now int64) {
	per := int64(l.Per)
	switch start := windowStart(now, l.Per); {
	case start <= c.t:
	case start-per == c.t:
		c.b, c.a, c.t = c.a, 0, start
	default:
		c.b, c.a, c.t = 0, 0, start
	}
}

// slidingElapsed is how far now is into c's current window, rolled for
// l, within [0, l.Per).
func (c *cell) slidingElapsed(l *limits.Limit, now int64) float64 {
	return float64(min(max(now-c.t, 0), int64(l.Per)-1))
}

// slidingWeight is the weight of the previous window's count at now.
func (c *cell) slidingWeight(l *limits.Limit, now int64) float64 {
	return 1 - c.slidingElapsed(l, now)/float64(l.Per)
}

func (c *cell) slidingAcquire(l *limits.Limit, n int64, now int64, g *backend.Grant) {
	c.slidingRoll(l, now)
	per := float64(l.Per)
	elapsed := c.slidingElapsed(l, now)
	weight := 1 - elapsed/per
	est := c.b*weight + c.a
	limit := float64(l.Amount)
	*g = backend.Grant{Limit: l.Amount, Stamp: c.t}
	switch {
	case est+float64(n) <= limit:
		c.a += float64(n)
		est += float64(n)
		g.OK, g.Taken = true, n
	case n > l.Amount:
		g.RetryAfter = limits.Never
	case c.a+float64(n) <= limit:
		// Fits in this window once the previous window's weight has
		// decayed: b*(1-e/per) + a + n <= limit.
		e := per * (c.b - (limit - c.a - float64(n))) / c.b
		g.RetryAfter = limits.CeilDuration(e - elapsed)
	default:
		// Fits in the next window, where this window's count becomes the
		// weighted previous one: a*(1-e/per) + n <= limit.
		e := per * (c.a - (limit - float64(n))) / c.a
		g.RetryAfter = limits.CeilDuration(per - elapsed + e)
	}
	g.Remaining = l.Amount - min(int64(math.Ceil(est)), l.Amount)
	switch {
	case c.a > 0:
		g.Reset = limits.CeilDuration(2*per - elapsed)
	case c.b > 0:
		g.Reset = limits.CeilDuration(per - elapsed)
	}
}

// Sliding log.

func (c *cell) logExpire(l *limits.Limit, now int64) {
	if c.x == nil {
		return
	}
	r := &c.x.log
	horizon := now - int64(l.Per)
	for r.size > 0 && r.at(0).at <= horizon {
		c.a -= float64(r.at(0).cost)
		r.pop()
	}
	if r.size == 0 {
		c.a = 0
	}
}

func (c *cell) logAcquire(l *limits.Limit, n int64, now int64, g *backend.Grant) {
	c.logExpire(l, now)
	*g = backend.Grant{Limit: l.Amount, Stamp: now}
	switch {
	case c.a+float64(n) <= float64(l.Amount):
		if n > 0 {
			c.ext().log.push(entry{at: now, cost: n})
			c.a += float64(n)
		}
		g.OK, g.Taken = true, n
	case n > l.Amount:
		g.RetryAfter = limits.Never
	default:
		// Wait until enough of the oldest entries have left the window.
		need := c.a + float64(n) - float64(l.Amount)
		r := &c.x.log
		for i := 0; i < r.size; i++ {
			e := r.at(i)
			need -= float64(e.cost)
			if need <= 0 {
				g.RetryAfter = time.Duration(e.at + int64(l.Per) - now)
				break
			}
		}
	}
	g.Remaining = l.Amount - min(int64(c.a), l.Amount)
	if c.x != nil && c.x.log.size > 0 {
		g.Reset = time.Duration(c.x.log.at(c.x.log.size-1).at + int64(l.Per) - now)
	}
}

func (c *cell) logAdjust(l *limits.Limit, g *backend.Grant, delta int64, now int64) {
	c.logExpire(l, now)
	r := &c.ext().log
	// A charge fills the log up to the limit at most (the debt bound).
	room := max(0, l.Amount-int64(c.a))
	for i := r.size - 1; i >= 0; i-- {
		// An entry refunded whole is as good as gone (the Redis store
		// deletes it): a later charge for it is a new entry.
		if e := r.at(i); e.at == g.Stamp && e.cost > 0 {
			d := min(max(delta, -e.cost), room)
			e.cost += d
			c.a += float64(d)
			r.trim()
			if r.size == 0 {
				c.a = 0
			}
			return
		}
	}
	if d := min(delta, room); d > 0 {
		// The admission has left the window: charge the overrun now.
		r.push(entry{at: now, cost: d})
		c.a += float64(d)
	}
}

// Concurrency.

func (c *cell) concExpire(now int64) int32 {
	if c.x == nil {
		return 0
	}
	var expired int32
	x := c.x
	for i := 0; i < len(x.leases); {
		if x.leases[i].exp <= now {
			c.a -= float64(x.leases[i].n)
			x.leases[i] = x.leases[len(x.leases)-1]
			x.leases = x.leases[:len(x.leases)-1]
			expired++
			continue
		}
		i++
	}
	if len(x.leases) == 0 {
		c.a = 0
	}
	return expired
}

func (c *cell) concAcquire(l *limits.Limit, n int64, now int64, g *backend.Grant) {
	*g = backend.Grant{Limit: l.Amount}
	g.Expired = c.concExpire(now)
	switch {
	case c.a+float64(n) <= float64(l.Amount):
		if n > 0 {
			c.t++
			x := c.ext()
			x.leases = append(x.leases, lease{id: c.t, n: n, exp: now + int64(l.MaxHold)})
			c.a += float64(n)
			g.Stamp = c.t
		}
		g.OK, g.Taken = true, n
	case n > l.Amount:
		g.RetryAfter = limits.Never
	}
	g.Remaining = l.Amount - min(int64(c.a), l.Amount)
}

// concRenew extends the lease of g to now + MaxHold after reclaiming the
// expired leases, and clears g.Stamp when the lease was not held.
func (c *cell) concRenew(l *limits.Limit, g *backend.Grant, now int64) {
	g.Expired = c.concExpire(now)
	held := false
	if c.x != nil {
		for i := range c.x.leases {
			if ls := &c.x.leases[i]; ls.id == g.Stamp {
				ls.exp = max(ls.exp, now+int64(l.MaxHold))
				held = true
				break
			}
		}
	}
	if !held {
		g.Stamp = 0
	}
	g.Remaining = l.Amount - min(int64(c.a), l.Amount)
}

// concRelease drops the lease of g; it reports whether the lease was held.
func (c *cell) concRelease(g *backend.Grant) bool {
	if c.x == nil {
		return false
	}
	x := c.x
	for i := range x.leases {
		if x.leases[i].id == g.Stamp {
			c.a -= float64(x.leases[i].n)
			x.leases[i] = x.leases[len(x.leases)-1]
			x.leases = x.leases[:len(x.leases)-1]
			if len(x.leases) == 0 {
				c.a = 0
			}
			return true
		}
	}
	return false
}

// Quota.

func (c *cell) quotaAcquire(l *limits.Limit, n int64, now int64, g *backend.Grant) {
	start, end := limits.QuotaPeriod(l, now)
	if c.t != start {
		c.t, c.a = start, 0
	}
	*g = backend.Grant{Limit: l.Amount, Stamp: start, Reset: time.Duration(end - now)}
	c.take(l, n, g, g.Reset)
}
