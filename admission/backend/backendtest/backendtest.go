// Package backendtest is the conformance suite of the store contract
// (package backend): the step tables every store must answer exactly as the
// in-memory store does, and property tests over random traffic. A store's
// tests call RunCases and RunProperties with a constructor of the store,
// as the in-memory and Redis stores do.
package backendtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// Epoch is the instant the conformance steps start from: a whole number of
// hours after the Unix epoch, so every window in the tables is aligned.
var Epoch = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Step is one call in a conformance table: at Epoch+At, acquire N permits
// (or, with Adjust set, adjust grant number Ref by Adjust, with Release
// set, release grant Ref, or with Renew set, renew the lease of grant Ref)
// and expect the given answer.
type Step struct {
	At      time.Duration
	N       int64
	Adjust  int64
	Release bool
	Renew   bool
	Ref     int // index of an earlier acquire step whose grant to act on
	// Limit, when non-zero, replaces the policy's Limit (and Burst) for
	// this step, as a reload or a plan does: a settlement passes the limit
	// its ticket was admitted under.
	Limit int64

	// OK is, for a renewal, whether the lease was still held.
	OK         bool
	Remaining  int64
	RetryAfter time.Duration
	Reset      time.Duration
	// Skip checks of Reset when it is -1.

	// Expired is the number of leases an acquire or renewal of a
	// concurrency limit reclaims.
	Expired int32
}

// Case is a named step table for one policy.
type Case struct {
	Name   string
	Policy limits.Policy
	// At overrides Epoch as the start instant when non-zero.
	Start time.Time
	Steps []Step
}

