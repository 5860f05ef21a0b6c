package memstore

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

const (
	numShards = 64
	slabSize  = 128
)

// Store keeps limiter state in this process. It is the controller's
// default store; its state is not shared between replicas and does not
// survive a restart (a quota kept in memory starts again from zero after
// one).
type Store struct{}

var _ backend.Store = Store{}

// Limiter returns a new in-memory limiter for p, with a sharded partition
// table bounded by p.MaxPartitions.
func (Store) Limiter(p *limits.Policy) (backend.Limiter, error) {
	return newMemLimiter(p), nil
}

// shardOf picks a key's shard by a hash of the whole key under the
// table's seed. Partition keys often differ only in a few characters
// anywhere (tenant-0001 to tenant-9999, then a model name): a hash of part
// of the key would put them all in one shard, under one lock, and leave
// eviction one shard to sample.
func shardOf(seed maphash.Seed, key string) int {
	return int(maphash.String(seed, key) % numShards)
}

// memLimiter holds the partitions of one policy in a sharded table.
type memLimiter struct {
	seed          maphash.Seed
	maxParts      int64
	count         atomic.Int64
	lastSweep     atomic.Int64
	nextFullSweep atomic.Int64
	idle          int64
	overflow      limits.OverflowMode
	alg           limits.Algorithm
	evicted       atomic.Uint64
	onEvict       func(partitions, leases int)
	ovf           struct {
		sync.Mutex
		c    cell
		init bool
	}
	shards [numShards]shard
}

type shard struct {
	mu   sync.Mutex
	m    map[string]*cell
	free []*cell
	slab []cell
	_    [48]byte // keep shards on separate cache lines
}

var _ backend.Limiter = (*memLimiter)(nil)

func newMemLimiter(p *limits.Policy) *memLimiter {
	maxParts := p.MaxPartitions
	if maxParts == 0 {
		maxParts = limits.DefaultMaxPartitions
	}
	idle := p.IdleTimeout
	if idle == 0 {
		idle = limits.DefaultIdleTimeout
	}
	l := &memLimiter{
		seed:     maphash.MakeSeed(),
		maxParts: int64(maxParts),
		idle:     int64(idle),
		overflow: p.Overflow,
		alg:      p.Algorithm,
	}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*cell)
	}
	return l
}

// lock finds (or creates) the cell of key and returns it with its lock held;
// unlock must be called with the returned mutex. A nil cell means the table
// is full and the policy rejects overflow.
func (l *memLimiter) lock(key string, lim *limits.Limit, now int64, create bool) (*cell, *sync.Mutex) {
	sh := &l.shards[shardOf(l.seed, key)]
	sh.mu.Lock()
	if c, ok := sh.m[key]; ok {
		c.used = now
		return c, &sh.mu
	}
	sh.mu.Unlock()
	if !create {
		return nil, nil
	}
	return l.create(sh, key, lim, now)
}

// create adds the partition of key, making room first when the table is
// full or an idle period has passed.
func (l *memLimiter) create(sh *shard, key string, lim *limits.Limit, now int64) (*cell, *sync.Mutex) {
	last := l.lastSweep.Load()
	full := l.count.Load() >= l.maxParts
	if (now-last > l.idle || full && now >= l.nextFullSweep.Load()) && l.lastSweep.CompareAndSwap(last, now) {
		// Once per idle period, drop idle neutral partitions; when the
		// table is full, drop any neutral one (it changes no decision). A
		// full sweep that frees nothing is not repeated for a while, so a
		// flood of new keys costs a lookup each, not a sweep each.
		freed := 0
		for i := range l.shards {
			o := &l.shards[i]
			o.mu.Lock()
			freed += l.sweep(o, now, full)
			o.mu.Unlock()
		}
		if full && freed == 0 {
			l.nextFullSweep.Store(now + min(l.idle, int64(time.Second)))
		}
	}
	sh.mu.Lock()
	if c, ok := sh.m[key]; ok {
		c.used = now
		return c, &sh.mu
	}
	if l.count.Load() >= l.maxParts && l.overflow == limits.OverflowEvict {
		// Make room by dropping the partition that loses the least, and
		// try once more: the room may be taken meanwhile.
		sh.mu.Unlock()
		l.evict(now)
		sh.mu.Lock()
		if c, ok := sh.m[key]; ok {
			c.used = now
			return c, &sh.mu
		}
	}
	if l.count.Load() >= l.maxParts {
		sh.mu.Unlock()
		if l.overflow == limits.OverflowReject {
			return nil, nil
		}
		l.ovf.Lock()
		if !l.ovf.init {
			l.ovf.init = true
			l.ovf.c.init(lim, now)
		}
		return &l.ovf.c, &l.ovf.Mutex
	}
	c := sh.alloc()
	c.init(lim, now)
	sh.m[strings.Clone(key)] = c
	l.count.Add(1)
	return c, &sh.mu
}

