package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestFixedWindowCounts follows a fixed window's count in Redis: one
// integer per window, in a key named after the window, with an expiry at
// the window's end plus the grace from its first count on. A batch that
// does not fit (another policy refusing) and a shadow take that does not
// fit leave the count as it was and create no key; the next window counts
// in a key of its own; refunds lower the count and delete it at zero; and
// the partition count of Stats sees only the current window's keys.
func TestFixedWindowCounts(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	prefix := uniquePrefix()
	const grace = 50 * time.Millisecond
	st := newStore(t, client, redisstore.Config{Prefix: prefix, CallerTime: true, Timeout: time.Second, IdleGrace: grace})
	fwp := admission.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 10, Per: time.Minute}
	tbp := admission.Policy{Name: "tb", Algorithm: limits.TokenBucket, Limit: 2, Per: time.Hour}
	fw, _ := st.Limiter(&fwp)
	tb, _ := st.Limiter(&tbp)
	ctx := context.Background()
	start := backendtest.Epoch.Truncate(time.Minute)
	now := start.Add(10 * time.Second)
	key := func(tenant string, window time.Time) string {
		return prefix + "{" + tenant + "}:fw:fc:" + tenant + "@" + strconv.FormatInt(window.Unix(), 10)
	}
	count := func(k string) string {
		t.Helper()
		v, err := redistest.Do(srv.Addr, "GET", k)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	batch := func(fwShadow bool, tenant string, nfw, ntb int64) []backend.Op {
		t.Helper()
		ops := []backend.Op{
			{Limiter: fw, Key: tenant, Limit: fwp.Base(), N: nfw, Shadow: fwShadow},
			{Limiter: tb, Key: tenant, Limit: tbp.Base(), N: ntb},
		}
		if err := st.AcquireBatch(ctx, ops, now); err != nil {
			t.Fatal(err)
		}
		return ops
	}

	sent := time.Now()
	if ops := batch(false, "acme", 4, 1); !ops[0].Grant.OK || !ops[1].Grant.OK || ops[0].Grant.Remaining != 6 {
		t.Fatalf("first batch: %+v, %+v; want both admitted, 6 left in the window", ops[0].Grant, ops[1].Grant)
	}
	k := key("acme", start)
	if got := count(k); got != "4" {
		t.Errorf("count after 4 permits = %q; want 4", got)
	}
	ttl, err := client.PTTL(ctx, k).Result()
	// The window ends 50s after the (caller's) instant of the take; Redis
	// counts the expiry down on its own clock since the take reached it.
	if want := 50*time.Second + grace; err != nil || ttl < want-time.Since(sent)-time.Millisecond || ttl > want {
		t.Errorf("PTTL %s = %v, %v; want %v less the time since the take (the window's end plus the grace)", k, ttl, err, want)
	}

	// The bucket refuses 5 (its capacity is 2): the window gives its 3 back.
	if ops := batch(false, "acme", 3, 5); ops[0].Grant.OK && ops[1].Grant.OK || ops[0].Grant.Taken != 0 || ops[0].Grant.Remaining != 6 {
		t.Errorf("refused batch: %+v, %+v; want nothing taken, 6 left", ops[0].Grant, ops[1].Grant)
	}
	if got := count(k); got != "4" {
		t.Errorf("count after a refused batch = %q; want 4, as before it", got)
	}
	if ops := batch(false, "beta", 3, 5); ops[0].Grant.Taken != 0 {
		t.Errorf("refused batch of a new tenant took %d", ops[0].Grant.Taken)
	}
	if n, err := client.Exists(ctx, key("beta", start)).Result(); err != nil || n != 0 {
		t.Errorf("a new tenant's refused batch left its window's key (EXISTS %d, %v)", n, err)
	}

	// A shadow take of 7 does not fit (4 + 7 > 10), the bucket's 1 does:
	// the batch is admitted, the shadow window takes nothing.
	if ops := batch(true, "acme", 7, 1); ops[0].Grant.OK || !ops[1].Grant.OK || ops[0].Grant.Taken != 0 {
		t.Errorf("shadow batch: %+v, %+v; want the shadow window refused, the bucket admitted", ops[0].Grant, ops[1].Grant)
	}
	if got := count(k); got != "4" {
		t.Errorf("count after a shadow refusal = %q; want 4", got)
	}

	// The next window counts apart; the last one's key stays until its expiry.
	now = start.Add(time.Minute + time.Second)
	var g backend.Grant
	if err := fw.Acquire(ctx, "acme", limitOf(&fwp), 2, now, &g); err != nil || !g.OK || g.Remaining != 8 {
		t.Fatalf("next window: %+v, %v; want 2 taken, 8 left", g, err)
	}
	next := key("acme", start.Add(time.Minute))
	if got, old := count(next), count(k); got != "2" || old != "4" {
		t.Errorf("counts of the next window and the last = %q, %q; want 2, 4", got, old)
	}
	stats := fw.(backend.Inspector).Stats(limitOf(&fwp), now)
	if stats.Partitions != 1 {
		t.Errorf("Stats in the next window: %d partitions; want 1 (the last window's key has passed)", stats.Partitions)
	}

	for i, want := range []string{"1", ""} {
		if err := fw.Adjust(ctx, "acme", limitOf(&fwp), &g, -1, now); err != nil {
			t.Fatal(err)
		}
		if got := count(next); got != want {
			t.Errorf("count after refund %d = %q; want %q", i+1, got, want)
		}
	}
}

