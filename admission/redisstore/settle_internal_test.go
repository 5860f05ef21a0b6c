package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/redistest"
)

// laterRetry is a client hook that moves the instant of every settle
// by skew (in the caller's time the store passes: a replica whose clock is
// behind the server's), and with a delay runs it twice, the second time
// delay later, as a retry after a lost reply that reaches the server late.
type laterRetry struct {
	skew, delay    time.Duration
	calls, retried int
}

func (h *laterRetry) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *laterRetry) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *laterRetry) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		// A settle's blob is its last argument: move its instant.
		b, ok := args[len(args)-1].(*blob)
		if !ok || !IsSettleCall(args) {
			return next(ctx, cmd)
		}
		h.calls++
		args[len(args)-1] = moved(b, h.skew)
		if h.delay == 0 {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		args[len(args)-1] = moved(b, h.skew+h.delay)
		h.retried++
		return next(ctx, cmd)
	}
}

// moved returns a copy of a settle's argument with its instant moved
// by d.
func moved(b *blob, d time.Duration) *blob {
	sec, ns := split(int64(floatAt(b.b, 1))*1e9 + int64(floatAt(b.b, 2)) + int64(d))
	m := &blob{b: append([]byte(nil), b.b...)}
	binary.LittleEndian.PutUint64(m.b[8:], math.Float64bits(float64(sec)))
	binary.LittleEndian.PutUint64(m.b[16:], math.Float64bits(float64(ns)))
	return m
}

func floatAt(b []byte, i int) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
}

// TestSettleRetriedLater settles a request holding a token bucket refund
// and a concurrency lease (MaxHold 10s; the 250ms timeout makes retries
// happen within 1s of each other) at instants around the lease's expiry,
// with a retry that runs later than the first attempt or a server clock
// ahead of the replica's, and requires the refund to apply exactly once:
// the figures are those of a store whose settlement ran once.
func TestSettleRetriedLater(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	ms := time.Millisecond
	tokens := admission.Policy{Name: "tpm", Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Hour}
	inflight := admission.Policy{Name: "inflight", Algorithm: limits.Concurrency, Limit: 5, MaxHold: 10 * time.Second}
	cases := []struct {
		name   string
		settle time.Duration // after the admission
		reap   bool          // another request reclaims the expired lease first
		skew   time.Duration // of the server's clock ahead of the replica's
		delay  time.Duration // of the retry
		key    bool          // an idempotency key is written
		calls  int           // settle calls, retries included
	}{
		{"lease marks it, retry too", 2 * time.Second, false, 0, 500 * ms, false, 2},
		{"lease marks it, retry after the key's window", 8500 * ms, false, 0, 900 * ms, true, 2},
		{"key marks it, lease alive", 9500 * ms, false, 0, 400 * ms, true, 2},
		{"key marks it, retry after expiry", 9500 * ms, false, 0, 900 * ms, true, 2},
		{"lease expired and reclaimed", 10500 * ms, true, 0, 900 * ms, true, 2},
		{"lease expired, not reclaimed", 10500 * ms, false, 0, 900 * ms, true, 2},
		// The replica sends no key, the server's clock says one is needed:
		// the script asks for one and the settle is sent again with it.
		{"replica's clock behind", 7500 * ms, false, 1600 * ms, 0, true, 2},
		{"replica's clock behind, retried", 7500 * ms, false, 1600 * ms, 300 * ms, true, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var prefix string
			run := func(hook redis.Hook) (backend.Grant, backend.Grant) {
				client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
				defer client.Close()
				if hook != nil {
					client.AddHook(hook)
				}
				prefix = strings.NewReplacer(" ", "", ",", "", "'", "").Replace(tc.name) + time.Now().Format("150405.000000000") + ":"
				st, err := New(client, Config{Prefix: prefix, CallerTime: true, Timeout: 250 * ms})
				if err != nil {
					t.Fatal(err)
				}
				tl, _ := st.Limiter(&tokens)
				cl, _ := st.Limiter(&inflight)
				lt, lc := tokens.Base(), inflight.Base()
				at := backendtest.Epoch
				ops := []backend.Op{{Limiter: tl, Key: "acme", Limit: lt, N: 300}, {Limiter: cl, Key: "acme", Limit: lc, N: 1}}
				if err := st.AcquireBatch(ctx, ops, at); err != nil || !ops[0].Grant.OK || !ops[1].Grant.OK {
					t.Fatalf("AcquireBatch = %v, %+v", err, ops)
				}
				if tc.reap {
					probe := []backend.Op{{Limiter: cl, Key: "acme", Limit: lc, N: 0}}
					if err := st.AcquireBatch(ctx, probe, at.Add(tc.settle-100*ms)); err != nil || probe[0].Grant.Expired != 1 {
						t.Fatalf("probe = %v, %+v; want the lease reclaimed", err, probe[0].Grant)
					}
				}
				set := []backend.Op{
					{Limiter: tl, Key: "acme", Limit: lt, N: -200, Grant: ops[0].Grant},
					{Limiter: cl, Key: "acme", Limit: lc, Release: true, Grant: ops[1].Grant},
				}
				if err := st.SettleBatch(ctx, set, at.Add(tc.settle)); err != nil {
					t.Fatal(err)
				}
				after := []backend.Op{{Limiter: tl, Key: "acme", Limit: lt, N: 0}, {Limiter: cl, Key: "acme", Limit: lc, N: 0}}
				if err := st.AcquireBatch(ctx, after, at.Add(tc.settle+2*time.Second)); err != nil {
					t.Fatal(err)
				}
				return after[0].Grant, after[1].Grant
			}
			wantT, wantC := run(nil)
			h := &laterRetry{skew: tc.skew, delay: tc.delay}
			gotT, gotC := run(h)
			if h.calls+h.retried != tc.calls {
				t.Fatalf("%d settle calls; want %d", h.calls+h.retried, tc.calls)
			}
			keys, err := redistest.Do(srv.Addr, "KEYS", prefix+"*:settle:*")
			if err != nil {
				t.Fatal(err)
			}
			if (keys != "") != tc.key {
				t.Errorf("idempotency keys: %q; want one: %v", keys, tc.key)
			}
			if gotT.Remaining != wantT.Remaining || gotC.Remaining != wantC.Remaining {
				t.Fatalf("after a retried settle: tokens remaining %d, slots %d; settled once: %d, %d",
					gotT.Remaining, gotC.Remaining, wantT.Remaining, wantC.Remaining)
			}
			// The refund of 200 is in: 1000 - 300 + 200 and a little refill.
			if wantT.Remaining < 900 || wantC.Remaining != 5 {
				t.Fatalf("settled once: tokens remaining %d, slots %d; want >= 900 and 5", wantT.Remaining, wantC.Remaining)
			}
		})
	}
}

