package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The benchmarks start their own redis-server; run them with
//
//	go test -run '^$' -bench . -benchmem ./admission/redisstore/
//
// BenchmarkPeerRedisRate is the peer: go-redis/redis_rate's GCRA Allow on
// the same server, keys and client settings, so one run gives the ratios.

const benchKeys = 10_000

func benchTenants() []string {
	ks := make([]string, benchKeys)
	for i := range ks {
		ks[i] = "tenant-" + strconv.Itoa(i)
	}
	return ks
}

func benchClient(b *testing.B, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	return c
}

var parallelism = []int{1, 8, 64}

// benchRate is the per-key limit, per second, of the peer and of ours: high
// enough that every request is admitted, the same on both sides.
const benchRate = 1_000_000

func BenchmarkPeerRedisRate(b *testing.B) {
	srv := redistest.Start(b)
	client := benchClient(b, srv.Addr)
	lim := redis_rate.NewLimiter(client)
	// A million a second per key admits everything here and, unlike a rate
	// of 1<<30, makes the GCRA script write: its theoretical arrival time
	// is float64 seconds since 2017, whose resolution (~60 ns) would swallow
	// a 1 ns increment and leave a read-only script to measure.
	limit := redis_rate.Limit{Rate: benchRate, Burst: benchRate, Period: time.Second}
	keys := benchTenants()
	ctx := context.Background()
	for _, par := range parallelism {
		b.Run("parallel="+strconv.Itoa(par), func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(par)
			var seq atomic.Int64
			m := startServerMeter(b, srv.Addr)
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1) * 7919)
				for pb.Next() {
					res, err := lim.Allow(ctx, keys[i%benchKeys], limit)
					if err != nil || res.Allowed != 1 {
						b.Errorf("Allow = %+v, %v", res, err)
						return
					}
					i++
				}
			})
			m.report(b)
		})
	}
}

// errCounter fails a benchmark that measured store failures instead of
// decisions.
type errCounter struct {
	admission.NopObserver
	n atomic.Int64
}

func (e *errCounter) StoreError(admission.StoreEvent) { e.n.Add(1) }

func benchController(b *testing.B, client redis.UniversalClient, obs *errCounter, policies ...admission.Policy) *admission.Controller {
	st, err := redisstore.New(client, redisstore.Config{Prefix: uniquePrefix(), Timeout: time.Second}, redisstore.WithObserver(obs))
	if err != nil {
		b.Fatal(err)
	}
	for i := range policies {
		policies[i].Store = "redis"
	}
	ctl, err := admission.New(admission.Config{Policies: policies}, admission.WithStore("redis", st), admission.WithObserver(obs))
	if err != nil {
		b.Fatal(err)
	}
	return ctl
}

// benchAdmit measures admissions through ctl on keys with par goroutines
// per CPU, each settled with 80 tokens of the 100 estimated when tokens is
// set and done otherwise, and the server's side of them (see serverMeter).
func benchAdmit(b *testing.B, addr string, keys []string, par int, ctl *admission.Controller, obs *errCounter, tokens bool) {
	b.ReportAllocs()
	b.SetParallelism(par)
	var seq atomic.Int64
	ctx := context.Background()
	m := startServerMeter(b, addr)
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1) * 7919)
		for pb.Next() {
			tk, err := ctl.Admit(ctx, admission.Request{Tenant: keys[i%benchKeys], Tokens: 100})
			if err != nil {
				b.Errorf("Admit: %v", err)
				return
			}
			if tokens {
				tk.Settle(admission.Usage{Tokens: 80})
			} else {
				tk.Done()
			}
			i++
		}
	})
	m.report(b)
	if n := obs.n.Load(); n > 0 {
		b.Fatalf("%d store errors: the benchmark measured failures", n)
	}
}

// BenchmarkRedisAdmit is a token-bucket admission and its settlement
// through an admission.Controller on 10,000 tenants; policies=3 adds a
// token bucket on tokens and a concurrency limit (one AcquireBatch round
// trip, then one SettleBatch that releases the lease and reconciles the
// tokens).
func BenchmarkRedisAdmit(b *testing.B) {
	srv := redistest.Start(b)
	client := benchClient(b, srv.Addr)
	keys := benchTenants()
	tenant := []limits.KeyPart{limits.KeyTenant}
	rpm := admission.Policy{Name: "rpm", Key: tenant, Algorithm: limits.TokenBucket, Limit: benchRate, Per: time.Second}
	for _, par := range parallelism {
		b.Run("parallel="+strconv.Itoa(par), func(b *testing.B) {
			obs := &errCounter{}
			benchAdmit(b, srv.Addr, keys, par, benchController(b, client, obs, rpm), obs, false)
		})
	}
	b.Run("policies=3/parallel=8", func(b *testing.B) {
		obs := &errCounter{}
		tpm := admission.Policy{Name: "tpm", Key: tenant, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Second}
		inflight := admission.Policy{Name: "inflight", Key: tenant, Algorithm: limits.Concurrency, Limit: 1 << 20, MaxHold: time.Minute}
		benchAdmit(b, srv.Addr, keys, 8, benchController(b, client, obs, rpm, tpm, inflight), obs, true)
	})
}

// BenchmarkRedisAdmitGeneric is an admission and its settlement through an
// admission.Controller on 10,000 tenants for the algorithms other than
// token buckets and concurrency limits (windows, sliding log, quota),
// alone and all four in one batch.
func BenchmarkRedisAdmitGeneric(b *testing.B) {
	srv := redistest.Start(b)
	client := benchClient(b, srv.Addr)
	keys := benchTenants()
	tenant := []limits.KeyPart{limits.KeyTenant}
	fw := admission.Policy{Name: "fw", Key: tenant, Algorithm: limits.FixedWindow, Limit: benchRate, Per: time.Second}
	sw := admission.Policy{Name: "sw", Key: tenant, Algorithm: limits.SlidingWindow, Limit: benchRate, Per: time.Second}
	sl := admission.Policy{Name: "sl", Key: tenant, Algorithm: limits.SlidingLog, Limit: benchRate, Per: time.Second}
	q := admission.Policy{Name: "q", Key: tenant, Unit: limits.UnitTokens, Algorithm: limits.Quota, Limit: 1 << 40, Period: limits.PeriodFixed, Per: time.Hour}
	cases := []struct {
		name     string
		policies []admission.Policy
	}{
		{"fixed_window", []admission.Policy{fw}},
		{"sliding_window", []admission.Policy{sw}},
		{"sliding_log", []admission.Policy{sl}},
		{"quota", []admission.Policy{q}},
		{"policies=4", []admission.Policy{fw, sw, sl, q}},
	}
	for _, c := range cases {
		b.Run(c.name+"/parallel=8", func(b *testing.B) {
			obs := &errCounter{}
			benchAdmit(b, srv.Addr, keys, 8, benchController(b, client, obs, c.policies...), obs, true)
		})
	}
}
