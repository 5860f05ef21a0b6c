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

// shardIndex picks the shard of a key by its hash, the seeded hash of
// the whole key: its low bits (the bits above them place the key in its
// shard's table, see table.start). Partition keys often differ only in a
// few characters anywhere (tenant-0001 to tenant-9999, then a model
// name): a hash of part of the key would put them all in one shard, under
// one lock, and leave eviction one shard to sample.
func shardIndex(h uint64) int { return int(h % numShards) }

// shardBits is the number of low bits of a hash shardIndex reads.
const shardBits = 6

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
	ovf           partition // live once a full table has sent a key to it
	shards        [numShards]shard
}

// partition is one key's state in the table: its cell, under a lock of
// its own. Its key and live flag change under its shard's lock and its
// own together, so that either lock reads them.
type partition struct {
	mu   sync.Mutex
	live bool   // in its shard's table (the overflow partition: initialised)
	slot uint32 // its slot in the shard's table; the shard's lock guards it alone
	key  string
	cell
}

// A shard's table is open addressing with linear probing, keyed by the
// seeded hash of the key that also chose the shard: the key is hashed
// once per lookup. Lookups take no shard lock: they read the table and
// its slots atomically, and a partition found by its hash is confirmed
// under its own lock (live, and its key the one asked for), so a lookup
// racing a deletion, a reuse of the partition for another key or a
// growth of the table either finds the right partition or none, and then
// looks again under the shard's lock. Changes to the table (a key added,
// partitions dropped, the table grown) take the shard's lock; a table is
// replaced whole when it grows, never changed once replaced. The seed is
// the table's own and secret, so keys chosen by callers cannot be made to
// collide.
type shard struct {
	mu   sync.Mutex // serialises changes of the table; each partition's state is under its own lock
	tab  atomic.Pointer[table]
	live int // partitions in tab; mu
	used int // slots of tab not free (live or deleted); mu
	free []*partition
	slab []partition
	_    [48]byte // keep shards on separate cache lines
}

// table is a shard's slots, a power of two of them, a quarter of them at
// least free (nil), so that every probe ends.
type table struct {
	mask  uint64
	slots []slot
}

// slot is one place of a table: a partition and the hash of its key, or
// free (nil), or deleted (tomb, hash 0).
type slot struct {
	hash atomic.Uint64
	p    atomic.Pointer[partition]
}

// tomb marks a deleted slot, which probes go past and insertion reuses.
var tomb partition

// minTable is the smallest table a shard has.
const minTable = 8

func newTable(n int) *table {
	return &table{mask: uint64(n - 1), slots: make([]slot, n)}
}

// start is the slot a probe for hash h begins at.
func (t *table) start(h uint64) uint64 { return (h >> shardBits) & t.mask }

// find returns the live partition of key, whose hash is h, locked, or nil.
// It takes no shard lock (see shard).
func (sh *shard) find(h uint64, key string) *partition {
	t := sh.tab.Load()
	for i := t.start(h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		p := s.p.Load()
		if p == nil {
			return nil
		}
		if s.hash.Load() == h && p != &tomb {
			p.mu.Lock()
			if p.live && p.key == key {
				return p
			}
			p.mu.Unlock()
		}
	}
}

// insert adds p, holding the key whose hash is h, to the table; sh.mu is
// held, and the key is not in the table.
func (sh *shard) insert(h uint64, p *partition) {
	t := sh.tab.Load()
	if 4*(sh.used+1) > 3*len(t.slots) {
		t = sh.rebuild(sh.live + 1)
	}
	for i := t.start(h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if q := s.p.Load(); q == nil || q == &tomb {
			if q == nil {
				sh.used++
			}
			s.p.Store(p)
			s.hash.Store(h)
			p.slot = uint32(i)
			sh.live++
			return
		}
	}
}

