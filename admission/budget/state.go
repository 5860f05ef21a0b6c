package budget

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/admission/limits"
)

// bits is a set of percents, 1 to 100, so that a reload that changes a
// policy's thresholds keeps the meaning of what its tenants crossed.
type bits [2]uint64

func (b *bits) set(pct int)       { b[pct>>6] |= 1 << (pct & 63) }
func (b bits) has(pct int) bool   { return b[pct>>6]&(1<<(pct&63)) != 0 }
func (b bits) empty() bool        { return b[0]|b[1] == 0 }
func (b bits) or(c bits) bits     { return bits{b[0] | c[0], b[1] | c[1]} }
func (b bits) andNot(c bits) bits { return bits{b[0] &^ c[0], b[1] &^ c[1]} }

// numShards spreads the tenants of a policy over locks.
const numShards = 16

// tenants is what a policy remembers of its tenants this period: the
// thresholds each crossed and its last figures, for at most about
// MaxTenants tenants; and its counts, which survive reloads with it.
type tenants struct {
	seed      maphash.Seed
	perShard  atomic.Int64
	shards    [numShards]shard
	warned    [101]atomic.Uint64 // warnings emitted, by threshold
	untracked atomic.Uint64      // crossings not warned: no room
}

// shard is one lock's share of a policy's tenants.
type shard struct {
	mu sync.Mutex
	m  map[string]*entry
}

// entry is one tenant's standing in its current period.
type entry struct {
	start, end  int64 // the period, ns since the epoch
	used, limit int64 // the last figures seen
	fired       bits  // the thresholds crossed this period
}

func newTenants() *tenants {
	t := &tenants{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].m = map[string]*entry{}
	}
	return t
}

// setCap bounds the tenants kept to about max (DefaultMaxPartitions when
// 0), split evenly among the shards.
func (t *tenants) setCap(max int) {
	if max == 0 {
		max = limits.DefaultMaxPartitions
	}
	t.perShard.Store(int64((max + numShards - 1) / numShards))
}

func (t *tenants) shard(tenant string) *shard {
	return &t.shards[maphash.String(t.seed, tenant)%numShards]
}

// room reports whether the shard can take one more tenant at ns, once
// the entries of ended periods are dropped. The caller holds the lock.
func (s *shard) room(ns, cap int64) bool {
	if int64(len(s.m)) < cap {
		return true
	}
	s.sweep(ns)
	return int64(len(s.m)) < cap
}

// sweep drops the entries whose period ended before ns. The caller holds
// the lock.
func (s *shard) sweep(ns int64) {
	for k, e := range s.m {
		if ns >= e.end {
			delete(s.m, k)
		}
	}
}