func (c *cell) init(l *limits.Limit, now int64) {
	*c = cell{used: now}
	switch l.Algorithm {
	case limits.TokenBucket:
		c.a, c.t = float64(l.Capacity()), now
	case limits.Concurrency:
		// Lease ids count up from the creation instant in nanoseconds, so
		// a partition dropped and created again never reissues the id of a
		// stale ticket's expired lease.
		c.t = now
	default:
		c.t = -1 << 62 // no window or period yet
	}
}

func (sh *shard) alloc() *cell {
	if n := len(sh.free); n > 0 {
		c := sh.free[n-1]
		sh.free = sh.free[:n-1]
		return c
	}
	if len(sh.slab) == 0 {
		sh.slab = make([]cell, slabSize)
	}
	c := &sh.slab[0]
	sh.slab = sh.slab[1:]
	return c
}

// sweep drops partitions whose state is neutral: idle ones, or any neutral
// one when the shard is full (dropping a neutral partition changes nothing).
func (l *memLimiter) sweep(sh *shard, now int64, full bool) int {
	n, leases := 0, 0
	for k, c := range sh.m {
		if (full || now-c.used >= l.idle) && now >= c.calm {
			if c.x != nil {
				// Past its calm instant every lease has expired.
				leases += len(c.x.leases)
			}
			delete(sh.m, k)
			*c = cell{}
			sh.free = append(sh.free, c)
			n++
		}
	}
	if n > 0 {
		l.count.Add(int64(-n))
		l.evicted.Add(uint64(n))
		if l.onEvict != nil {
			l.onEvict(n, leases)
		}
	}
	return n
}

// Eviction samples up to evictSample partitions of each shard, from a
// random one on, until it has seen evictShards shards that hold any and
// evictShards×evictSample partitions it may drop (or every shard): a few
// shards that hold only heavy partitions, as eviction itself leaves them
// when it has emptied their light ones, do not make a heavy one the
// victim.
const (
	evictShards = 4
	evictSample = 4
)

// evict drops, when the table is full of partitions that are not
// neutral, the one of a sample that loses the least: the one that would
// be neutral soonest, then the one holding the least (a window's count),
// then the least recently used. A flood of new keys,
// each charged once, thus evicts its own partitions before those of
// callers near their limit or still active; a partition holding
// concurrency permits is never dropped. It reports whether it dropped one.
func (l *memLimiter) evict(now int64) bool {
	first := rand.IntN(numShards)
	var victim struct {
		sh         *shard
		key        string
		calm, used int64
		held       float64
	}
	for i, seen, sampled := 0, 0, 0; i < numShards && (seen < evictShards || sampled < evictShards*evictSample); i++ {
		sh := &l.shards[(first+i)%numShards]
		sh.mu.Lock()
		if len(sh.m) > 0 {
			seen++ // an empty shard is no sample
		}
		n := 0
		for k, c := range sh.m {
			if c.x != nil && len(c.x.leases) > 0 {
				continue
			}
			sampled++
			held := l.held(c)
			if victim.sh == nil || c.calm < victim.calm ||
				c.calm == victim.calm && (held < victim.held || held == victim.held && c.used < victim.used) {
				victim.sh, victim.key, victim.calm, victim.used, victim.held = sh, k, c.calm, c.used, held
			}
			if n++; n == evictSample {
				break
			}
		}
		sh.mu.Unlock()
	}
	if victim.sh == nil {
		return false
	}
	sh := victim.sh
	sh.mu.Lock()
	c, ok := sh.m[victim.key]
	// Used since it was sampled: it is active, keep it.
	if !ok || c.used != victim.used {
		sh.mu.Unlock()
		return false
	}
	delete(sh.m, victim.key)
	*c = cell{}
	sh.free = append(sh.free, c)
	sh.mu.Unlock()
	l.count.Add(-1)
	l.evicted.Add(1)
	if l.onEvict != nil {
		l.onEvict(1, 0) // a partition holding leases, even expired, is never the victim
	}
	return true
}

// held is what a window, log or quota partition has counted, which
// dropping it forgets; zero for a token bucket, whose calm instant
// already measures it.
func (l *memLimiter) held(c *cell) float64 {
	switch l.alg {
	case limits.TokenBucket, limits.Concurrency:
		return 0
	case limits.SlidingWindow:
		return c.a + c.b
	}
	return c.a
}

// Acquire implements Limiter.
func (l *memLimiter) Acquire(_ context.Context, key string, lim *limits.Limit, n int64, now time.Time, g *backend.Grant) error {
	ns := now.UnixNano()
	c, mu := l.lock(key, lim, ns, true)
	if c == nil {
		*g = backend.Grant{Limit: lim.Capacity(), RetryAfter: limits.DefaultRetryHint, Full: true}
		return nil
	}
	c.acquire(lim, n, ns, g)
	if lim.Algorithm == limits.Concurrency {
		c.calm = c.calmAt(lim)
	} else {
		// A rate grant's Reset is the time until the partition is fully
		// available again: when it becomes neutral (or, for a window or
		// quota that holds nothing, a little later, which only keeps it
		// longer).
		c.calm = ns + int64(g.Reset)
	}
	g.Overflow = c == &l.ovf.c
	mu.Unlock()
	return nil
}

