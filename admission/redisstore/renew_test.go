package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRenewServerTime: a stream renewed at 0.6×MaxHold still holds its
// permit at 1.2×MaxHold, and, no longer renewed (its replica crashed), has
// lost it at 1.7×MaxHold, by the Redis server's clock: the replica's
// clock is a day behind the server's and only measures intervals. A renewal
// before half MaxHold costs no call; one after it costs one.
func TestRenewServerTime(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Timeout: time.Second}, redisstore.WithObserver(rec))
	// Redis decides on its own clock, the machine's: each step must run
	// before an expiry, and a slow machine has 0.4×MaxHold to spare.
	const hold = 2 * time.Second
	p := admission.Policy{Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency,
		Limit: 1, MaxHold: hold, Store: "redis"}
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}},
		admission.WithStore("redis", st), admission.WithClock(clock), admission.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	// No lease keeper: the stream renews itself (Ticket.Renew), until its
	// replica crashes.
	ctl.Close()
	ctx := context.Background()
	r := admission.Request{Tenant: "acme"}
	start := time.Now()
	// at waits until d after the admission, or until Redis's clock has
	// passed notBefore (the instant an expiry is due), and moves the
	// replica's clock to d.
	at := func(d time.Duration, notBefore time.Time) {
		time.Sleep(max(time.Until(start.Add(d)), time.Until(notBefore)))
		clock.Set(backendtest.Epoch.Add(d))
	}
	stream, err := ctl.Admit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	at(hold/4, time.Time{})
	calls := scriptCalls(t, srv.Addr)
	if err := stream.Renew(); err != nil {
		t.Fatalf("Renew at 0.25×MaxHold: %v", err)
	}
	if n := scriptCalls(t, srv.Addr) - calls; n != 0 {
		t.Errorf("Renew at 0.25×MaxHold made %d script calls; want 0", n)
	}
	at(hold*6/10, time.Time{})
	rec.reset()
	if err := stream.Renew(); err != nil {
		t.Fatalf("Renew at 0.6×MaxHold: %v", err)
	}
	renewed := time.Now() // the renewed lease expires by hold after at the latest
	if got, _ := rec.snapshot(); len(got) != 1 || got[0].Op != "renew" || got[0].Err != nil {
		t.Errorf("store calls of a renewal = %+v; want one renew", got)
	}
	at(hold*12/10, time.Time{})
	if _, err := ctl.TryAdmit(ctx, r); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("TryAdmit at 1.2×MaxHold beside the renewed stream = %v; want ErrConcurrencyLimited", err)
	}
	at(hold*17/10, renewed.Add(hold))
	other, err := ctl.TryAdmit(ctx, r)
	if err != nil {
		t.Fatalf("TryAdmit at 1.7×MaxHold, the stream unrenewed since 0.6×: %v", err)
	}
	defer other.Done()
	rec.mu.Lock()
	expired := rec.expired
	rec.mu.Unlock()
	if expired != 1 {
		t.Errorf("LeaseExpired reported %d leases; want 1", expired)
	}
	if err := stream.Renew(); !errors.Is(err, admission.ErrLeaseExpired) {
		t.Errorf("Renew of the expired lease = %v; want ErrLeaseExpired", err)
	}
}

// TestRenewExtendsKey: a renewal moves the partition key's expiry with
// the lease (a renewed lease's partition is not dropped under it), from
// the server's time whatever instant the caller passes.
func TestRenewExtendsKey(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	prefix := uniquePrefix()
	const grace = 50 * time.Millisecond
	st := newStore(t, client, redisstore.Config{Prefix: prefix, Timeout: time.Second, IdleGrace: grace})
	// Redis decides on its own clock, the machine's: a slow machine has
	// half of MaxHold to spare at each step.
	p := admission.Policy{Name: "cr", Algorithm: limits.Concurrency, Limit: 2, MaxHold: 2 * time.Second}
	lim, err := st.Limiter(&p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, err := backendtest.Acquire(ctx, lim, "acme", limitOf(&p), 1, time.Now())
	if err != nil || !g.OK {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	acquired := time.Now() // the lease, unrenewed, expires by MaxHold after at the latest
	time.Sleep(p.MaxHold / 2)
	// A caller with no idea of the time.
	if err := lim.(backend.Renewer).Renew(ctx, "acme", limitOf(&p), &g, time.Unix(0, 1)); err != nil {
		t.Fatal(err)
	}
	if g.Stamp == 0 || g.Remaining != 1 || g.Expired != 0 {
		t.Errorf("after Renew: stamp %d remaining %d expired %d; want held, 1, 0", g.Stamp, g.Remaining, g.Expired)
	}
	ttl, err := client.PTTL(ctx, prefix+"{acme}:cr:cl:acme").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Unrenewed, the key would expire within MaxHold/2 + grace.
	if ttl <= p.MaxHold/2+grace || ttl > p.MaxHold+grace {
		t.Errorf("PTTL after a renewal MaxHold/2 in = %v; want in (%v, %v]", ttl, p.MaxHold/2+grace, p.MaxHold+grace)
	}
	// Past the unrenewed lease's expiry.
	time.Sleep(time.Until(acquired.Add(p.MaxHold + grace)))
	if g2, err := backendtest.Acquire(ctx, lim, "acme", limitOf(&p), 2, time.Now()); err != nil || g2.OK || g2.Remaining != 1 {
		t.Errorf("Acquire(2) past the first lease's expiry = %+v, %v; want refused with 1 left: the renewed lease holds", g2, err)
	}
}
