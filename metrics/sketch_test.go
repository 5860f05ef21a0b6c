package metrics

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestSketchGuarantees checks the Space-Saving bounds on skewed random
// streams: every tenant heavier than its shard's total over the shard's
// capacity is monitored, its rank over-estimates its refused cost, and its
// exported (exact since monitored) figures never exceed the truth.
func TestSketchGuarantees(t *testing.T) {
	for seed := range uint64(5) {
		rnd := rand.New(rand.NewPCG(seed, 1))
		zipf := rand.NewZipf(rnd, 1.2, 1, 5000)
		s := newSketch(64)
		refused := map[string]uint64{}
		shardTotal := [sketchShards]uint64{}
		for range 50_000 {
			tenant := "t" + strconv.FormatUint(zipf.Uint64(), 10)
			cost := uint64(1 + rnd.IntN(10))
			if rnd.IntN(3) == 0 {
				s.add(tenant, classAdmitted, cost, 0, 0)
				continue
			}
			s.add(tenant, classRejected, cost, 1, 0)
			refused[tenant] += cost
			shardTotal[maphash.String(s.seed, tenant)%sketchShards] += cost
		}
		top, _ := s.top(1<<20, 0, nil)
		got := map[string]tenantCount{}
		for _, tc := range top {
			got[tc.tenant] = tc
		}
		for tenant, w := range refused {
			sh := maphash.String(s.seed, tenant) % sketchShards
			tc, ok := got[tenant]
			if w > shardTotal[sh]/uint64(s.shards[sh].cap) && !ok {
				t.Errorf("seed %d: tenant %s (refused %d > %d/%d) not monitored", seed, tenant, w, shardTotal[sh], s.shards[sh].cap)
			}
			if ok && (tc.rank < w || tc.weight[classRejected] > w) {
				t.Errorf("seed %d: tenant %s: rank %d, exported %d; true refused cost %d", seed, tenant, tc.rank, tc.weight[classRejected], w)
			}
		}
	}
}
