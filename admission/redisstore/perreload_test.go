package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSettleAfterWindowReload settles a ticket admitted under a window of
// 10s after a reload lengthened it to 20s: the refund must not make the
// partition forget what the 20s window counted since. With a limit of
// 10, 1 admitted under the old window and 9 under the new, refunding the
// first leaves room for 1 more in the window, not 10.
func TestSettleAfterWindowReload(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	for _, alg := range []limits.Algorithm{limits.FixedWindow, limits.SlidingWindow, limits.Quota} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			st, err := redisstore.New(client, redisstore.Config{Prefix: uniquePrefix(), CallerTime: true, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			pol := admission.Policy{Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
				Algorithm: alg, Limit: 10, Per: 10 * time.Second, Store: "redis"}
			if alg == limits.Quota {
				pol.Period = limits.PeriodFixed
			}
			clock := admissiontest.NewClock(backendtest.Epoch)
			c, err := admission.New(admission.Config{Policies: []admission.Policy{pol}}, admission.WithClock(clock), admission.WithStore("redis", st))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			clock.Advance(5 * time.Second) // [0, 10) and [0, 20) alike
			first, err := c.TryAdmit(ctx, admission.Request{Tenant: "acme", Tokens: 1})
			if err != nil {
				t.Fatal(err)
			}
			pol.Per = 20 * time.Second
			if err := c.SetConfig(admission.Config{Policies: []admission.Policy{pol}}); err != nil {
				t.Fatal(err)
			}
			clock.Advance(7 * time.Second) // 12s: past the old window, in the new
			if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "acme", Tokens: 9}); err != nil {
				t.Fatal(err)
			}
			first.Settle(admission.Usage{Tokens: 0, TokensKnown: true})
			clock.Advance(time.Second)
			n := 0
			for range 20 {
				if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "acme", Tokens: 1}); err == nil {
					n++
				}
			}
			if n > 1 {
				t.Fatalf("%d more admitted in the window of 20s; want at most 1 (limit 10, 10 admitted, 1 refunded)", n)
			}
		})
	}
}
