package redisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/modeltest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestModel runs the model-based test (internal/modeltest) on a real
// redis-server: the same random operations and reference model as in
// memory, the replica's clock standing for the server's (CallerTime) so
// that leases and windows follow the fake clock. Each seed has a store of
// its own; the lease keeper runs from the start for even seeds, is
// stopped from the start for odd ones, and may stop mid-run in any; the
// replica may restart (a new controller on the same store, the old one's
// leases left to expire).
func TestModel(t *testing.T) {
	stores := callerTimeStores(newClient(t, redistest.Start(t).Addr))
	for seed := uint64(1); seed <= 4; seed++ {
		modeltest.Run(t, stores(t), seed, 600, seed%2 == 0)
	}
}
