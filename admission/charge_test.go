package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestChargeWithoutTicket charges 1500 tokens of finished work to a
// tenant under a request rate, a token bucket of 1000 tokens, a shadow
// daily token quota and a concurrency cap: the bucket goes into debt (its
// next request is refused), the quota counts them, the request rate and
// the concurrency cap are untouched, and the observer gets one settlement
// per charged policy (Estimated 0, Actual 1500, the figures after) and no
// decision.
func TestChargeWithoutTicket(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	rec := &recorder{}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "rpm", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: 1, Per: time.Minute},
		{Name: "tpm", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Minute},
		{Name: "daily", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: 10_000, Mode: limits.Shadow},
		{Name: "inflight", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 1, MaxHold: time.Minute},
	}}, admission.WithClock(clk), admission.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ctl.Charge(ctx, admission.Request{Tenant: "acme", Tokens: 7}, admission.Usage{Tokens: 1500, TokensKnown: true}); err != nil {
		t.Fatalf("Charge = %v", err)
	}
	rec.mu.Lock()
	decisions, settled := len(rec.decisions), append([]admission.Settlement(nil), rec.settled...)
	rec.mu.Unlock()
	if decisions != 0 {
		t.Errorf("%d decisions reported for a charge; want 0", decisions)
	}
	want := map[string]int64{"tpm": 0, "daily": 8500} // Remaining after
	if len(settled) != len(want) {
		t.Fatalf("settlements %+v; want one for tpm and one for daily", settled)
	}
	for _, s := range settled {
		rem, ok := want[s.Policy]
		if !ok || s.Estimated != 0 || s.Actual != 1500 || s.Remaining != rem || s.Tenant != "acme" || !s.Admitted.Equal(clk.Now()) {
			t.Errorf("settlement %+v; want policy tpm or daily, Estimated 0, Actual 1500, Remaining %d, for acme, now", s, rem)
		}
	}
	// The request rate and the cap have their whole limit; the bucket in
	// debt refuses even a small request.
	_, err = ctl.TryAdmit(ctx, admission.Request{Tenant: "acme", Tokens: 1})
	var rej *admission.Rejection
	if !errors.As(err, &rej) || rej.Policy != "tpm" {
		t.Errorf("TryAdmit after 1500 tokens charged = %v; want a refusal by tpm", err)
	}
	clk.Advance(31 * time.Second) // 516 tokens refilled: the debt of 500 is paid
	tk, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "acme", Tokens: 1})
	if err != nil {
		t.Fatalf("TryAdmit after the debt is paid = %v; want admitted (rpm, inflight untouched by the charge)", err)
	}
	tk.Done()
	// Nothing to charge: no unit known, or only requests.
	if err := ctl.Charge(ctx, admission.Request{Tenant: "acme"}, admission.Usage{}); err != nil {
		t.Errorf("Charge(nothing) = %v", err)
	}
	rec.mu.Lock()
	n := len(rec.settled)
	rec.mu.Unlock()
	if n != len(want)+4 { // the four of the admission just settled
		t.Errorf("%d settlements after a charge of nothing; want %d", n, len(want)+4)
	}
}

// A ticket's Charge charges each rate policy of a unit it knows what the
// usage so far exceeds its grant by, whatever the number of policies (past
// 64 too) and wherever they are among the others, and policies Continue
// added after an earlier charge too; request rates and concurrency caps
// are left alone. A charge that charges allocates nothing.
func TestTicketChargeEveryPolicy(t *testing.T) {
	start := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	for _, n := range []int{3, 64, 70} {
		clk := admissiontest.NewClock(start)
		var ps []admission.Policy
		for i := range n - 1 {
			p := admission.Policy{Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Hour}
			switch i % 3 {
			case 0:
				p.Name, p.Unit = fmt.Sprintf("tokens%d", i), limits.UnitTokens
			case 1:
				p.Name = fmt.Sprintf("requests%d", i)
			default:
				p.Name, p.Algorithm, p.Per = fmt.Sprintf("leases%d", i), limits.Concurrency, 0
			}
			ps = append(ps, p)
		}
		// The last policy needs the model: Begin leaves it to Continue.
		ps = append(ps, admission.Policy{Name: "tokens-late", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket,
			Limit: 1000, Per: time.Hour, Match: limits.Match{Models: []string{"gpt-*"}}})
		ctl, err := admission.New(admission.Config{Policies: ps}, admission.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tk, err := ctl.Begin(ctx, admission.Request{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		_ = tk.Charge(admission.Usage{Tokens: 10, TokensKnown: true})
		if err := tk.Continue(ctx, admission.Request{Tenant: "acme", Model: "gpt-4o", Tokens: 5}); err != nil {
			t.Fatal(err)
		}
		tokens := int64(100)
		_ = tk.Charge(admission.Usage{Tokens: tokens, TokensKnown: true})
		if a := testing.AllocsPerRun(20, func() {
			tokens++
			_ = tk.Charge(admission.Usage{Tokens: tokens, TokensKnown: true})
		}); a != 0 {
			t.Errorf("%d policies: Charge allocates %v times; want 0", n, a)
		}
		for _, st := range tk.Statuses(nil) {
			want := int64(999) // a request counted once, a lease held
			if strings.HasPrefix(st.Policy, "tokens") {
				want = 1000 - tokens
			}
			if st.Remaining != want {
				t.Errorf("%d policies: %s has %d left after %d tokens; want %d", n, st.Policy, st.Remaining, tokens, want)
			}
		}
		tk.Done()
	}
}