// TestLargestShapes runs the largest scripts of one chunk (chunkMax ops:
// eight of each algorithm, and eight alternating), and scripts of two,
// three and thirteen chunks mixing every algorithm, through an admission,
// a settlement that refunds what was taken and releases the leases, and a
// probe that finds every partition whole again, from a replica whose
// clock is decades off; a script past Lua's limits (locals, registers,
// upvalues) would fail to compile here.
func TestLargestShapes(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	ctx := context.Background()
	algs := map[rune]limits.Algorithm{
		'b': limits.TokenBucket, 'f': limits.FixedWindow, 'w': limits.SlidingWindow,
		's': limits.SlidingLog, 'l': limits.Concurrency, 'q': limits.Quota,
	}
	// A window of an hour and a nanosecond is one that no float64 can
	// move by decades exactly.
	per := time.Hour + 1
	mixes := []string{"bbbbbbbb", "ffffffff", "wwwwwwww", "ssssssss", "llllllll", "qqqqqqqq", "blblblbl", "bfwslqbf", "bfwslqbfw", "lbfwsqlbfwsqlbfwsq", strings.Repeat("bfwslq", 17)}
	for _, mix := range mixes {
		t.Run(mix, func(t *testing.T) {
			st, err := New(client, Config{Prefix: mix + ":", Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var ops, probe []backend.Op
			for i, c := range mix {
				p := admission.Policy{Name: fmt.Sprintf("p%d", i), Algorithm: algs[c], Limit: 100, Per: per, Period: limits.PeriodFixed, MaxHold: time.Minute}
				l, err := st.Limiter(&p)
				if err != nil {
					t.Fatal(err)
				}
				op := backend.Op{Limiter: l, Key: "acme", Limit: p.Base(), N: 10}
				ops, probe = append(ops, op), append(probe, backend.Op{Limiter: l, Key: "acme", Limit: op.Limit})
			}
			// The replica's clock says 1970: every window and quota
			// period is placed by the server's time, after the script
			// answered with it (before any write).
			hint := time.Unix(0, 1)
			if err := st.AcquireBatch(ctx, ops, hint); err != nil {
				t.Fatal(err)
			}
			for i := range ops {
				g := ops[i].Grant
				if !g.OK || g.Remaining != 90 {
					t.Fatalf("op %d: %+v; want 10 of 100 taken", i, g)
				}
				if a := algs[rune(mix[i])]; (a == limits.FixedWindow || a == limits.SlidingWindow || a == limits.Quota) && g.Stamp%int64(per) != 0 {
					t.Fatalf("op %d (%s): stamp %v; want the start of a window by the server's clock", i, a, time.Unix(0, g.Stamp).UTC())
				}
				if mix[i] == 'l' {
					ops[i].Release = true
				} else {
					ops[i].N = -10
				}
			}
			if err := st.SettleBatch(ctx, ops, hint); err != nil {
				t.Fatal(err)
			}
			if err := st.AcquireBatch(ctx, probe, hint); err != nil {
				t.Fatal(err)
			}
			for i := range probe {
				if g := probe[i].Grant; g.Remaining != 100 {
					t.Errorf("op %d after the settlement: %d remaining; want 100", i, g.Remaining)
				}
			}
		})
	}
}
