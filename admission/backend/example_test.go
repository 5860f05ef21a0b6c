package backend_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
)

// countingStore is a Store that wraps another and counts acquisitions.
type countingStore struct {
	next     backend.Store
	acquires *atomic.Int64
}

func (s countingStore) Limiter(p *limits.Policy) (backend.Limiter, error) {
	l, err := s.next.Limiter(p)
	return countingLimiter{l, s.acquires}, err
}

type countingLimiter struct {
	backend.Limiter
	acquires *atomic.Int64
}

func (l countingLimiter) Acquire(ctx context.Context, key string, lim *limits.Limit, n int64, now time.Time, g *backend.Grant) error {
	l.acquires.Add(1)
	return l.Limiter.Acquire(ctx, key, lim, n, now, g)
}

// A store is registered by name and named by the policies it serves.
func Example() {
	var n atomic.Int64
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "rps", Algorithm: limits.FixedWindow, Limit: 2, Per: time.Second, Store: "counted"},
	}}, admission.WithStore("counted", countingStore{memstore.Store{}, &n}),
		admission.WithClock(admissiontest.NewClock(time.Unix(1_800_000_000, 0))))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		t, err := ctl.TryAdmit(context.Background(), admission.Request{Tenant: "acme"})
		fmt.Println(err)
		t.Done()
	}
	fmt.Println(n.Load(), "acquisitions")
	// Output:
	// <nil>
	// <nil>
	// admission: rate by policy "rps", retry after 1s
	// 3 acquisitions
}
