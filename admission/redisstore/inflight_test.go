package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// inFlightController returns a controller on a real redis-server with a
// concurrency cap of 4 (MaxHold 30s) on the fake clock, the server and
// the clock.
func inFlightController(t *testing.T) (*admission.Controller, *redistest.Server, *admissiontest.Clock) {
	t.Helper()
	srv := redistest.Start(t)
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{CallerTime: true, Timeout: 10 * time.Second})
	clock := admissiontest.NewClock(backendtest.Epoch)
	p := admission.Policy{Name: "global", Algorithm: limits.Concurrency, Limit: 4, MaxHold: 30 * time.Second, Store: "redis"}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}},
		admission.WithStore("redis", st), admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	return ctl, srv, clock
}

// TestInFlightForgetsDroppedTickets: a ticket dropped unsettled (a leak
// in the caller's code) leaves the replica's in-flight figure once the
// collector has found it and the lease keeper has run, instead of
// counting until the process ends; the settled and live ones are counted
// as before.
func TestInFlightForgetsDroppedTickets(t *testing.T) {
	ctl, _, clock := inFlightController(t)
	ctx := context.Background()
	admitDropped := func() {
		if _, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "a"}); err != nil { // never settled
			t.Fatal(err)
		}
	}
	admitDropped()
	admitDropped()
	live, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if n := ctl.Stats()[0].InFlight; n != 3 {
		t.Fatalf("in flight = %d; want 3", n)
	}
	runtime.GC()
	clock.Advance(10 * time.Second) // a run of the keeper (a third of MaxHold)
	if n := ctl.Stats()[0].InFlight; n != 1 {
		t.Errorf("in flight once the dropped tickets were collected = %d; want 1 (the live one)", n)
	}
	live.Done()
	if n := ctl.Stats()[0].InFlight; n != 0 {
		t.Errorf("in flight after the live ticket ended = %d; want 0", n)
	}
}

// TestInFlightForgetsExpiredLeases: a live ticket whose lease the keeper
// could not renew for its whole MaxHold (Redis down) leaves the in-flight
// figure, and its lease is lost for it (Renew says ErrLeaseExpired);
// settling it then takes nothing more off the figure.
func TestInFlightForgetsExpiredLeases(t *testing.T) {
	ctl, srv, clock := inFlightController(t)
	ctx := context.Background()
	lost, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill() // every renewal fails from now on, at once
	for range 5 {
		clock.Advance(10 * time.Second)
		if n := ctl.Stats()[0].InFlight; n != 1 && clock.Now().Sub(backendtest.Epoch) < 30*time.Second {
			t.Fatalf("in flight before the lease expired = %d; want 1", n)
		}
	}
	if n := ctl.Stats()[0].InFlight; n != 0 {
		t.Errorf("in flight %v after the last renewal = %d; want 0", clock.Now().Sub(backendtest.Epoch), n)
	}
	if err := lost.Renew(); !errors.Is(err, admission.ErrLeaseExpired) {
		t.Errorf("Renew of the expired lease = %v; want ErrLeaseExpired", err)
	}
	lost.Done()
	if n := ctl.Stats()[0].InFlight; n != 0 {
		t.Errorf("in flight after settling the expired ticket = %d; want 0", n)
	}
}
