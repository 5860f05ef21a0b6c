package admission_test

import (
	"testing"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/internal/puretest"
)

// TestReadsArePure runs random traces of admissions and settlements over
// tenants of different plans and overrides with and without reads
// (Stats, Statuses) interleaved: the decisions and figures must be the
// same, reading changes nothing.
func TestReadsArePure(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		puretest.Run(t, func(*testing.T) backend.Store { return memstore.Store{} }, seed, 500)
	}
}