// Cases returns the conformance step tables: every algorithm, weighted
// costs, retry-after values, header figures and reconciliation.
func Cases() []Case {
	tb := func(limit int64, per time.Duration, burst int64) limits.Policy {
		return limits.Policy{Name: "tb", Algorithm: limits.TokenBucket, Limit: limit, Per: per, Burst: burst}
	}
	s := time.Second
	return []Case{
		{Name: "token_bucket/weighted", Policy: tb(10, 10*s, 0), Steps: []Step{
			{At: 0, N: 10, OK: true, Remaining: 0, Reset: 10 * s},
			{At: 0, N: 1, OK: false, RetryAfter: s, Reset: 10 * s},
			{At: 500 * time.Millisecond, N: 1, OK: false, RetryAfter: 500 * time.Millisecond, Reset: 9500 * time.Millisecond},
			{At: s, N: 1, OK: true, Remaining: 0, Reset: 10 * s},
			{At: s, N: 11, OK: false, RetryAfter: limits.Never, Reset: 10 * s},
			{At: 4 * s, N: 3, OK: true, Remaining: 0, Reset: 10 * s},
			{At: 4 * s, N: 2, OK: false, RetryAfter: 2 * s, Reset: 10 * s},
			{At: 20 * s, N: 4, OK: true, Remaining: 6, Reset: 4 * s},
		}},
		{Name: "token_bucket/fractional", Policy: tb(3, s, 0), Steps: []Step{
			{At: 0, N: 3, OK: true, Remaining: 0, Reset: s},
			// One token takes a third of a second: 333333333.3ns, rounded up.
			{At: 0, N: 1, OK: false, RetryAfter: 333333334, Reset: s},
			{At: 333333334, N: 1, OK: true, Remaining: 0, Reset: -1},
		}},
		{Name: "token_bucket/burst", Policy: tb(1, s, 5), Steps: []Step{
			{At: 0, N: 5, OK: true, Remaining: 0, Reset: 5 * s},
			{At: 2 * s, N: 3, OK: false, Remaining: 2, RetryAfter: s, Reset: 3 * s},
			{At: 3 * s, N: 3, OK: true, Remaining: 0, Reset: 5 * s},
		}},
		{Name: "token_bucket/reconcile", Policy: tb(10, 10*s, 0), Steps: []Step{
			{At: 0, N: 10, OK: true, Remaining: 0, Reset: 10 * s},
			{At: 0, Ref: 0, Adjust: -4, Remaining: 4},
			{At: 0, N: 4, OK: true, Remaining: 0, Reset: 10 * s},
			// An overrun of 6 puts the bucket 6 tokens into debt.
			{At: 0, Ref: 2, Adjust: 6, Remaining: 0},
			{At: 0, N: 1, OK: false, RetryAfter: 7 * s, Reset: 16 * s},
			{At: 7 * s, N: 1, OK: true, Remaining: 0, Reset: 10 * s},
		}},
		{Name: "fixed_window", Policy: limits.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 5, Per: 10 * s}, Steps: []Step{
			{At: 0, N: 3, OK: true, Remaining: 2, Reset: 10 * s},
			{At: 5 * s, N: 3, OK: false, Remaining: 2, RetryAfter: 5 * s, Reset: 5 * s},
			{At: 5 * s, N: 2, OK: true, Remaining: 0, Reset: 5 * s},
			{At: 5 * s, Ref: 0, Adjust: -1, Remaining: 1},
			{At: 9 * s, N: 1, OK: true, Remaining: 0, Reset: s},
			{At: 10 * s, N: 5, OK: true, Remaining: 0, Reset: 10 * s},
			{At: 10 * s, N: 6, OK: false, Remaining: 0, RetryAfter: limits.Never, Reset: 10 * s},
			// A refund of a grant from a past window changes nothing now.
			{At: 11 * s, Ref: 2, Adjust: -2, Remaining: 0},
		}},
		{Name: "sliding_window", Policy: limits.Policy{Name: "sw", Algorithm: limits.SlidingWindow, Limit: 10, Per: 10 * s}, Steps: []Step{
			{At: 0, N: 10, OK: true, Remaining: 0, Reset: 20 * s},
			// Next window: the previous count weighs 100% at its start.
			{At: 10 * s, N: 1, OK: false, Remaining: 0, RetryAfter: s, Reset: 10 * s},
			// Two seconds in it weighs 80%: 8 used, 2 left.
			{At: 12 * s, N: 2, OK: true, Remaining: 0, Reset: 18 * s},
			{At: 12 * s, N: 1, OK: false, Remaining: 0, RetryAfter: s, Reset: 18 * s},
			{At: 13 * s, N: 1, OK: true, Remaining: 0, Reset: 17 * s},
			// Fits only in the window after: 3*(1-e/10)+7 <= 10 at e=0.
			{At: 13 * s, N: 7, OK: false, Remaining: 0, RetryAfter: 7 * s, Reset: 17 * s},
			{At: 13 * s, N: 11, OK: false, Remaining: 0, RetryAfter: limits.Never, Reset: 17 * s},
		}},
		{Name: "sliding_log", Policy: limits.Policy{Name: "sl", Algorithm: limits.SlidingLog, Limit: 3, Per: 10 * s}, Steps: []Step{
			{At: 0, N: 1, OK: true, Remaining: 2, Reset: 10 * s},
			{At: 2 * s, N: 2, OK: true, Remaining: 0, Reset: 10 * s},
			{At: 3 * s, N: 1, OK: false, Remaining: 0, RetryAfter: 7 * s, Reset: 9 * s},
			{At: 10 * s, N: 1, OK: true, Remaining: 0, Reset: 10 * s},
			{At: 11 * s, N: 2, OK: false, Remaining: 0, RetryAfter: s, Reset: 9 * s},
			{At: 11 * s, Ref: 1, Adjust: -2, Remaining: 2},
			{At: 11 * s, N: 2, OK: true, Remaining: 0, Reset: 10 * s},
			{At: 11 * s, N: 4, OK: false, Remaining: 0, RetryAfter: limits.Never, Reset: 10 * s},
		}},
		{Name: "concurrency", Policy: limits.Policy{Name: "c", Algorithm: limits.Concurrency, Limit: 3, MaxHold: 5 * s}, Steps: []Step{
			{At: 0, N: 2, OK: true, Remaining: 1, Reset: -1},
			{At: 0, N: 1, OK: true, Remaining: 0, Reset: -1},
			{At: 0, N: 1, OK: false, Remaining: 0, Reset: -1},
			{At: s, Ref: 0, Release: true},
			{At: s, N: 2, OK: true, Remaining: 0, Reset: -1},
			// Releasing twice is harmless.
			{At: s, Ref: 0, Release: true},
			{At: s, N: 1, OK: false, Remaining: 0, Reset: -1},
			{At: s, N: 4, OK: false, Remaining: 0, RetryAfter: limits.Never, Reset: -1},
			// Leases expire after MaxHold: the grant from t=0 still held
			// is gone at 5s.
			{At: 5 * s, N: 1, OK: true, Remaining: 0, Reset: -1, Expired: 1},
			// The 2 taken at 1s expired at 6s; the 1 taken at 5s is held.
			{At: 6 * s, N: 2, OK: true, Remaining: 0, Reset: -1, Expired: 1},
		}},
		// A renewed lease outlives its first MaxHold; without another
		// renewal it expires MaxHold after the last one.
		{Name: "concurrency/renew", Policy: limits.Policy{Name: "cr", Algorithm: limits.Concurrency, Limit: 1, MaxHold: 10 * s}, Steps: []Step{
			{At: 0, N: 1, OK: true, Remaining: 0, Reset: -1},
			{At: 6 * s, Ref: 0, Renew: true, OK: true, Remaining: 0},
			{At: 12 * s, N: 1, OK: false, Remaining: 0, Reset: -1},
			{At: 17 * s, N: 1, OK: true, Remaining: 0, Reset: -1, Expired: 1},
			// The expired lease cannot be renewed: its permit is taken.
			{At: 17 * s, Ref: 0, Renew: true, OK: false, Remaining: 0},
			{At: 18 * s, N: 1, OK: false, Remaining: 0, Reset: -1},
		}},
		{Name: "concurrency/renew-some", Policy: limits.Policy{Name: "cs", Algorithm: limits.Concurrency, Limit: 3, MaxHold: 10 * s}, Steps: []Step{
			{At: 0, N: 1, OK: true, Remaining: 2, Reset: -1},
			{At: s, N: 2, OK: true, Remaining: 0, Reset: -1},
			// Renewing early extends the lease; it never shortens it.
			{At: 5 * s, Ref: 0, Renew: true, OK: true, Remaining: 0},
			{At: 5 * s, Ref: 0, Renew: true, OK: true, Remaining: 0},
			// The unrenewed lease expires on time and is reclaimed by the
			// next call, a renewal included.
			{At: 11 * s, Ref: 0, Renew: true, OK: true, Remaining: 2, Expired: 1},
			{At: 11 * s, N: 3, OK: false, Remaining: 2, Reset: -1},
			{At: 11 * s, N: 2, OK: true, Remaining: 0, Reset: -1},
			// Renewed at 11s, grant 0 holds until 21s.
			{At: 20 * s, N: 1, OK: false, Remaining: 0, Reset: -1},
			// A released lease is not renewed.
			{At: 20 * s, Ref: 0, Release: true},
			{At: 20 * s, Ref: 0, Renew: true, OK: false, Remaining: 1},
			// A lease long expired is reclaimed by the renewal that finds it.
			{At: 40 * s, Ref: 6, Renew: true, OK: false, Remaining: 3, Expired: 1},
		}},
		{Name: "quota/month", Start: time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC),
			Policy: limits.Policy{Name: "q", Algorithm: limits.Quota, Limit: 100, Period: limits.PeriodMonth}, Steps: []Step{
				{At: 0, N: 60, OK: true, Remaining: 40, Reset: time.Hour},
				{At: 30 * time.Minute, N: 50, OK: false, Remaining: 40, RetryAfter: 30 * time.Minute, Reset: 30 * time.Minute},
				{At: 30 * time.Minute, Ref: 0, Adjust: 15, Remaining: 25},
				{At: 30 * time.Minute, N: 26, OK: false, Remaining: 25, RetryAfter: 30 * time.Minute, Reset: 30 * time.Minute},
				{At: time.Hour, N: 100, OK: true, Remaining: 0, Reset: 31 * 24 * time.Hour},
				{At: time.Hour, N: 101, OK: false, Remaining: 0, RetryAfter: limits.Never, Reset: 31 * 24 * time.Hour},
			}},
		{Name: "quota/fixed", Policy: limits.Policy{Name: "qf", Algorithm: limits.Quota, Limit: 10, Period: limits.PeriodFixed, Per: time.Hour}, Steps: []Step{
			{At: 0, N: 10, OK: true, Remaining: 0, Reset: time.Hour},
			{At: 59 * time.Minute, N: 1, OK: false, Remaining: 0, RetryAfter: time.Minute, Reset: time.Minute},
			{At: time.Hour, N: 1, OK: true, Remaining: 9, Reset: time.Hour},
		}},
		// The debt bound: the largest overrun leaves a bucket at most its
		// capacity in debt, and a count at most at its limit.
		{Name: "token_bucket/debt_bound", Policy: tb(10, 10*s, 0), Steps: []Step{
			{At: 0, N: 10, OK: true, Remaining: 0, Reset: 10 * s},
			{At: 0, Ref: 0, Adjust: limits.MaxAmount, Remaining: 0},
			// 10 in debt: 11 tokens to wait for, 20 to be full.
			{At: 0, N: 1, OK: false, RetryAfter: 11 * s, Reset: 20 * s},
			{At: 0, N: 10, OK: false, RetryAfter: 20 * s, Reset: 20 * s},
			{At: 11 * s, N: 1, OK: true, Remaining: 0, Reset: 10 * s},
		}},
		{Name: "token_bucket/debt_bound_burst", Policy: tb(2, s, 6), Steps: []Step{
			{At: 0, N: 1, OK: true, Remaining: 5, Reset: 500 * time.Millisecond},
			{At: 0, Ref: 0, Adjust: limits.MaxAmount - 1, Remaining: 0},
			{At: 0, N: 6, OK: false, RetryAfter: 6 * s, Reset: 6 * s},
			{At: 6 * s, N: 6, OK: true, Remaining: 0, Reset: 3 * s},
		}},
		{Name: "fixed_window/debt_bound", Policy: limits.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 5, Per: 10 * s}, Steps: []Step{
			{At: 0, N: 2, OK: true, Remaining: 3, Reset: 10 * s},
			{At: 0, Ref: 0, Adjust: limits.MaxAmount, Remaining: 0},
			{At: 0, N: 1, OK: false, Remaining: 0, RetryAfter: 10 * s, Reset: 10 * s},
			// The count stopped at the limit: a refund of 5 empties it.
			{At: s, Ref: 0, Adjust: -5, Remaining: 5},
			{At: s, N: 5, OK: true, Remaining: 0, Reset: 9 * s},
		}},
		// A ticket admitted under a lower limit (before a reload raised
		// it) is refunded: the count loses the refund, never the
		// admissions the higher limit let through since.
		{Name: "fixed_window/refund_under_older_limit", Policy: limits.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 3, Per: time.Hour}, Steps: []Step{
			{At: 0, N: 1, Limit: 1, OK: true, Remaining: 0, Reset: time.Hour},
			{At: s, N: 1, OK: true, Remaining: 1, Reset: time.Hour - s},
			{At: 2 * s, N: 1, OK: true, Remaining: 0, Reset: time.Hour - 2*s},
			{At: 3 * s, Ref: 0, Adjust: -1, Limit: 1, Remaining: 0},
			{At: 4 * s, N: 1, OK: true, Remaining: 0, Reset: time.Hour - 4*s},
			{At: 5 * s, N: 1, OK: false, Remaining: 0, RetryAfter: time.Hour - 5*s, Reset: time.Hour - 5*s},
		}},
		{Name: "quota/refund_under_older_limit", Policy: limits.Policy{Name: "qf", Algorithm: limits.Quota, Limit: 30, Period: limits.PeriodFixed, Per: time.Hour}, Steps: []Step{
			{At: 0, N: 10, Limit: 10, OK: true, Remaining: 0, Reset: time.Hour},
			{At: s, N: 20, OK: true, Remaining: 0, Reset: time.Hour - s},
			{At: 2 * s, Ref: 0, Adjust: -4, Limit: 10, Remaining: 0},
			{At: 3 * s, N: 4, OK: true, Remaining: 0, Reset: time.Hour - 3*s},
			{At: 4 * s, N: 1, OK: false, Remaining: 0, RetryAfter: time.Hour - 4*s, Reset: time.Hour - 4*s},
		}},
		{Name: "sliding_window/debt_bound", Policy: limits.Policy{Name: "sw", Algorithm: limits.SlidingWindow, Limit: 10, Per: 10 * s}, Steps: []Step{
			{At: 0, N: 4, OK: true, Remaining: 6, Reset: 20 * s},
			{At: 0, Ref: 0, Adjust: limits.MaxAmount, Remaining: 0},
			// The previous window counts 10, weighing 90% a second in.
			{At: 10 * s, N: 1, OK: false, Remaining: 0, RetryAfter: s, Reset: 10 * s},
			{At: 11 * s, Ref: 0, Adjust: -10, Remaining: 10},
			{At: 11 * s, N: 10, OK: true, Remaining: 0, Reset: 19 * s},
		}},
		{Name: "sliding_log/debt_bound", Policy: limits.Policy{Name: "sl", Algorithm: limits.SlidingLog, Limit: 3, Per: 10 * s}, Steps: []Step{
			{At: 0, N: 1, OK: true, Remaining: 2, Reset: 10 * s},
			{At: 0, Ref: 0, Adjust: limits.MaxAmount, Remaining: 0},
			{At: s, N: 1, OK: false, Remaining: 0, RetryAfter: 9 * s, Reset: 9 * s},
			{At: s, Ref: 0, Adjust: -3, Remaining: 3},
			{At: s, N: 3, OK: true, Remaining: 0, Reset: 10 * s},
			// A charge for an admission that left the window fills what is left.
			{At: 20 * s, Ref: 4, Adjust: limits.MaxAmount, Remaining: 0},
			{At: 20 * s, N: 1, OK: false, Remaining: 0, RetryAfter: 10 * s, Reset: 10 * s},
		}},
		{Name: "quota/debt_bound", Policy: limits.Policy{Name: "qf", Algorithm: limits.Quota, Limit: 10, Period: limits.PeriodFixed, Per: time.Hour}, Steps: []Step{
			{At: 0, N: 4, OK: true, Remaining: 6, Reset: time.Hour},
			{At: 0, Ref: 0, Adjust: limits.MaxAmount, Remaining: 0},
			{At: time.Minute, Ref: 0, Adjust: -10, Remaining: 10},
			{At: time.Minute, N: 10, OK: true, Remaining: 0, Reset: 59 * time.Minute},
		}},
	}
}

