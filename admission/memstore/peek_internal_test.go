package memstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestPeekLeavesIdleClock: a partition read by Peek stays as idle as it
// was. A token bucket charged once is full again after a minute; read
// every ten seconds after that, it is still dropped by the sweep an idle
// timeout after its last acquisition, as if no one had read it; the
// partition of a key only ever read is never created.
func TestPeekLeavesIdleClock(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	p := limits.Policy{Name: "p", Algorithm: limits.TokenBucket, Limit: 60, Per: time.Minute, IdleTimeout: 2 * time.Minute}
	l := newMemLimiter(&p)
	lim := p.Base()
	ctx := context.Background()
	var g backend.Grant
	if err := l.Acquire(ctx, "a", &lim, 60, t0, &g); err != nil || !g.OK {
		t.Fatalf("Acquire(a, 60) = %+v, %v; want taken", g, err)
	}
	for at := time.Minute; at < 2*time.Minute+10*time.Second; at += 10 * time.Second {
		for _, key := range []string{"a", "reader-only"} {
			if err := l.Peek(ctx, key, &lim, t0.Add(at), &g); err != nil {
				t.Fatal(err)
			}
			if g.Remaining != 60 {
				t.Fatalf("Peek(%s) at t0+%v: remaining %d; want 60", key, at, g.Remaining)
			}
		}
	}
	if n := l.count.Load(); n != 1 {
		t.Fatalf("%d partitions after the reads; want 1 (a)", n)
	}
	// A new key after the idle timeout sweeps the table: a was last used
	// at t0, two minutes ago and more.
	if err := l.Acquire(ctx, "b", &lim, 1, t0.Add(2*time.Minute+10*time.Second), &g); err != nil {
		t.Fatal(err)
	}
	if ev := l.evicted.Load(); ev != 1 {
		t.Errorf("evicted %d partitions; want 1 (a, idle since t0 whatever was read)", ev)
	}
}