// rebuild replaces the table by one without deleted slots, sized for n
// partitions (half full at most); sh.mu is held.
func (sh *shard) rebuild(n int) *table {
	size := minTable
	for size < 2*n {
		size *= 2
	}
	old, t := sh.tab.Load(), newTable(size)
	for i := range old.slots {
		s := &old.slots[i]
		p := s.p.Load()
		if p == nil || p == &tomb {
			continue
		}
		h := s.hash.Load()
		for j := t.start(h); ; j = (j + 1) & t.mask {
			if d := &t.slots[j]; d.p.Load() == nil {
				d.p.Store(p)
				d.hash.Store(h)
				p.slot = uint32(j)
				break
			}
		}
	}
	sh.used = sh.live
	sh.tab.Store(t)
	return t
}

// remove drops p, locked by the caller, from the shard's table and frees
// it; sh.mu is held.
func (sh *shard) remove(p *partition) {
	s := &sh.tab.Load().slots[p.slot]
	s.p.Store(&tomb)
	s.hash.Store(0)
	p.live, p.key, p.cell = false, "", cell{}
	sh.live--
	sh.free = append(sh.free, p)
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
		l.shards[i].tab.Store(newTable(minTable))
	}
	return l
}

// lock finds (or creates) the cell of key and returns it with its lock held;
// unlock must be called with the returned mutex. A nil cell means the table
// is full and the policy rejects overflow.
func (l *memLimiter) lock(key string, lim *limits.Limit, now int64, create bool) (*cell, *sync.Mutex) {
	h := maphash.String(l.seed, key)
	sh := &l.shards[shardIndex(h)]
	if p := sh.find(h, key); p != nil {
		p.used = now
		return &p.cell, &p.mu
	}
	if !create {
		return nil, nil
	}
	p := l.create(sh, h, key, lim, now)
	if p == nil {
		return nil, nil
	}
	return &p.cell, &p.mu
}

