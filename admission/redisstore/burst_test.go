package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// outcomes counts decisions by outcome.
type outcomes struct {
	admission.NopObserver
	n [16]atomic.Int64
}

func (o *outcomes) Decision(d *admission.Decision) { o.n[d.Outcome].Add(1) }

// TestBurstNeverFailsOpen: with the store's default timeout and breaker,
// two replicas on one healthy Redis answered by a burst of 200 concurrent
// requests admit exactly the fleet limit of 20 and never fail open, round
// after round.
func TestBurstNeverFailsOpen(t *testing.T) {
	srv := redistest.Start(t)
	const (
		replicas = 2
		burst    = 200
		limit    = 20
		rounds   = 5
	)
	prefix := uniquePrefix()
	obs := make([]*outcomes, replicas)
	ctls := make([]*admission.Controller, replicas)
	for r := range replicas {
		obs[r] = &outcomes{}
		st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Prefix: prefix, Timeout: 10 * time.Second}, redisstore.WithObserver(obs[r]))
		p := admission.Policy{Name: "fleet", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.FixedWindow,
			Limit: limit, Per: 1000 * time.Hour, Store: "redis", OnStoreError: limits.FailOpenMode}
		ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}}, admission.WithStore("redis", st), admission.WithObserver(obs[r]))
		if err != nil {
			t.Fatal(err)
		}
		ctls[r] = ctl
	}
	for round := range rounds {
		tenant := fmt.Sprintf("round-%d", round)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i := range burst {
			wg.Go(func() {
				<-gate
				tk, err := ctls[i%replicas].Admit(context.Background(), admission.Request{Tenant: tenant})
				if err == nil {
					admitted.Add(1)
					tk.Done()
				}
			})
		}
		close(gate)
		wg.Wait()
		var failOpen int64
		for _, o := range obs {
			failOpen += o.n[admission.FailOpen].Swap(0)
		}
		if got := admitted.Load(); got != limit || failOpen != 0 {
			t.Errorf("round %d: %d replicas admitted %d of a burst of %d with %d fail-open decisions; want %d and none",
				round, replicas, got, burst, failOpen, limit)
		}
	}
}
