package redisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/puretest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestReadsArePure runs the random traces of admissions and settlements
// over tenants of different plans and overrides on Redis, with and without
// reads (Stats, Statuses, Remaining) interleaved: the decisions and
// figures must be the same, reading changes nothing.
func TestReadsArePure(t *testing.T) {
	stores := callerTimeStores(newClient(t, redistest.Start(t).Addr))
	for seed := uint64(1); seed <= 3; seed++ {
		puretest.Run(t, stores, seed, 400)
	}
}
