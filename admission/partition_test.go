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
)

// TestPartitionFlood sends 1,000,000 distinct tenants at a policy capped at
// 10,000 partitions: memory stays bounded and the overflow behaves as
// configured.
func TestPartitionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("flood of a million keys")
	}
	for _, overflow := range []admission.OverflowMode{admission.OverflowShared, admission.OverflowReject} {
		t.Run(overflow.String(), func(t *testing.T) {
			t.Parallel()
			clock := admissiontest.NewClock(admissiontest.Epoch)
			c := newController(t, clock, nil, admission.Policy{
				Name: "rpm", Key: tenantKey, Algorithm: admission.TokenBucket, Limit: 1000, Per: time.Hour,
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
			case admission.OverflowShared:
				// 10,000 own partitions admit one each; the rest share one
				// bucket of 1000.
				if admitted != 10000+1000 || overflowed != 0 {
					t.Errorf("shared overflow: admitted %d, overflowed %d; want 11000, 0", admitted, overflowed)
				}
			case admission.OverflowReject:
				if admitted != 10000 || overflowed != 990000 {
					t.Errorf("reject overflow: admitted %d, overflowed %d; want 10000, 990000", admitted, overflowed)
				}
			}
		})
	}
}

func TestIdleEviction(t *testing.T) {
	clock := admissiontest.NewClock(admissiontest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, admission.Policy{
		Name: "rps", Key: tenantKey, Algorithm: admission.TokenBucket, Limit: 10, Per: time.Second,
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