// TestFixedWindowTakeIsOneCommand counts the Redis commands of a fixed
// window's decision on a partition that already counts in this window:
// TIME and one INCRBY, nothing read before, no expiry set again.
func TestFixedWindowTakeIsOneCommand(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Prefix: uniquePrefix(), Timeout: time.Second})
	p := admission.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 1 << 40, Per: time.Hour}
	lim, _ := st.Limiter(&p)
	ctx := context.Background()
	var calls map[string]string
	// The server's hour can turn between the two takes (the second is then
	// its window's first): that attempt says nothing, and runs again.
	for attempt := 0; ; attempt++ {
		var first, g backend.Grant
		if err := lim.Acquire(ctx, "acme", limitOf(&p), 1, time.Now(), &first); err != nil || !first.OK {
			t.Fatalf("first take: %+v, %v", first, err)
		}
		if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
		if err := lim.Acquire(ctx, "acme", limitOf(&p), 5, time.Now(), &g); err != nil || !g.OK {
			t.Fatalf("second take: %+v, %v", g, err)
		}
		calls = commandCalls(t, srv.Addr)
		if g.Stamp == first.Stamp || attempt > 0 {
			break
		}
	}
	if calls["incrby"] != "1" || calls["time"] != "1" {
		t.Errorf("INCRBY, TIME calls %q, %q; want 1 each (all calls %v)", calls["incrby"], calls["time"], calls)
	}
	for _, c := range []string{"get", "mget", "set", "pexpire", "decrby", "del"} {
		if calls[c] != "" {
			t.Errorf("%s calls %s; want none (all calls %v)", c, calls[c], calls)
		}
	}
}

