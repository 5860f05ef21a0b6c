package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestCallerDeadlineIsNoStoreError: a request whose own context ends
// while its store call waits (Redis paused, the caller's deadline well
// within the store's timeout) gets its context's error. It is no store
// error: nothing is counted as one, the policy's failure mode (closed
// here) does not decide it, and the breaker (which opens at one failure)
// stays closed, so the next request is decided by Redis. Before, it was
// refused with store_unavailable, counted, and opened the breaker.
func TestCallerDeadlineIsNoStoreError(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Timeout: 10 * time.Second, BreakerFailures: 1, BreakerCooldown: time.Hour, Name: "redis"},
		redisstore.WithObserver(rec))
	tenant := []limits.KeyPart{limits.KeyTenant}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "rpm", Key: tenant, Algorithm: limits.TokenBucket, Limit: 100, Per: time.Minute, Store: "redis", OnStoreError: limits.FailClosedMode},
		{Name: "cap", Key: tenant, Algorithm: limits.Concurrency, Limit: 10, Store: "redis", OnStoreError: limits.FailClosedMode},
	}}, admission.WithStore("redis", st), admission.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	srv.Pause(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = ctl.Admit(ctx, admission.Request{Tenant: "a"})
	cancel()
	srv.Unpause(t)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Admit past its own deadline = %v; want context.DeadlineExceeded", err)
	}
	if errors.Is(err, admission.ErrStoreUnavailable) {
		t.Errorf("Admit past its own deadline = %v; want no store_unavailable refusal", err)
	}
	rec.mu.Lock()
	storeErrors, breaker := len(rec.storeErr), append([]bool(nil), rec.breaker...)
	rec.mu.Unlock()
	if storeErrors != 0 || len(breaker) != 0 {
		t.Errorf("store errors = %d, breaker changes = %v; want none", storeErrors, breaker)
	}
	tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatalf("the next request = %v; want admitted by Redis", err)
	}
	tk.Done()
}
