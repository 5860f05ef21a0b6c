package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
)

// A limiter can be driven directly, with explicit instants, as a store's
// tests do.
func Example() {
	p := limits.Policy{Name: "tpm", Algorithm: limits.TokenBucket, Limit: 10, Per: 10 * time.Second}
	l, _ := memstore.Store{}.Limiter(&p)
	lim := p.Base()
	now := time.Unix(1_800_000_000, 0)
	for _, n := range []int64{8, 4} {
		var g backend.Grant
		_ = l.Acquire(context.Background(), "acme", &lim, n, now, &g)
		fmt.Printf("n=%d ok=%v remaining=%d retry=%v\n", n, g.OK, g.Remaining, g.RetryAfter)
	}
	// Output:
	// n=8 ok=true remaining=2 retry=0s
	// n=4 ok=false remaining=2 retry=2s
}
