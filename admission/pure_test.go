package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/internal/puretest"
)

// TestReadsArePure runs random traces of admissions and settlements over
// tenants of different plans and overrides with and without reads
// (Stats, Statuses, Remaining) interleaved: the decisions and figures
// must be the same, reading changes nothing.
func TestReadsArePure(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		puretest.Run(t, func(*testing.T) backend.Store { return memstore.Store{} }, seed, 500)
	}
}

// TestExpiredLeaseReportedWithItsPartition: reading counts an expired
// lease as no longer in flight but neither reclaims nor reports it; the
// sweep that drops its idle partition does both.
func TestExpiredLeaseReportedWithItsPartition(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, admission.Policy{Name: "inflight", Key: tenantKey, Algorithm: limits.Concurrency,
		Limit: 2, MaxHold: 30 * time.Second, IdleTimeout: time.Minute})
	ctx := context.Background()
	if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"}); err != nil { // never settled
		t.Fatal(err)
	}
	c.Close() // the process renews its leases no more
	clock.Advance(2 * time.Minute)
	for range 3 {
		if s := c.Stats()[0]; s.InFlight != 0 || s.Partitions != 1 {
			t.Fatalf("Stats after MaxHold: in flight %d, partitions %d; want 0, 1", s.InFlight, s.Partitions)
		}
	}
	if rec.expired != 0 {
		t.Fatalf("expired leases reported by reading = %d; want 0", rec.expired)
	}
	tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Done()
	if rec.expired != 1 || rec.evicted != 1 {
		t.Errorf("after the sweep: %d expired leases, %d partitions evicted reported; want 1, 1", rec.expired, rec.evicted)
	}
}
