package admission_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/modeltest"
)

// reloadAlgorithms are the algorithms TestReloadModel runs.
var reloadAlgorithms = []limits.Algorithm{
	limits.TokenBucket, limits.FixedWindow, limits.SlidingWindow,
	limits.SlidingLog, limits.Quota, limits.Concurrency,
}

// TestReloadModel runs the reload model (modeltest.RunReload) on the
// in-memory store for every algorithm: random weighted traffic, its
// settlements and renewals interleaved with reloads of the policy's
// limit and mode and changes of plans, checked against the limit in
// force and against a twin controller whose policy flips between shadow
// and enforce.
func TestReloadModel(t *testing.T) {
	for _, alg := range reloadAlgorithms {
		for seed := uint64(1); seed <= 6; seed++ {
			t.Run(fmt.Sprintf("%v/seed=%d", alg, seed), func(t *testing.T) {
				modeltest.RunReload(t, nil, alg, seed, 1500)
			})
		}
	}
}