// RunCases runs the step tables against the store returned by newStore
// (called once per case). The store must evaluate at the instant it is
// passed (a shared store in its caller-time test mode).
func RunCases(t *testing.T, newStore func(t *testing.T) backend.Store) {
	for _, tc := range Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			st := newStore(t)
			p := tc.Policy
			lim, err := st.Limiter(&p)
			if err != nil {
				t.Fatal(err)
			}
			l := p.Base()
			start := tc.Start
			if start.IsZero() {
				start = Epoch
			}
			name := "conformance-" + tc.Name
			ctx := context.Background()
			grants := make([]backend.Grant, len(tc.Steps))
			for i, s := range tc.Steps {
				now := start.Add(s.At)
				key, done := view(name)
				l := l
				if s.Limit != 0 {
					q := p
					q.Limit, q.Burst = s.Limit, 0
					l = q.Base()
				}
				switch {
				case s.Release:
					g := grants[s.Ref]
					if err := lim.Release(ctx, key, &l, &g, now); err != nil {
						t.Fatalf("step %d: Release: %v", i, err)
					}
				case s.Renew:
					rn, ok := lim.(backend.Renewer)
					if !ok {
						t.Fatalf("step %d: the limiter %T does not implement backend.Renewer", i, lim)
					}
					g := grants[s.Ref]
					if err := rn.Renew(ctx, key, &l, &g, now); err != nil {
						t.Fatalf("step %d: Renew: %v", i, err)
					}
					got := fmt.Sprintf("held=%v remaining=%d expired=%d", g.Stamp != 0, g.Remaining, g.Expired)
					want := fmt.Sprintf("held=%v remaining=%d expired=%d", s.OK, s.Remaining, s.Expired)
					if got != want {
						t.Errorf("step %d: Renew(t+%v, grant %d) = %s; want %s", i, s.At, s.Ref, got, want)
					}
				case s.Adjust != 0:
					g := &grants[s.Ref]
					if err := lim.Adjust(ctx, key, &l, g, s.Adjust, now); err != nil {
						t.Fatalf("step %d: Adjust: %v", i, err)
					}
					if g.Remaining != s.Remaining {
						t.Errorf("step %d: Adjust(%d) remaining = %d; want %d", i, s.Adjust, g.Remaining, s.Remaining)
					}
				default:
					g, err := Acquire(ctx, lim, key, &l, s.N, now)
					if err != nil {
						t.Fatalf("step %d: Acquire: %v", i, err)
					}
					grants[i] = g
					got := fmt.Sprintf("ok=%v remaining=%d retry=%v", g.OK, g.Remaining, g.RetryAfter)
					want := fmt.Sprintf("ok=%v remaining=%d retry=%v", s.OK, s.Remaining, s.RetryAfter)
					if got != want {
						t.Errorf("step %d: Acquire(t+%v, %d) = %s; want %s", i, s.At, s.N, got, want)
					}
					if s.Reset >= 0 && g.Reset != s.Reset {
						t.Errorf("step %d: Acquire(t+%v, %d) reset = %v; want %v", i, s.At, s.N, g.Reset, s.Reset)
					}
					if g.OK && g.Taken != s.N {
						t.Errorf("step %d: taken = %d; want %d", i, g.Taken, s.N)
					}
					if g.Expired != s.Expired {
						t.Errorf("step %d: Acquire(t+%v, %d) expired = %d; want %d", i, s.At, s.N, g.Expired, s.Expired)
					}
				}
				done()
			}
		})
	}
}

