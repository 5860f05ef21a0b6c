package admission_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestLeaseKeeperShortHoldOfAnotherSet: the keeper renews a live
// ticket's lease before it expires even when the ticket was admitted
// under a shorter MaxHold than the installed configuration's: after a
// reload that lengthened MaxHold, or for a request decided by a policy
// set of its own. Otherwise the live request's permit expires while its
// work runs and a second request is admitted beside it, past the limit.
func TestLeaseKeeperShortHoldOfAnotherSet(t *testing.T) {
	short := admission.Policy{Name: "inflight", Algorithm: limits.Concurrency, Limit: 1, MaxHold: 3 * time.Second}
	long := short
	long.MaxHold = 30 * time.Second
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// admit admits the first request under the short MaxHold, with
		// the long one installed once it returns.
		admit func(c *admission.Controller) (admission.Ticket, error)
	}{
		{"reload", func(c *admission.Controller) (admission.Ticket, error) {
			tk, err := c.Admit(ctx, admission.Request{Tenant: "a"})
			if err == nil {
				err = c.SetConfig(admission.Config{Policies: []admission.Policy{long}})
			}
			return tk, err
		}},
		{"own set", func(c *admission.Controller) (admission.Ticket, error) {
			if err := c.SetConfig(admission.Config{Policies: []admission.Policy{long}}); err != nil {
				return admission.Ticket{}, err
			}
			set, err := c.Compile(admission.Config{Policies: []admission.Policy{short}})
			if err != nil {
				return admission.Ticket{}, err
			}
			return c.Admit(ctx, admission.Request{Tenant: "a", Policies: set})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			c := newController(t, clock, nil, short)
			defer c.Close()
			tk, err := tc.admit(c)
			if err != nil {
				t.Fatal(err)
			}
			for at := 500 * time.Millisecond; at <= 40*time.Second; at += 500 * time.Millisecond {
				clock.Set(backendtest.Epoch.Add(at))
				if other, err := c.TryAdmit(ctx, admission.Request{Tenant: "b"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
					if err == nil {
						other.Done()
					}
					t.Fatalf("TryAdmit at %v beside a live ticket under a cap of 1 = %v; want ErrConcurrencyLimited", at, err)
				}
			}
			tk.Done()
			other, err := c.TryAdmit(ctx, admission.Request{Tenant: "b"})
			if err != nil {
				t.Fatalf("TryAdmit once the ticket is settled = %v; want admitted", err)
			}
			other.Done()
		})
	}
}
