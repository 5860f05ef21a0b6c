package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// keeperSetup admits n requests of as many tenants under a concurrency
// cap (MaxHold 30s) on st, with the lease keeper on the fake clock, and
// returns the controller, its tickets and the clock.
func keeperSetup(tb testing.TB, st backend.Store, n int) (*admission.Controller, []admission.Ticket, *admissiontest.Clock) {
	tb.Helper()
	clock := admissiontest.NewClock(backendtest.Epoch)
	p := admission.Policy{Name: "streams", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 4,
		MaxHold: 30 * time.Second, Store: "redis"}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}}, admission.WithStore("redis", st), admission.WithClock(clock))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ctl.Close() })
	tickets := make([]admission.Ticket, n)
	for i := range tickets {
		if tickets[i], err = ctl.TryAdmit(context.Background(), admission.Request{Tenant: fmt.Sprint("t", i)}); err != nil {
			tb.Fatal(err)
		}
	}
	return ctl, tickets, clock
}

// TestKeeperRenewsInBatches: the lease keeper renews the leases of 300
// open streams in one batch, which the store sends in two pipelines (256
// calls at most each): two round trips, where it made one call per lease
// before; and every lease is renewed (still held after three MaxHolds).
func TestKeeperRenewsInBatches(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{CallerTime: true, Timeout: 10 * time.Second}, redisstore.WithObserver(rec))
	_, tickets, clock := keeperSetup(t, st, 300)
	renewals := func() (calls, policies int) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, c := range rec.calls {
			if c.Op == "renew" {
				calls++
				policies += c.Policies
			}
		}
		return calls, policies
	}
	clock.Advance(10 * time.Second) // one run: every lease is a third of MaxHold old
	if calls, leases := renewals(); calls != 2 || leases != 300 {
		t.Errorf("one keeper run made %d renew round trips for %d leases; want 2 for 300", calls, leases)
	}
	clock.Advance(90 * time.Second)
	for i, tk := range tickets {
		if err := tk.Renew(); err != nil {
			t.Fatalf("ticket %d after three MaxHolds of keeper runs: %v", i, err)
		}
		tk.Done()
	}
}

// oneByOne is the Redis store without its batched renewal: the keeper
// renews its leases one call each, as before batching.
type oneByOne struct{ st *redisstore.Store }

func (o oneByOne) Limiter(p *admission.Policy) (backend.Limiter, error) { return o.st.Limiter(p) }

// BenchmarkRenewKeeper is one run of the lease keeper renewing the leases
// of 1,000 open streams on a real redis-server: batched (one pipeline per
// 256 leases) and, as the peer, one call per lease.
func BenchmarkRenewKeeper(b *testing.B) {
	srv := redistest.Start(b)
	client := newClient(b, srv.Addr)
	for _, mode := range []string{"batched", "one-by-one"} {
		b.Run(mode, func(b *testing.B) {
			var st backend.Store = newStore(b, client, redisstore.Config{CallerTime: true, Timeout: 10 * time.Second})
			if mode == "one-by-one" {
				st = oneByOne{st.(*redisstore.Store)}
			}
			_, tickets, clock := keeperSetup(b, st, 1000)
			b.ReportAllocs()
			for b.Loop() {
				clock.Advance(10 * time.Second)
			}
			b.StopTimer()
			for i, tk := range tickets {
				if err := tk.Renew(); err != nil {
					b.Fatalf("ticket %d: %v", i, err)
				}
				tk.Done()
			}
		})
	}
}