// view returns s as the controller hands keys to a store: a view of a
// buffer that is valid only during the call (the controller builds
// composite keys in a reused buffer). Call done after the call: it
// overwrites the buffer, so that a store that kept the key without
// copying it now holds another key, and the suite sees its partitions
// lost. Every call of the suite gets its key this way.
func view(s string) (key string, done func()) {
	if s == "" {
		return "", func() {}
	}
	buf := []byte(s)
	return unsafe.String(&buf[0], len(buf)), func() {
		for i := range buf {
			buf[i] = '#'
		}
	}
}

// Acquire calls l.Acquire and returns the grant it wrote.
func Acquire(ctx context.Context, l backend.Limiter, key string, lim *limits.Limit, n int64, now time.Time) (backend.Grant, error) {
	var g backend.Grant
	err := l.Acquire(ctx, key, lim, n, now, &g)
	return g, err
}

// Traffic is a random weighted workload for property tests.
type Traffic struct {
	Seed  uint64
	Ops   int
	Keys  int
	MaxN  int64
	MaxDt time.Duration
}

// RunProperties checks the algorithms' invariants over random weighted
// traffic against the store: a token bucket admits at most burst + rate ×
// length in any interval, a fixed window at most its limit per window, a
// sliding log at most its limit in every rolling window, a sliding window
// counter at most its limit per aligned window and twice it in any rolling
// window, and concurrency never exceeds its cap in flight. For a limiter
// that implements backend.Inspector, it also checks that reading is pure:
// the same traffic, over partitions of different limits (as plans give
// them), answers the same with Stats called at random between its calls.
// For a limiter that implements backend.Peeker, it checks that Peek
// reports what an Acquire of nothing would (see checkPeek).
func RunProperties(t *testing.T, newStore func(t *testing.T) backend.Store, tr Traffic) {
	s := time.Second
	policies := []limits.Policy{
		{Name: "tb", Algorithm: limits.TokenBucket, Limit: 20, Per: 2 * s, Burst: 30},
		{Name: "fw", Algorithm: limits.FixedWindow, Limit: 25, Per: 3 * s},
		{Name: "sw", Algorithm: limits.SlidingWindow, Limit: 25, Per: 3 * s},
		{Name: "sl", Algorithm: limits.SlidingLog, Limit: 25, Per: 3 * s},
		{Name: "c", Algorithm: limits.Concurrency, Limit: 12, MaxHold: time.Hour},
	}
	peeked := append(policies[:len(policies):len(policies)],
		limits.Policy{Name: "qf", Algorithm: limits.Quota, Limit: 25, Period: limits.PeriodFixed, Per: 3 * s},
		limits.Policy{Name: "qd", Algorithm: limits.Quota, Limit: 25, Period: limits.PeriodDay})
	for _, p := range peeked {
		t.Run(p.Name+"/peek", func(t *testing.T) { checkPeek(t, newStore, p, tr) })
	}
	for _, p := range policies {
		t.Run(p.Name+"/reads", func(t *testing.T) { checkPureReads(t, newStore, p, tr) })
		t.Run(p.Name, func(t *testing.T) {
			st := newStore(t)
			lim, err := st.Limiter(&p)
			if err != nil {
				t.Fatal(err)
			}
			l := p.Base()
			rng := rand.New(rand.NewPCG(tr.Seed, uint64(len(p.Name))))
			type adm struct {
				at  time.Duration
				n   int64
				key string
			}
			var admitted []adm
			type open struct {
				key string
				g   backend.Grant
				n   int64
			}
			var inflight []open
			held := map[string]int64{}
			now := time.Duration(0)
			ctx := context.Background()
			for i := 0; i < tr.Ops; i++ {
				now += time.Duration(rng.Int64N(int64(tr.MaxDt) + 1))
				key := fmt.Sprintf("k%d", rng.IntN(tr.Keys))
				if p.Algorithm == limits.Concurrency && len(inflight) > 0 && rng.IntN(2) == 0 {
					j := rng.IntN(len(inflight))
					o := inflight[j]
					k, done := view(o.key)
					err := lim.Release(ctx, k, &l, &o.g, Epoch.Add(now))
					done()
					if err != nil {
						t.Fatal(err)
					}
					held[o.key] -= o.n
					inflight = append(inflight[:j], inflight[j+1:]...)
					continue
				}
				n := 1 + rng.Int64N(tr.MaxN)
				k, done := view(key)
				g, err := Acquire(ctx, lim, k, &l, n, Epoch.Add(now))
				done()
				if err != nil {
					t.Fatal(err)
				}
				if !g.OK {
					continue
				}
				admitted = append(admitted, adm{now, n, key})
				if p.Algorithm == limits.Concurrency {
					inflight = append(inflight, open{key, g, n})
					held[key] += n
					if held[key] > p.Limit {
						t.Fatalf("op %d: %d in flight for %s; cap %d", i, held[key], key, p.Limit)
					}
				}
			}
			if len(admitted) == 0 {
				t.Fatal("nothing admitted: the traffic does not exercise the limiter")
			}
			byKey := map[string][]adm{}
			for _, a := range admitted {
				byKey[a.key] = append(byKey[a.key], a)
			}
			per := p.Per
			for key, as := range byKey {
				switch p.Algorithm {
				case limits.TokenBucket:
					// Any interval [as[i].at, as[j].at] holds at most
					// burst + rate × length.
					for i := range as {
						var sum int64
						for j := i; j < len(as); j++ {
							sum += as[j].n
							length := float64(as[j].at - as[i].at)
							bound := float64(p.Burst) + float64(p.Limit)*length/float64(per)
							if float64(sum) > bound+1e-6 {
								t.Fatalf("%s: %d admitted in %v; bound %.2f", key, sum, as[j].at-as[i].at, bound)
							}
						}
					}
				case limits.FixedWindow, limits.SlidingWindow:
					win := map[int64]int64{}
					for _, a := range as {
						idx := Epoch.Add(a.at).UnixNano() / int64(per)
						win[idx] += a.n
						if win[idx] > p.Limit {
							t.Fatalf("%s: %d admitted in window %d; limit %d", key, win[idx], idx, p.Limit)
						}
					}
					if p.Algorithm == limits.SlidingWindow {
						checkRolling(t, key, as, func(a adm) (time.Duration, int64) { return a.at, a.n }, per, 2*p.Limit)
					}
				case limits.SlidingLog:
					checkRolling(t, key, as, func(a adm) (time.Duration, int64) { return a.at, a.n }, per, p.Limit)
				}
			}
		})
	}
}

