package admission_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestTryAdmitAll: a group of requests is admitted whole or not at all.
// Each member gets its own answer; a refusal gives back what the others
// took (reported as admitted and rolled back), a member counting twice
// in one partition sees what the first took, and an admitted group's
// tickets settle as any other.
func TestTryAdmitAll(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec,
		admission.Policy{Name: "tenants", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: 3, Per: time.Minute},
		admission.Policy{Name: "tokens", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.FixedWindow, Limit: 100, Per: time.Minute},
	)
	ctx := context.Background()
	group := func(reqs ...admission.Request) ([]admission.Member, error) {
		ms := make([]admission.Member, len(reqs))
		for i, r := range reqs {
			ms[i].Request = r
		}
		return ms, c.TryAdmitAll(ctx, ms)
	}
	describe := func(ms []admission.Member) string {
		s := ""
		for _, m := range ms {
			var rej *admission.Rejection
			switch {
			case errors.As(m.Err, &rej):
				s += fmt.Sprintf("[refused by %s, %s %d/%d]", rej.Policy, m.Status.Policy, m.Status.Remaining, m.Status.Limit)
			case m.Ticket.Valid():
				s += fmt.Sprintf("[admitted, %s %d/%d]", m.Status.Policy, m.Status.Remaining, m.Status.Limit)
			default:
				s += fmt.Sprintf("[rolled back, %s %d/%d]", m.Status.Policy, m.Status.Remaining, m.Status.Limit)
			}
		}
		return s
	}
	steps := []struct {
		reqs []admission.Request
		want string
	}{
		// a: 60 tokens, b: 30.
		{[]admission.Request{{Tenant: "a", Tokens: 60}, {Tenant: "b", Tokens: 30}}, "[admitted, tenants 2/3][admitted, tenants 2/3]"},
		// b fits, a's 50 tokens do not: b's request and tokens are given back.
		{[]admission.Request{{Tenant: "b", Tokens: 10}, {Tenant: "a", Tokens: 50}}, "[rolled back, tenants 2/3][refused by tokens, tokens 40/100]"},
		// Twice a's partition: 30 then 20 tokens of the 40 left do not fit.
		{[]admission.Request{{Tenant: "a", Tokens: 30}, {Tenant: "a", Tokens: 20}}, "[rolled back, tenants 1/3][refused by tokens, tokens 10/100]"},
		{[]admission.Request{{Tenant: "a", Tokens: 20}, {Tenant: "a", Tokens: 20}, {Tenant: "b", Tokens: 70}}, "[admitted, tenants 1/3][admitted, tenants 0/3][admitted, tenants 1/3]"},
		// An invalid amount fails its member, and so the group.
		{[]admission.Request{{Tenant: "b", Tokens: 0}, {Tenant: "b", Tokens: -1}}, "[rolled back, tenants 1/3]"},
	}
	for i, s := range steps {
		ms, err := group(s.reqs...)
		got := describe(ms)
		if i == len(steps)-1 {
			if !errors.Is(err, admission.ErrInvalidCost) || !errors.Is(ms[1].Err, admission.ErrInvalidCost) {
				t.Fatalf("step %d: err %v, member 1 %v; want ErrInvalidCost", i, err, ms[1].Err)
			}
			got = describe(ms[:1])
		}
		if got != s.want {
			t.Errorf("step %d: %s; want %s", i, got, s.want)
		}
		if (err == nil) != (i == 0 || i == 3) {
			t.Errorf("step %d: err = %v", i, err)
		}
		for _, m := range ms {
			m.Ticket.Done()
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rolledBack := 0
	for _, d := range rec.decisions {
		if d.Outcome == admission.Admitted && d.RolledBack {
			rolledBack++
		}
	}
	// Steps 1 and 2: the first member's two policies and the second's
	// tenants policy; step 4: b's two.
	if rolledBack != 8 {
		t.Errorf("%d admitted decisions rolled back; want 8", rolledBack)
	}
}
