//go:build !race

// The race detector makes sync.Pool drop a random part of what is put
// back, so a pooled ticket is sometimes allocated anew: allocation counts
// are measured without it (make test runs this file's tests without
// -race, after the others).

package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/fingerprint"
	"github.com/sluicehq/sluice/admission/limits"
)

// discard is an observer that ignores everything, yet is not
// NopObserver: the controller builds every event for it.
type discard struct{ admission.NopObserver }

// TestRefundAndChargeAllocateNothing: like Settle, Refund and a Charge
// that succeeds allocate nothing, events included.
func TestRefundAndChargeAllocateNothing(t *testing.T) {
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "q", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: limits.MaxAmount},
		{Name: "rpm", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: 1, Per: time.Minute},
	}}, admission.WithObserver(discard{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := admission.Request{Tenant: "acme", Tokens: 10}
	u := admission.Usage{Tokens: 5, TokensKnown: true}
	if n := testing.AllocsPerRun(200, func() {
		tk, err := ctl.Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		tk.Refund()
		if err := ctl.Charge(ctx, req, u); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Admit, Refund and Charge: %v allocations; want 0", n)
	}
}

// TestSessionAdmitAndDoneAllocateNothing: a session's key is built in the
// ticket's buffer, so admitting and settling a request of a known session
// allocates nothing.
func TestSessionAdmitAndDoneAllocateNothing(t *testing.T) {
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "session-steps", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession}, Unit: limits.UnitSteps,
			Algorithm: limits.Quota, Per: 24 * time.Hour, Limit: limits.MaxAmount},
		{Name: "tenant-rpm", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: limits.MaxAmount, Per: time.Minute},
	}}, admission.WithObserver(discard{}))
	if err != nil {
		t.Fatal(err)
	}
	units := []admission.UnitAmount{{Unit: limits.UnitSteps, Amount: 1}}
	if n := admitAllocs(t, ctl, admission.Request{Tenant: "acme", Session: "run-1", Units: units}); n != 0 {
		t.Errorf("Admit and Done of a session's request: %v allocations; want 0", n)
	}
}

// admitAllocs returns the allocations of one Admit and Done of req on
// ctl, once its partitions exist.
func admitAllocs(t *testing.T, ctl *admission.Controller, req admission.Request) float64 {
	t.Helper()
	ctx := context.Background()
	tk, err := ctl.Admit(ctx, req) // creates the partitions
	if err != nil {
		t.Fatal(err)
	}
	tk.Done()
	return testing.AllocsPerRun(200, func() {
		tk, err := ctl.Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		tk.Done()
	})
}

// TestLoopAdmitAllocatesNothing: a step's fingerprint is a fixed-size
// value whose key part is written into the ticket's buffer, so admitting
// and settling a step of a known session allocates nothing.
func TestLoopAdmitAllocatesNothing(t *testing.T) {
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "loops", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession, limits.KeyFingerprint},
			Algorithm: limits.SlidingWindow, Limit: limits.MaxAmount, Per: 2 * time.Minute, Overflow: limits.OverflowEvict},
	}}, admission.WithObserver(discard{}))
	if err != nil {
		t.Fatal(err)
	}
	req := admission.Request{Tenant: "acme", Session: "run-1", Fingerprint: fingerprint.ToolCall("t", []byte(`{}`))}
	if n := admitAllocs(t, ctl, req); n != 0 {
		t.Errorf("Admit and Done of a step: %v allocations; want 0", n)
	}
}