// checkPureReads runs tr against p on two stores, the second with
// Inspector.Stats (given the policy's own limit) called at random between
// the calls, and fails when any answer differs. Partition k0 has twice
// the policy's own limit, k1 the limit, k2 half of it, as plans give
// tenants.
func checkPureReads(t *testing.T, newStore func(t *testing.T) backend.Store, p limits.Policy, tr Traffic) {
	if lim, err := newStore(t).Limiter(&p); err != nil {
		t.Fatal(err)
	} else if _, ok := lim.(backend.Inspector); !ok {
		t.Skip("the limiter is no backend.Inspector: nothing reads its partitions")
	}
	base := p.Base()
	lims := make([]limits.Limit, max(tr.Keys, 1))
	for i := range lims {
		o := p
		o.Limit, o.Burst = p.Limit<<1>>(i%3), p.Burst<<1>>(i%3)
		lims[i] = o.Base()
	}
	run := func(reads bool) []string {
		lim, err := newStore(t).Limiter(&p)
		if err != nil {
			t.Fatal(err)
		}
		in, _ := lim.(backend.Inspector)
		rng := rand.New(rand.NewPCG(tr.Seed, 0x7ead))
		readRng := rand.New(rand.NewPCG(tr.Seed, 0x5eed))
		ctx := context.Background()
		var log []string
		var held []heldGrant
		now := Epoch
		for range tr.Ops {
			if reads && readRng.IntN(2) == 0 {
				in.Stats(&base, now)
			}
			now = now.Add(time.Duration(rng.Int64N(int64(tr.MaxDt) + 1)))
			i := rng.IntN(len(lims))
			var g backend.Grant
			g, held, err = randomOp(ctx, lim, p.Algorithm, lims, i, held, rng, tr.MaxN, now)
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, fmt.Sprintf("at %v: %+v", now.Sub(Epoch), g))
		}
		return log
	}
	plain, read := run(false), run(true)
	for i := range read {
		if read[i] != plain[i] {
			t.Fatalf("call %d with Stats called between the calls: %s; want (without) %s", i, read[i], plain[i])
		}
	}
}

