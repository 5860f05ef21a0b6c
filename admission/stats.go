package admission

import (
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// PolicyStats is a snapshot of one policy's state, for gauges.
type PolicyStats struct {
	Name      string
	Mode      limits.Mode
	Algorithm limits.Algorithm
	Unit      limits.Unit
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
	// InFlight is the cost held by concurrency permits (a lease past its
	// MaxHold is not counted, reclaimed or not).
	InFlight int64
	// Queued is the number of requests waiting.
	Queued int
	// Held is the number of places the policy's queues hold for the
	// retries of requests they refused (see Request.Retry).
	Held int
}

// Stats returns a snapshot of every policy. It walks the partition tables,
// so call it at metric collection time, not per request. It only reads:
// calling it (a metrics scrape, a status page) at any moment changes no
// decision. A concurrency lease past its MaxHold counts as not in flight;
// it is reclaimed, and reported to the observer, by the next request on
// its partition or when the idle partition is dropped.
func (c *Controller) Stats() []PolicyStats {
	cfg := c.cfg.Load()
	now := c.clock.Now()
	out := make([]PolicyStats, 0, len(cfg.policies))
	for _, p := range cfg.policies {
		s := PolicyStats{Name: p.Name, Mode: p.Mode, Algorithm: p.Algorithm, Unit: p.unit, Limit: p.Limit, MaxPartitions: p.MaxPartitions}
		if s.MaxPartitions == 0 {
			s.MaxPartitions = limits.DefaultMaxPartitions
		}
		if c.allShadow.Load() && s.Mode == limits.Enforce {
			s.Mode = limits.Shadow
		}
		if in, ok := p.limiter.(backend.Inspector); ok {
			ps := in.Stats(&p.base, now)
			s.Partitions, s.NearLimit, s.InFlight, s.Evicted = ps.Partitions, ps.NearLimit, ps.InFlight, ps.Evicted
		}
		if p.queues != nil {
			s.Queued, s.Held = p.queues.depth(now.UnixNano())
		}
		out = append(out, s)
	}
	return out
}
