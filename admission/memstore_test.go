package admission_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
)

func memStore(*testing.T) admission.Store { return admission.MemoryStore{} }

func TestMemoryStoreConformance(t *testing.T) {
	admissiontest.RunCases(t, memStore)
}

func TestMemoryStoreProperties(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		admissiontest.RunProperties(t, memStore, admissiontest.Traffic{
			Seed: seed, Ops: 3000, Keys: 3, MaxN: 6, MaxDt: 200 * time.Millisecond,
		})
	}
}