// TestFixedWindowServerPlacesKey decides, adjusts and peeks a fixed
// window from a replica whose clock is three days behind the server's
// (within the 13 days a script moves a window by itself): the count is
// the server's window's, in its key, and the replica's window has no key.
func TestFixedWindowServerPlacesKey(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	prefix := uniquePrefix()
	st := newStore(t, client, redisstore.Config{Prefix: prefix, Timeout: time.Second})
	p := admission.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 10, Per: 24 * time.Hour}
	lim, _ := st.Limiter(&p)
	ctx := context.Background()
	key := func(start int64) string {
		return prefix + "{acme}:fw:fc:acme@" + strconv.FormatInt(start/1e9, 10)
	}
	// The window rolls once a day: a run that straddles a roll runs again.
	for attempt := 0; ; attempt++ {
		behind := time.Now().Add(-72 * time.Hour)
		var g, peek backend.Grant
		if err := lim.Acquire(ctx, "acme", limitOf(&p), 3, behind, &g); err != nil || !g.OK {
			t.Fatalf("Acquire: %+v, %v", g, err)
		}
		if err := lim.(backend.Peeker).Peek(ctx, "acme", limitOf(&p), behind, &peek); err != nil {
			t.Fatal(err)
		}
		v, err := redistest.Do(srv.Addr, "GET", key(g.Stamp))
		if err != nil {
			t.Fatal(err)
		}
		stale, err := client.Exists(ctx, key(behind.Truncate(24*time.Hour).UnixNano())).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := lim.Adjust(ctx, "acme", limitOf(&p), &g, -3, behind); err != nil {
			t.Fatal(err)
		}
		left, _ := client.Exists(ctx, key(g.Stamp)).Result()
		if peek.Stamp != g.Stamp && attempt == 0 {
			continue
		}
		if since := time.Since(time.Unix(0, g.Stamp)); since < 0 || since > 24*time.Hour {
			t.Errorf("the window starts %v before now; want the server's day", since)
		}
		if v != "3" || stale != 0 {
			t.Errorf("count in the server's window %q, the replica's window's key exists: %d; want 3, 0", v, stale)
		}
		if peek.Remaining != 7 || peek.Stamp != g.Stamp {
			t.Errorf("Peek: %+v; want 7 left in the window of the take (%d)", peek, g.Stamp)
		}
		if g.Remaining != 10 || left != 0 {
			t.Errorf("after refunding the 3: %d left, key exists %d; want 10 and no key", g.Remaining, left)
		}
		return
	}
}

// TestFixedWindowRefusalsWriteNothing floods a full fixed window with
// takes: the first refusal increments and gives back, and tells the
// replica the window is full; the next ones only read the count. When
// another replica refunds, the next take reads room and takes it, and the
// one after increments at once again.
func TestFixedWindowRefusalsWriteNothing(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	cfg := redisstore.Config{Prefix: uniquePrefix(), CallerTime: true, Timeout: time.Second}
	a, b := newStore(t, client, cfg), newStore(t, client, cfg)
	p := admission.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 5, Per: time.Hour}
	la, _ := a.Limiter(&p)
	lb, _ := b.Limiter(&p)
	ctx := context.Background()
	now := backendtest.Epoch
	take := func(n int64) backend.Grant {
		t.Helper()
		var g backend.Grant
		if err := la.Acquire(ctx, "acme", limitOf(&p), n, now, &g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	reset := func() {
		t.Helper()
		if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
	first := take(5)
	if !first.OK {
		t.Fatalf("first take: %+v", first)
	}
	reset()
	for i := 0; i < 21; i++ {
		if g := take(1); g.OK || g.Remaining != 0 {
			t.Fatalf("take %d of a full window: %+v; want refused, 0 left", i, g)
		}
	}
	calls := commandCalls(t, srv.Addr)
	if calls["incrby"] != "1" || calls["decrby"] != "1" || calls["get"] != "20" {
		t.Errorf("21 refusals: INCRBY %q, DECRBY %q, GET %q; want 1, 1, 20 (all calls %v)", calls["incrby"], calls["decrby"], calls["get"], calls)
	}

	// The other replica gives 2 back: the next take reads room and takes 1.
	if err := lb.Adjust(ctx, "acme", limitOf(&p), &first, -2, now); err != nil {
		t.Fatal(err)
	}
	reset()
	if g := take(1); !g.OK || g.Remaining != 1 {
		t.Errorf("take after the refund: %+v; want admitted, 1 left", g)
	}
	if calls := commandCalls(t, srv.Addr); calls["get"] != "1" || calls["incrby"] != "1" || calls["decrby"] != "" {
		t.Errorf("take after the refund: GET %q, INCRBY %q, DECRBY %q; want 1, 1, none", calls["get"], calls["incrby"], calls["decrby"])
	}
	reset()
	if g := take(1); !g.OK || g.Remaining != 0 {
		t.Errorf("last take: %+v; want admitted, 0 left", g)
	}
	if calls := commandCalls(t, srv.Addr); calls["get"] != "" || calls["incrby"] != "1" {
		t.Errorf("a take after one that fitted: GET %q, INCRBY %q; want none, 1", calls["get"], calls["incrby"])
	}
}
