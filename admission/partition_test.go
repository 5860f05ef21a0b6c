package admission_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestPartitionFlood sends 1,000,000 distinct tenants at a policy capped at
// 10,000 partitions: memory stays bounded and the overflow behaves as
// configured.
func TestPartitionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("flood of a million keys")
	}
	for _, overflow := range []limits.OverflowMode{limits.OverflowShared, limits.OverflowReject} {
		t.Run(overflow.String(), func(t *testing.T) {
			t.Parallel()
			clock := admissiontest.NewClock(backendtest.Epoch)
			c := newController(t, clock, nil, admission.Policy{
				Name: "rpm", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Hour,
				MaxPartitions: 10000, Overflow: overflow,
			})
			ctx := context.Background()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var admitted, overflowed int
			buf := make([]byte, 0, 32)
			for i := 0; i < 1_000_000; i++ {
				buf = strconv.AppendInt(append(buf[:0], "tenant-"...), int64(i), 10)
				tk, err := c.TryAdmit(ctx, admission.Request{Tenant: string(buf)})
				switch {
				case err == nil:
					admitted++
					tk.Done()
				case errors.Is(err, admission.ErrOverflow):
					overflowed++
				case errors.Is(err, admission.ErrRateLimited):
				default:
					t.Fatal(err)
				}
				if i%100_000 == 0 {
					clock.Advance(time.Millisecond)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			s := c.Stats()[0]
			if s.Partitions > 10000 {
				t.Errorf("partitions = %d; want <= 10000", s.Partitions)
			}
			grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			// 10,000 partitions at well under 200 bytes each, plus the
			// table's structure: a bound of 8 MB holds with a wide margin
			// even counting the sibling subtest running in parallel, while a
			// million partitions would need over 100 MB.
			if grown > 8<<20 {
				t.Errorf("heap grew by %d bytes for a table of %d partitions", grown, s.Partitions)
			}
			t.Logf("%s: admitted %d, overflow rejections %d, heap +%d KB, partitions %d", overflow, admitted, overflowed, grown>>10, s.Partitions)
			switch overflow {
			case limits.OverflowShared:
				// 10,000 own partitions admit one each; the rest share one
				// bucket of 1000.
				if admitted != 10000+1000 || overflowed != 0 {
					t.Errorf("shared overflow: admitted %d, overflowed %d; want 11000, 0", admitted, overflowed)
				}
			case limits.OverflowReject:
				if admitted != 10000 || overflowed != 990000 {
					t.Errorf("reject overflow: admitted %d, overflowed %d; want 10000, 990000", admitted, overflowed)
				}
			}
		})
	}
}

func TestIdleEviction(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, admission.Policy{
		Name: "rps", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 10, Per: time.Second,
		IdleTimeout: time.Minute, MaxPartitions: 100,
	})
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		tk, err := c.TryAdmit(ctx, admission.Request{Tenant: strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		tk.Done()
	}
	if s := c.Stats()[0]; s.Partitions != 100 {
		t.Fatalf("partitions = %d; want 100", s.Partitions)
	}
	// The table is full, but every bucket refills within 100ms: a new
	// tenant takes the place of a neutral partition instead of overflowing.
	clock.Advance(time.Second)
	tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "newcomer"})
	if err != nil {
		t.Fatal(err)
	}
	tk.Done()
	s := c.Stats()[0]
	if s.Evicted == 0 || s.Partitions > 100 {
		t.Fatalf("full table: evicted %d, partitions %d", s.Evicted, s.Partitions)
	}
	// After the idle timeout every partition that is back to neutral goes.
	clock.Advance(2 * time.Minute)
	for i := 0; i < 64; i++ {
		// Creating partitions sweeps the shards they land in.
		tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "later-" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		tk.Done()
	}
	if s := c.Stats()[0]; s.Partitions > 64 {
		t.Errorf("after the idle timeout: %d partitions; want only the 64 new ones", s.Partitions)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.evicted == 0 {
		t.Error("evictions not reported to the observer")
	}
}

// A sweep judges each partition by its own plan's limit, never by the
// limit of the request that triggered it: a free tenant arriving at a full
// table must not find a pro tenant's half-used bucket "full" by the free
// capacity and drop it (the pro tenant would start again from a full
// bucket), nor refill it at the free rate. Every algorithm whose state a
// plan's limit reads is checked.
func TestSweepJudgesPartitionsByTheirOwnPlan(t *testing.T) {
	for _, tc := range []struct {
		name       string
		p          admission.Policy
		pro        limits.Override
		take, want int64         // what pro takes, and the remaining its next request of 1 sees
		after      time.Duration // before the free tenant arrives: within pro's window, past free's
	}{
		{"token bucket", admission.Policy{Algorithm: limits.TokenBucket, Limit: 60, Per: time.Minute}, limits.Override{Limit: 600}, 100, 499, time.Millisecond},
		{"fixed window", admission.Policy{Algorithm: limits.FixedWindow, Limit: 60, Per: time.Minute}, limits.Override{Per: time.Hour, Limit: 600}, 100, 499, time.Millisecond},
		{"sliding window", admission.Policy{Algorithm: limits.SlidingWindow, Limit: 60, Per: time.Minute}, limits.Override{Per: time.Hour, Limit: 600}, 100, 499, time.Millisecond},
		{"sliding log", admission.Policy{Algorithm: limits.SlidingLog, Limit: 60, Per: time.Minute}, limits.Override{Per: time.Hour, Limit: 600}, 100, 499, 2 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Name, p.Key, p.Unit, p.MaxPartitions, p.IdleTimeout = "rpm", []limits.KeyPart{limits.KeyTenant}, limits.UnitTokens, 2, time.Hour
			clock := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC))
			c, err := admission.New(admission.Config{
				Policies: []admission.Policy{p},
				Plans: limits.Plans{
					Plans:   map[string]map[string]limits.Override{"pro": {"rpm": tc.pro}},
					Tenants: map[string]limits.TenantPlan{"acme": {Plan: "pro"}},
				},
			}, admission.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			admit := func(tenant string, tokens int64) admission.Ticket {
				t.Helper()
				tk, err := c.TryAdmit(ctx, admission.Request{Tenant: tenant, Tokens: tokens})
				if err != nil {
					t.Fatalf("%s, %d tokens: %v", tenant, tokens, err)
				}
				return tk
			}
			admit("acme", tc.take).Done()
			admit("globex", 1).Done() // the table is full
			clock.Advance(tc.after)
			admit("initech", 1).Done() // a full table: a sweep, judged by the free limit
			tk := admit("acme", 1)
			defer tk.Done()
			if got := tk.Statuses(nil)[0].Remaining; got != tc.want {
				t.Errorf("acme's remaining after a sweep by a free tenant = %d; want %d (its own partition kept)", got, tc.want)
			}
		})
	}
}
