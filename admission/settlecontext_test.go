package admission_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

type settleKey struct{}

// TestSettleContextReachesObservers: a ticket settled with SettleContext
// hands its context to the observers with each settlement, Charge with
// its own, and Settle, Done and Refund hand none. A context cancelled by
// then still settles: the concurrency permit is given back.
func TestSettleContextReachesObservers(t *testing.T) {
	ctl, rec, _ := quotaController(t, limits.TokenBucket, 1000)
	t.Cleanup(func() { _ = ctl.Close() })
	inflight, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 1,
	}}}, admission.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inflight.Close() })
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), settleKey{}, "request"))
	req := admission.Request{Tenant: "a", Tokens: 100}
	for _, tc := range []struct {
		name string
		ctl  *admission.Controller
		end  func(admission.Ticket) error
		want bool // the settlement has ctx
	}{
		{"SettleContext", ctl, func(tk admission.Ticket) error {
			tk.SettleContext(ctx, admission.Usage{Tokens: 80, TokensKnown: true})
			return nil
		}, true},
		{"Settle", ctl, func(tk admission.Ticket) error { tk.Settle(admission.Usage{Tokens: 80, TokensKnown: true}); return nil }, false},
		{"Done", ctl, func(tk admission.Ticket) error { tk.Done(); return nil }, false},
		{"Refund", ctl, func(tk admission.Ticket) error { tk.Refund(); return nil }, false},
		{"Charge", ctl, func(admission.Ticket) error {
			return ctl.Charge(ctx, req, admission.Usage{Tokens: 5, TokensKnown: true})
		}, true},
		{"SettleContext cancelled", inflight, func(tk admission.Ticket) error {
			cancel()
			tk.SettleContext(ctx, admission.Usage{})
			return nil
		}, true},
	} {
		tk, err := tc.ctl.Admit(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: admit: %v", tc.name, err)
		}
		if err := tc.end(tk); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := rec.lastSettled(t)
		if got := s.Context != nil && s.Context.Value(settleKey{}) == "request"; got != tc.want {
			t.Errorf("%s: settlement has the request's context: %v; want %v", tc.name, got, tc.want)
		}
		tk.Done() // a charge's ticket, still open
	}
	// The permit settled with a cancelled context was given back.
	tk, err := inflight.TryAdmit(context.Background(), req)
	if err != nil {
		t.Fatalf("after SettleContext with a cancelled context: %v; want the permit free", err)
	}
	tk.Done()
}