// checkPeek runs tr (its first peekOps calls) against p on three stores,
// over partitions of different limits (as checkPureReads does) and one
// partition no call touches but Peek: the first store as is, the second
// with Peek called at random between the calls, the third with Peek
// followed by an Acquire of zero permits at the same instant at the same
// points. The second's calls must answer as the first's (Peek changes no
// decision), and on the third each Peek must report the Limit,
// Remaining, Reset and Stamp of the Acquire of zero that follows it. A
// Peek of the untouched partition must create nothing: with an
// Inspector, the partition count is the same before and after.
func checkPeek(t *testing.T, newStore func(t *testing.T) backend.Store, p limits.Policy, tr Traffic) {
	if lim, err := newStore(t).Limiter(&p); err != nil {
		t.Fatal(err)
	} else if _, ok := lim.(backend.Peeker); !ok {
		t.Skip("the limiter is no backend.Peeker")
	}
	lims := make([]limits.Limit, max(tr.Keys, 1)+1)
	for i := range lims {
		o := p
		o.Limit, o.Burst = p.Limit<<1>>(i%3), p.Burst<<1>>(i%3)
		lims[i] = o.Base()
	}
	untouched := len(lims) - 1
	const (
		plain = iota
		peeking
		zero
	)
	const peekOps = 600
	run := func(mode int) (calls []string, reads int) {
		lim, err := newStore(t).Limiter(&p)
		if err != nil {
			t.Fatal(err)
		}
		in, _ := lim.(backend.Inspector)
		rng := rand.New(rand.NewPCG(tr.Seed, 0x9eec))
		readRng := rand.New(rand.NewPCG(tr.Seed, 0x7ead))
		ctx := context.Background()
		var held []heldGrant
		now := Epoch
		for range min(tr.Ops, peekOps) {
			if mode != plain && readRng.IntN(2) == 0 {
				i := readRng.IntN(len(lims))
				key, done := view(fmt.Sprintf("k%d", i))
				var g backend.Grant
				var before backend.Stats
				if in != nil {
					before = in.Stats(&lims[0], now)
				}
				err = lim.(backend.Peeker).Peek(ctx, key, &lims[i], now, &g)
				var z backend.Grant
				if err == nil && mode == zero {
					err = lim.Acquire(ctx, key, &lims[i], 0, now, &z)
				}
				done()
				if err != nil {
					t.Fatal(err)
				}
				if mode == zero {
					got := fmt.Sprintf("limit=%d remaining=%d reset=%v stamp=%d", g.Limit, g.Remaining, g.Reset, g.Stamp)
					want := fmt.Sprintf("limit=%d remaining=%d reset=%v stamp=%d", z.Limit, z.Remaining, z.Reset, z.Stamp)
					if got != want {
						t.Errorf("at %v, k%d: Peek = %s; want (Acquire of zero) %s", now.Sub(Epoch), i, got, want)
					}
					reads++
				}
				if in != nil && mode == peeking && i == untouched {
					if after := in.Stats(&lims[0], now); after.Partitions != before.Partitions {
						t.Fatalf("at %v: Peek of a partition never acquired: %d partitions; want %d as before", now.Sub(Epoch), after.Partitions, before.Partitions)
					}
				}
			}
			now = now.Add(time.Duration(rng.Int64N(int64(tr.MaxDt) + 1)))
			i := rng.IntN(untouched)
			var g backend.Grant
			g, held, err = randomOp(ctx, lim, p.Algorithm, lims, i, held, rng, tr.MaxN, now)
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, fmt.Sprintf("at %v: %+v", now.Sub(Epoch), g))
		}
		return calls, reads
	}
	want, _ := run(plain)
	got, _ := run(peeking)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("call %d with Peek called between the calls: %s; want (without) %s", i, got[i], want[i])
		}
	}
	if _, n := run(zero); n == 0 {
		t.Fatal("no Peek compared with an Acquire of zero: the check checks nothing")
	}
}