// cellOf returns the locked cell a grant was taken from, or nil.
func (l *memLimiter) cellOf(key string, lim *limits.Limit, g *backend.Grant, now int64, create bool) (*cell, *sync.Mutex) {
	if g.Overflow {
		l.ovf.Lock()
		if !l.ovf.init {
			l.ovf.Unlock()
			return nil, nil
		}
		return &l.ovf.c, &l.ovf.Mutex
	}
	return l.lock(key, lim, now, create)
}

// Adjust implements Limiter.
func (l *memLimiter) Adjust(_ context.Context, key string, lim *limits.Limit, g *backend.Grant, delta int64, now time.Time) error {
	ns := now.UnixNano()
	c, mu := l.cellOf(key, lim, g, ns, delta > 0)
	if c == nil || (c == &l.ovf.c && !g.Overflow) {
		if c != nil {
			mu.Unlock()
		}
		g.Taken += delta
		return nil
	}
	c.adjust(lim, g, delta, ns)
	c.calm = c.calmAt(lim)
	mu.Unlock()
	return nil
}

// Release implements Limiter.
func (l *memLimiter) Release(_ context.Context, key string, lim *limits.Limit, g *backend.Grant, now time.Time) error {
	if lim.Algorithm != limits.Concurrency || g.Stamp == 0 {
		return nil
	}
	c, mu := l.cellOf(key, lim, g, now.UnixNano(), false)
	if c == nil {
		return nil
	}
	c.concRelease(g)
	c.calm = c.calmAt(lim)
	mu.Unlock()
	return nil
}

var (
	_ backend.Renewer   = (*memLimiter)(nil)
	_ backend.Inspector = (*memLimiter)(nil)
	_ backend.Peeker    = (*memLimiter)(nil)
)

// Peek implements Peeker: under the partition's lock it works out, on a
// copy, what an acquisition of nothing would report at now. The table is
// looked up, never added to (a partition not in it reads as a new one,
// even when a full table would send an acquisition to the overflow
// partition), and the partition is left as it was: not refilled, rolled
// or reclaimed, its last use (which idle eviction goes by) unchanged.
func (l *memLimiter) Peek(_ context.Context, key string, lim *limits.Limit, now time.Time, g *backend.Grant) error {
	ns := now.UnixNano()
	var c cell
	var r backend.Grant
	sh := &l.shards[shardOf(l.seed, key)]
	sh.mu.Lock()
	if p, ok := sh.m[key]; ok {
		c = p.snapshot()
	} else {
		c.init(lim, ns)
	}
	c.acquire(lim, 0, ns, &r)
	sh.mu.Unlock()
	*g = backend.Grant{Limit: r.Limit, Remaining: r.Remaining, Reset: r.Reset, Stamp: r.Stamp}
	return nil
}

// OnEvict registers f, called with the number of idle partitions each sweep
// evicts and of the expired leases they held. The controller registers it
// when it installs the policy, before any request reaches the limiter.
func (l *memLimiter) OnEvict(f func(partitions, leases int)) { l.onEvict = f }

// Renew implements Renewer.
func (l *memLimiter) Renew(_ context.Context, key string, lim *limits.Limit, g *backend.Grant, now time.Time) error {
	if lim.Algorithm != limits.Concurrency || g.Stamp == 0 {
		return nil
	}
	c, mu := l.cellOf(key, lim, g, now.UnixNano(), false)
	if c == nil {
		// The partition is gone, and with it every lease it held.
		g.Stamp, g.Expired, g.Remaining = 0, 0, lim.Amount
		return nil
	}
	c.concRenew(lim, g, now.UnixNano())
	c.calm = c.calmAt(lim)
	mu.Unlock()
	return nil
}

// Stats walks the table: partitions, those near the limit and the cost in
// flight. It only reads: every figure is worked out as of now without
// refilling, rolling or reclaiming anything, so a walk at any moment, with
// any limit, changes no decision (a lease past its MaxHold counts as not
// held; the next acquisition or renewal on its partition, or the sweep
// that drops the partition, reclaims it).
func (l *memLimiter) Stats(lim *limits.Limit, now time.Time) backend.Stats {
	var parts, near int
	var inflight int64
	ns := now.UnixNano()
	threshold := 0.8 * float64(lim.Capacity())
	visit := func(c *cell) {
		rem, held := c.standing(lim, ns)
		inflight += held
		if float64(lim.Capacity()-rem) >= threshold {
			near++
		}
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		parts += len(sh.m)
		for _, c := range sh.m {
			visit(c)
		}
		sh.mu.Unlock()
	}
	l.ovf.Lock()
	if l.ovf.init {
		visit(&l.ovf.c)
	}
	l.ovf.Unlock()
	return backend.Stats{Partitions: parts, NearLimit: near, InFlight: inflight, Evicted: l.evicted.Load()}
}
