package admission_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/modeltest"
)

// TestModel runs the model-based test (internal/modeltest) on the
// in-memory store for a fixed budget of seeds, the lease keeper on for
// even seeds and off for odd ones.
func TestModel(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		modeltest.Run(t, nil, nil, seed, 1500, seed%2 == 0)
	}
}

// FuzzModel runs the model-based test for as many seeds as the fuzzer
// tries: go test -run '^$' -fuzz FuzzModel ./admission.
func FuzzModel(f *testing.F) {
	f.Add(uint64(1), uint16(500), true)
	f.Fuzz(func(t *testing.T, seed uint64, ops uint16, keeper bool) {
		modeltest.Run(t, nil, nil, seed, int(ops), keeper)
	})
}