// TestRenewBatchOneShardDown: the leases of 8 tenants live on a Ring of
// two servers; after one keeper run, one server holds every script
// (CLIENT PAUSE WRITE) for a whole MaxHold of runs. The leases on the
// other server are renewed at every run, and their tickets keep them:
// only the paused server's leases are lost. Before, one shard's failure
// failed every renewal of the batch, the healthy shard's leases were
// declared lost after a MaxHold (their permits then held in Redis by no
// ticket until they expired), and each run reported a store error for
// each of them.
func TestRenewBatchOneShardDown(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	client := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"a": a.Addr, "b": b.Addr},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { client.Close() })
	prefix := uniquePrefix()
	st := newStore(t, client, redisstore.Config{Prefix: prefix, CallerTime: true, Timeout: pausedTimeout})
	_, tickets, clock := keeperSetup(t, st, 8)
	onB := make([]bool, len(tickets))
	split := [2]int{}
	for i := range tickets {
		n, err := redistest.Do(b.Addr, "EXISTS", fmt.Sprintf("%s{t%d}:streams:cl:t%d", prefix, i, i))
		if err != nil {
			t.Fatal(err)
		}
		onB[i] = n == "1"
		split[map[bool]int{false: 0, true: 1}[onB[i]]]++
	}
	if split[0] == 0 || split[1] == 0 {
		t.Fatalf("tenants per server %v; want some on each", split)
	}
	clock.Advance(10 * time.Second) // a run with both servers up: they have the script
	resume := pauseWrites(t, b.Addr)
	for range 3 {
		clock.Advance(10 * time.Second) // a keeper run: every lease is due
	}
	resume()
	for i, tk := range tickets {
		err := tk.Renew()
		if onB[i] && err == nil {
			t.Errorf("ticket %d (paused server): Renew after a MaxHold without renewal = nil; want its lease lost", i)
		}
		if !onB[i] && err != nil {
			t.Errorf("ticket %d (healthy server): Renew = %v; want its lease held", i, err)
		}
		tk.Done()
	}
}

// TestRenewBatchScriptLoadedBesideSlowShard: of a Ring of two servers,
// one has never run the renew script (a restart empties its cache) and
// the other holds every script until the renewals' deadline. The first
// answers NOSCRIPT at once, and its renewals are sent again with the
// script's source: they land. Before, that second round trip was given
// what was left of the deadline the slow server had spent, and failed at
// once, at every keeper run while the other server was slow.
func TestRenewBatchScriptLoadedBesideSlowShard(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	client := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"a": a.Addr, "b": b.Addr},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { client.Close() })
	prefix := uniquePrefix()
	st := newStore(t, client, redisstore.Config{Prefix: prefix, CallerTime: true, Timeout: pausedTimeout})
	p := admission.Policy{Name: "streams", Algorithm: limits.Concurrency, Limit: 4, MaxHold: 30 * time.Second}
	lim, _ := st.Limiter(&p)
	ctx := context.Background()
	now := backendtest.Epoch
	var ops []backend.Op
	for i := range 8 {
		var g backend.Grant
		key := fmt.Sprint("t", i)
		if err := lim.Acquire(ctx, key, limitOf(&p), 1, now, &g); err != nil || !g.OK {
			t.Fatalf("Acquire %s: %+v, %v", key, g, err)
		}
		ops = append(ops, backend.Op{Limiter: lim, Key: key, Limit: p.Base(), Grant: g})
	}
	if _, err := redistest.Do(a.Addr, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	resume := pauseWrites(t, b.Addr)
	err := st.RenewBatch(ctx, ops, now.Add(10*time.Second))
	resume()
	if err == nil {
		t.Fatal("RenewBatch with a paused server = nil; want its renewals' error")
	}
	healthy := 0
	for _, op := range ops {
		n, err := redistest.Do(a.Addr, "EXISTS", fmt.Sprintf("%s{%s}:streams:cl:%s", prefix, op.Key, op.Key))
		if err != nil {
			t.Fatal(err)
		}
		if n != "1" {
			continue
		}
		healthy++
		if op.Err != nil || op.Grant.Stamp == 0 {
			t.Errorf("renewal of %s on the responsive server: %v (lease id %d); want renewed", op.Key, op.Err, op.Grant.Stamp)
		}
	}
	if healthy == 0 || healthy == len(ops) {
		t.Fatalf("%d of %d leases on the responsive server; want some on each", healthy, len(ops))
	}
}
