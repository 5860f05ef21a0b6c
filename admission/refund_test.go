package admission_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestRefundGivesBackEverything admits, on a clock that never moves, ten
// times more requests than any policy allows, refunding each: under
// policies of every algorithm counting requests, tokens, input tokens and
// cost, each is admitted (the refunds gave every unit back, the requests'
// counts included, and released the permits), and each policy reports a
// settlement with Actual 0. Then a ticket charged past its estimate keeps
// what Charge recorded when refunded.
func TestRefundGivesBackEverything(t *testing.T) {
	clk := admissiontest.NewClock(time.Unix(1_800_000_000, 0))
	rec := &recorder{}
	h := time.Hour
	policies := append(stagedPolicies(),
		admission.Policy{Name: "daily-cost", Key: tenantKey, Unit: limits.UnitCost, Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: 1000},
		admission.Policy{Name: "daily-requests", Key: tenantKey, Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: 3},
		admission.Policy{Name: "input-tpm", Key: tenantKey, Unit: limits.UnitInputTokens, Algorithm: limits.SlidingLog, Limit: 300, Per: h},
	)
	ctl, err := admission.New(admission.Config{Policies: policies}, admission.WithClock(clk), admission.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := admission.Request{Tenant: "acme", Model: "m1", Operation: "chat", Tokens: 300, Cost: 400,
		Units: []admission.UnitAmount{{Unit: limits.UnitInputTokens, Amount: 250}}}
	for i := range 50 {
		tk, err := ctl.Admit(ctx, req)
		if err != nil {
			t.Fatalf("request %d after %d refunds: %v; want admitted", i, i, err)
		}
		if i%2 == 1 { // a ticket may be copied: a stale copy's Refund is inert
			cp := tk
			cp.Refund()
		} else {
			tk.Refund()
		}
		tk.Refund() // harmless twice
	}
	rec.mu.Lock()
	for _, s := range rec.settled {
		if s.Actual != 0 || s.Tenant != "acme" {
			t.Fatalf("settlement %+v of a refund; want Actual 0 for acme", s)
		}
	}
	n := len(rec.settled)
	rec.mu.Unlock()
	if want := 50 * len(policies); n != want {
		t.Errorf("%d settlements; want one per policy per refund, %d", n, want)
	}

	// Usage so far never decreases: a refund after Charge gives back only
	// the request and the estimate's part that was not charged.
	tk, err := ctl.Admit(ctx, admission.Request{Tenant: "charged", Tokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	_ = tk.Charge(admission.Usage{Tokens: 350, TokensKnown: true})
	tk.Refund()
	if _, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "charged", Tokens: 100}); !errors.Is(err, admission.ErrRateLimited) {
		t.Errorf("100 tokens after 350 charged of 400 and refunded: %v; want ErrRateLimited (what was charged stays)", err)
	}
}