// create adds the partition of key, whose hash is h, making room first
// when the table is full or an idle period has passed, and returns it
// locked, or the overflow partition, or nil when the table is full and the
// policy rejects overflow.
func (l *memLimiter) create(sh *shard, h uint64, key string, lim *limits.Limit, now int64) *partition {
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
	if p := sh.find(h, key); p != nil {
		sh.mu.Unlock()
		p.used = now
		return p
	}
	if l.count.Load() >= l.maxParts && l.overflow == limits.OverflowEvict {
		// Make room by dropping the partition that loses the least, and
		// try once more: the room may be taken meanwhile.
		sh.mu.Unlock()
		l.evict(now)
		sh.mu.Lock()
		if p := sh.find(h, key); p != nil {
			sh.mu.Unlock()
			p.used = now
			return p
		}
	}
	if l.count.Load() >= l.maxParts {
		sh.mu.Unlock()
		if l.overflow == limits.OverflowReject {
			return nil
		}
		p := &l.ovf
		p.mu.Lock()
		if !p.live {
			p.live = true
			p.init(lim, now)
		}
		return p
	}
	p := sh.alloc()
	p.mu.Lock()
	p.live, p.key = true, strings.Clone(key)
	p.init(lim, now)
	sh.insert(h, p)
	sh.mu.Unlock()
	l.count.Add(1)
	return p
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

func (sh *shard) alloc() *partition {
	if n := len(sh.free); n > 0 {
		p := sh.free[n-1]
		sh.free = sh.free[:n-1]
		return p
	}
	if len(sh.slab) == 0 {
		sh.slab = make([]partition, slabSize)
	}
	p := &sh.slab[0]
	sh.slab = sh.slab[1:]
	return p
}

// sweep drops partitions whose state is neutral: idle ones, or any neutral
// one when the shard is full (dropping a neutral partition changes nothing).
func (l *memLimiter) sweep(sh *shard, now int64, full bool) int {
	n, leases := 0, 0
	t := sh.tab.Load()
	for i := range t.slots {
		p := t.slots[i].p.Load()
		if p == nil || p == &tomb {
			continue
		}
		p.mu.Lock()
		if (full || now-p.used >= l.idle) && now >= p.calm {
			if p.x != nil {
				// Past its calm instant every lease has expired.
				leases += len(p.x.leases)
			}
			sh.remove(p)
			n++
		}
		p.mu.Unlock()
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
// Each shard's sample starts at a random slot of its table.
func (l *memLimiter) evict(now int64) bool {
	first := rand.IntN(numShards)
	var victim struct {
		sh         *shard
		p          *partition
		key        string
		calm, used int64
		held       float64
	}
	for i, seen, sampled := 0, 0, 0; i < numShards && (seen < evictShards || sampled < evictShards*evictSample); i++ {
		sh := &l.shards[(first+i)%numShards]
		sh.mu.Lock()
		if sh.live > 0 {
			seen++ // an empty shard is no sample
		}
		t := sh.tab.Load()
		n := 0
		for j, from := 0, rand.IntN(len(t.slots)); j < len(t.slots) && n < evictSample; j++ {
			p := t.slots[(from+j)&int(t.mask)].p.Load()
			if p == nil || p == &tomb {
				continue
			}
			p.mu.Lock()
			if p.x == nil || len(p.x.leases) == 0 {
				sampled++
				n++
				held := l.held(&p.cell)
				if victim.sh == nil || p.calm < victim.calm ||
					p.calm == victim.calm && (held < victim.held || held == victim.held && p.used < victim.used) {
					victim.sh, victim.p, victim.key = sh, p, p.key
					victim.calm, victim.used, victim.held = p.calm, p.used, held
				}
			}
			p.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	if victim.sh == nil {
		return false
	}
	sh, p := victim.sh, victim.p
	sh.mu.Lock()
	p.mu.Lock()
	// Dropped (and perhaps reused for another key), or used since it was
	// sampled (it is active): keep it.
	if !p.live || p.key != victim.key || p.used != victim.used {
		p.mu.Unlock()
		sh.mu.Unlock()
		return false
	}
	sh.remove(p)
	p.mu.Unlock()
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
	g.Overflow = c == &l.ovf.cell
	mu.Unlock()
	return nil
}

// cellOf returns the locked cell a grant was taken from, or nil.
func (l *memLimiter) cellOf(key string, lim *limits.Limit, g *backend.Grant, now int64, create bool) (*cell, *sync.Mutex) {
	if g.Overflow {
		l.ovf.mu.Lock()
		if !l.ovf.live {
			l.ovf.mu.Unlock()
			return nil, nil
		}
		return &l.ovf.cell, &l.ovf.mu
	}
	return l.lock(key, lim, now, create)
}

// Adjust implements Limiter.
func (l *memLimiter) Adjust(_ context.Context, key string, lim *limits.Limit, g *backend.Grant, delta int64, now time.Time) error {
	ns := now.UnixNano()
	c, mu := l.cellOf(key, lim, g, ns, delta > 0)
	if c == nil || (c == &l.ovf.cell && !g.Overflow) {
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
	h := maphash.String(l.seed, key)
	if p := l.shards[shardIndex(h)].find(h, key); p != nil {
		c = p.snapshot()
		p.mu.Unlock()
	} else {
		c.init(lim, ns)
	}
	c.acquire(lim, 0, ns, &r)
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
		parts += sh.live
		t := sh.tab.Load()
		for j := range t.slots {
			if p := t.slots[j].p.Load(); p != nil && p != &tomb {
				p.mu.Lock()
				visit(&p.cell)
				p.mu.Unlock()
			}
		}
		sh.mu.Unlock()
	}
	l.ovf.mu.Lock()
	if l.ovf.live {
		visit(&l.ovf.cell)
	}
	l.ovf.mu.Unlock()
	return backend.Stats{Partitions: parts, NearLimit: near, InFlight: inflight, Evicted: l.evicted.Load()}
}
