package admission_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
)

// wrapStore is the in-memory store with every limiter wrapped.
type wrapStore struct {
	wrap func(backend.Limiter) backend.Limiter
}

func (s wrapStore) Limiter(p *admission.Policy) (backend.Limiter, error) {
	l, err := memstore.Store{}.Limiter(p)
	return s.wrap(l), err
}

// renewCounter counts the renewals that reach the store, and fails them
// while err is set.
type renewCounter struct {
	backend.Limiter
	mu     sync.Mutex
	renews int
	err    error
}

func (l *renewCounter) Renew(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, now time.Time) error {
	l.mu.Lock()
	l.renews++
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.Limiter.(backend.Renewer).Renew(ctx, key, lim, g, now)
}

func (l *renewCounter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renews
}

// storeErrors records the store errors besides the rest.
type storeErrors struct {
	recorder
	errs []admission.StoreEvent
}

func (r *storeErrors) StoreError(e admission.StoreEvent) {
	r.mu.Lock()
	r.errs = append(r.errs, e)
	r.mu.Unlock()
}

func renewController(t *testing.T, clock admission.Clock, obs admission.Observer, st backend.Store) *admission.Controller {
	t.Helper()
	p := admission.Policy{Name: "inflight", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 1, MaxHold: 10 * time.Second, Store: "wrapped"}
	c, err := admission.New(admission.Config{Policies: []admission.Policy{p}},
		admission.WithClock(clock), admission.WithObserver(obs), admission.WithStore("wrapped", st))
	if err != nil {
		t.Fatal(err)
	}
	// Closed: no lease keeper renews the tickets, only their own Renew
	// (the tests below are of Renew; TestLeaseKeeper is of the keeper).
	c.Close()
	return c
}

// TestRenewKeepsLongWork: a ticket renewed while its work runs keeps its
// permit well past MaxHold, with one store call per half MaxHold however
// often it renews; once it stops renewing, the lease expires MaxHold after
// the last renewal and the ticket is told.
func TestRenewKeepsLongWork(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &storeErrors{}
	var lim *renewCounter
	c := renewController(t, clock, rec, wrapStore{func(l backend.Limiter) backend.Limiter {
		lim = &renewCounter{Limiter: l}
		return lim
	}})
	ctx := context.Background()
	r := admission.Request{Tenant: "acme"}
	stream, err := c.Admit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	// A chunk every 250ms for 40s.
	for at := 250 * time.Millisecond; at <= 40*time.Second; at += 250 * time.Millisecond {
		clock.Set(backendtest.Epoch.Add(at))
		if err := stream.Renew(); err != nil {
			t.Fatalf("Renew at %v: %v", at, err)
		}
		if at%(5*time.Second) == 0 {
			if _, err := c.TryAdmit(ctx, r); !errors.Is(err, admission.ErrConcurrencyLimited) {
				t.Fatalf("TryAdmit at %v beside the renewed stream = %v; want ErrConcurrencyLimited", at, err)
			}
		}
	}
	// Renewed at 5s, 10s, ..., 40s.
	if n := lim.count(); n != 8 {
		t.Errorf("store renewals over 40s of chunks = %d; want 8 (one per half MaxHold)", n)
	}
	// The stream stalls: no renewal after 40s.
	clock.Set(backendtest.Epoch.Add(50*time.Second - time.Nanosecond))
	if _, err := c.TryAdmit(ctx, r); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("TryAdmit just before the last renewal's MaxHold = %v; want ErrConcurrencyLimited", err)
	}
	clock.Set(backendtest.Epoch.Add(50 * time.Second))
	other, err := c.TryAdmit(ctx, r)
	if err != nil {
		t.Fatalf("TryAdmit MaxHold after the last renewal = %v; want admitted", err)
	}
	if rec.expired != 1 {
		t.Errorf("LeaseExpired reported %d leases; want 1", rec.expired)
	}
	if err := stream.Renew(); !errors.Is(err, admission.ErrLeaseExpired) {
		t.Errorf("Renew of the expired lease = %v; want ErrLeaseExpired", err)
	}
	if err := stream.Renew(); err != nil {
		t.Errorf("Renew again = %v; want nil (the loss is told once)", err)
	}
	// Settling the stale stream does not release the new holder's permit.
	stream.Done()
	if _, err := c.TryAdmit(ctx, r); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Errorf("TryAdmit after the stale ticket's Done = %v; want ErrConcurrencyLimited", err)
	}
	other.Done()
	if err := other.Renew(); err != nil {
		t.Errorf("Renew of a settled ticket = %v; want nil", err)
	}
	if err := (admission.Ticket{}).Renew(); err != nil {
		t.Errorf("Renew of the zero Ticket = %v; want nil", err)
	}
}

// TestRenewNeverCalledExpires: a ticket never renewed (its process
// stopped renewing) loses its permit after MaxHold.
func TestRenewNeverCalledExpires(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &storeErrors{}
	c := renewController(t, clock, rec, wrapStore{func(l backend.Limiter) backend.Limiter { return l }})
	ctx := context.Background()
	r := admission.Request{Tenant: "acme"}
	if _, err := c.Admit(ctx, r); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	if _, err := c.TryAdmit(ctx, r); err != nil {
		t.Fatalf("TryAdmit after MaxHold = %v; want admitted", err)
	}
	if rec.expired != 1 {
		t.Errorf("LeaseExpired reported %d leases; want 1", rec.expired)
	}
}

// TestRenewStoreTrouble: a store that cannot renew is reported as such;
// a failed renewal is reported to the observer and tried again at the
// next call.
func TestRenewStoreTrouble(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := renewController(t, clock, &storeErrors{}, wrapStore{func(l backend.Limiter) backend.Limiter {
		return struct{ backend.Limiter }{l} // hides Renew
	}})
	tk, err := c.Admit(context.Background(), admission.Request{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Renew(); err != nil {
		t.Errorf("Renew before half MaxHold = %v; want nil (nothing to do)", err)
	}
	clock.Advance(6 * time.Second)
	if err := tk.Renew(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Renew on a store that cannot = %v; want errors.ErrUnsupported", err)
	}
	tk.Done()

	clock = admissiontest.NewClock(backendtest.Epoch)
	rec := &storeErrors{}
	var lim *renewCounter
	c = renewController(t, clock, rec, wrapStore{func(l backend.Limiter) backend.Limiter {
		lim = &renewCounter{Limiter: l}
		return lim
	}})
	tk, err = c.Admit(context.Background(), admission.Request{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	down := errors.New("store down")
	lim.err = down
	clock.Advance(6 * time.Second)
	if err := tk.Renew(); !errors.Is(err, down) {
		t.Errorf("Renew with the store down = %v; want its error", err)
	}
	if len(rec.errs) != 1 || rec.errs[0].Policy != "inflight" || !errors.Is(rec.errs[0].Err, down) {
		t.Errorf("store errors = %+v; want one for inflight", rec.errs)
	}
	lim.mu.Lock()
	lim.err = nil
	lim.mu.Unlock()
	clock.Advance(time.Second)
	if err := tk.Renew(); err != nil {
		t.Fatalf("Renew once the store is back = %v", err)
	}
	if n := lim.count(); n != 2 {
		t.Errorf("store renewals = %d; want 2 (the failed one is tried again)", n)
	}
	// Renewed at 7s: held until 17s.
	clock.Set(backendtest.Epoch.Add(17*time.Second - time.Nanosecond))
	if _, err := c.TryAdmit(context.Background(), admission.Request{Tenant: "acme"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Errorf("TryAdmit before the renewed lease expires = %v; want ErrConcurrencyLimited", err)
	}
	tk.Done()
}
