package memstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/memstore"
)

func memStore(*testing.T) backend.Store { return memstore.Store{} }

func TestMemoryStoreConformance(t *testing.T) {
	backendtest.RunCases(t, memStore)
}

func TestMemoryStoreProperties(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		backendtest.RunProperties(t, memStore, backendtest.Traffic{
			Seed: seed, Ops: 3000, Keys: 3, MaxN: 6, MaxDt: 200 * time.Millisecond,
		})
	}
}
