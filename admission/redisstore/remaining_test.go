package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/puretest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// snapshot returns every key of the server with its serialized value
// (DUMP, whatever its type) and its absolute expiry (PEXPIRETIME, which
// the wall clock does not move), sorted.
func snapshot(t *testing.T, client *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	keys, err := client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		v, err := client.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		exp, err := client.PExpireTime(ctx, k).Result()
		if err != nil {
			t.Fatalf("PEXPIRETIME %s: %v", k, err)
		}
		fmt.Fprintf(&b, "%s %q %v\n", k, v, exp)
	}
	return b.String()
}

// TestRemainingReadsOnly runs one trace of admissions and settlements,
// over tenants of different plans and overrides and every algorithm, on
// a controller over Redis and one in memory, and reads what every tenant
// (and one never seen) has left along the way: the figures read from
// Redis are the memory's, and reading changes no key, no value and no
// expiry on the server, nor the number of keys.
func TestRemainingReadsOnly(t *testing.T) {
	client := newClient(t, redistest.Start(t).Addr)
	stores := []backend.Store{
		memstore.Store{},
		newStore(t, client, redisstore.Config{CallerTime: true, Timeout: 10 * time.Second}),
	}
	var ctls [2]*admission.Controller
	var clocks [2]*admissiontest.Clock
	for i, st := range stores {
		clocks[i] = admissiontest.NewClock(backendtest.Epoch)
		ctl, err := admission.New(puretest.Config("s"), admission.WithClock(clocks[i]), admission.WithStore("s", st))
		if err != nil {
			t.Fatal(err)
		}
		ctl.Close() // no lease keeper: the leases of the tickets kept expire at instants the trace fixes
		ctls[i] = ctl
	}
	ctx := context.Background()
	tenants := []string{"acme", "initech", "hooli", "globex"}
	read := func(ctl *admission.Controller, tenant string) string {
		ss, err := ctl.Remaining(ctx, admission.Request{Tenant: tenant}, nil)
		if err != nil {
			t.Fatalf("Remaining(%s): %v", tenant, err)
		}
		// Resets to the microsecond: after settlements, a token bucket's
		// level in Redis and in memory may part in the last bits (the
		// admissions' own figures then differ by a nanosecond too).
		var b strings.Builder
		for _, s := range ss {
			fmt.Fprintf(&b, "%s %s limit=%d remaining=%d reset=%v; ", s.Policy, s.Mode, s.Limit, s.Remaining, s.Reset.Round(time.Microsecond))
		}
		return b.String()
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var kept [2][]admission.Ticket
	admitted, reads := 0, 0
	for op := range 300 {
		dt := time.Duration(rng.Int64N(int64(3 * time.Second)))
		r := admission.Request{Tenant: tenants[rng.IntN(len(tenants))], Tokens: 1 + rng.Int64N(1500)}
		settle, used := rng.IntN(3), rng.Int64N(3000)
		for i, ctl := range ctls {
			clocks[i].Advance(dt)
			tk, err := ctl.TryAdmit(ctx, r)
			if errors.As(err, new(*admission.Rejection)) {
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			admitted += i
			switch settle {
			case 0:
				tk.Settle(admission.Usage{Tokens: used, TokensKnown: true})
			case 1:
				tk.Refund()
			default:
				kept[i] = append(kept[i], tk) // in flight until its lease expires
			}
		}
		if op%10 != 0 {
			continue
		}
		before, keys := snapshot(t, client), client.DBSize(ctx).Val()
		for _, tenant := range append(tenants, fmt.Sprintf("stranger-%d", op)) {
			mem, shared := read(ctls[0], tenant), read(ctls[1], tenant)
			if shared != mem {
				t.Errorf("op %d: Remaining(%s) on Redis =\n\t%s\nwant (memory)\n\t%s", op, tenant, shared, mem)
			}
			reads++
		}
		if after := snapshot(t, client); after != before {
			t.Fatalf("op %d: reading what is left changed Redis:\n%s\nthen\n%s", op, before, after)
		}
		if n := client.DBSize(ctx).Val(); n != keys {
			t.Fatalf("op %d: DBSIZE after reading = %d; want %d as before", op, n, keys)
		}
	}
	if admitted == 0 || reads == 0 {
		t.Fatalf("%d admitted on Redis, %d reads: the trace checks nothing", admitted, reads)
	}
}