// checkRolling fails when some rolling window of length per (ending at an
// admission) holds more than bound.
func checkRolling[T any](t *testing.T, key string, as []T, f func(T) (time.Duration, int64), per time.Duration, bound int64) {
	t.Helper()
	lo := 0
	var sum int64
	for hi := range as {
		at, n := f(as[hi])
		sum += n
		for {
			lat, ln := f(as[lo])
			if lat > at-per {
				break
			}
			sum -= ln
			lo++
		}
		if sum > bound {
			t.Fatalf("%s: %d admitted in the window ending at %v; bound %d", key, sum, at, bound)
		}
	}
}

// heldGrant is a grant a random trace holds on its partition i.
type heldGrant struct {
	i int
	g backend.Grant
}

// randomOp applies one operation of a random trace at now: three times in
// four (and always when nothing is held) an acquire on partition i of
// lims, else the settlement of a held grant (a release for a concurrency
// limit, an adjustment otherwise). It returns the grant the store
// answered and the grants held after it.
func randomOp(ctx context.Context, lim backend.Limiter, alg limits.Algorithm, lims []limits.Limit, i int, held []heldGrant, rng *rand.Rand, maxN int64, now time.Time) (backend.Grant, []heldGrant, error) {
	key, done := view(fmt.Sprintf("k%d", i))
	defer func() { done() }()
	var g backend.Grant
	if rng.IntN(4) > 0 || len(held) == 0 {
		err := lim.Acquire(ctx, key, &lims[i], 1+rng.Int64N(maxN), now, &g)
		if g.OK {
			held = append(held, heldGrant{i, g})
		}
		return g, held, err
	}
	j := rng.IntN(len(held))
	o := held[j]
	done()
	key, done = view(fmt.Sprintf("k%d", o.i))
	g = o.g
	var err error
	if alg == limits.Concurrency {
		err = lim.Release(ctx, key, &lims[o.i], &g, now)
	} else {
		err = lim.Adjust(ctx, key, &lims[o.i], &g, rng.Int64N(2*maxN+1)-maxN, now)
	}
	return g, append(held[:j], held[j+1:]...), err
}
