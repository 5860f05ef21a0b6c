package admission

import "time"

// PolicyStats is a snapshot of one policy's state, for gauges.
type PolicyStats struct {
	Name      string
	Mode      Mode
	Algorithm Algorithm
	Unit      Unit
	// Limit is the policy's own limit (plans may differ per tenant).
	Limit int64
	// Partitions is the number of partitions held in memory.
	Partitions int
	// MaxPartitions is the policy's bound on Partitions.
	MaxPartitions int
	// Evicted counts partitions dropped since the policy was installed.
	Evicted uint64
	// NearLimit is the number of partitions using 80% or more of the
	// policy's own limit.
	NearLimit int
	// InFlight is the cost held by concurrency permits.
	InFlight int64
	// Queued is the number of requests waiting.
	Queued int
}

// Stats returns a snapshot of every policy. It walks the partition tables,
// so call it at metric collection time, not per request. Expired
// concurrency leases found on the way are reclaimed and reported.
func (c *Controller) Stats() []PolicyStats {
	cfg := c.cfg.Load()
	now := c.clock.Now()
	out := make([]PolicyStats, 0, len(cfg.policies))
	for _, p := range cfg.policies {
		s := PolicyStats{Name: p.Name, Mode: p.Mode, Algorithm: p.Algorithm, Unit: p.unit, Limit: p.Limit, MaxPartitions: p.MaxPartitions}
		if s.MaxPartitions == 0 {
			s.MaxPartitions = DefaultMaxPartitions
		}
		if c.allShadow.Load() && s.Mode == Enforce {
			s.Mode = Shadow
		}
		if ml, ok := p.limiter.(*memLimiter); ok {
			var expired int
			s.Partitions, s.NearLimit, s.InFlight, expired = ml.stats(p.base, now)
			s.Evicted = ml.evicted.Load()
			if expired > 0 {
				c.obs.LeaseExpired(p.Name, expired)
			}
		}
		if p.queues != nil {
			s.Queued = p.queues.depth()
		}
		out = append(out, s)
	}
	return out
}

// stats walks the table: partitions, those near the limit, cost in flight.
func (l *memLimiter) stats(lim Limit, now time.Time) (parts, near int, inflight int64, expired int) {
	ns := now.UnixNano()
	threshold := 0.8 * float64(lim.Capacity())
	visit := func(c *cell) {
		if lim.Algorithm == Concurrency {
			expired += int(c.concExpire(ns))
			inflight += int64(c.a)
		}
		if float64(lim.Capacity()-c.remaining(&lim, ns)) >= threshold {
			near++
		}
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		parts += len(sh.m)
		for _, c := range sh.m {
			if lim.Algorithm == TokenBucket {
				c.bucketFill(&lim, ns)
			}
			visit(c)
		}
		sh.mu.Unlock()
	}
	l.ovf.Lock()
	if l.ovf.init {
		visit(&l.ovf.c)
	}
	l.ovf.Unlock()
	return parts, near, inflight, expired
}
