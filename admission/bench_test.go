package admission_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/benchcpu"
)

func tenants(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "tenant-" + strconv.Itoa(i)
	}
	return ks
}

// BenchmarkPeerXTimeRate is the peer: golang.org/x/time/rate AllowN with a
// clock read per call, on one limiter and on 10,000 limiters in a map behind
// one mutex. Its limiters have a finite rate and burst that no request
// reaches, as BenchmarkAdmit's policy has: each call refills and takes
// from the bucket. The unlimited variant gives them rate.Inf, which
// x/time/rate answers without touching the bucket (no limit at all), for
// comparison with figures measured that way.
func BenchmarkPeerXTimeRate(b *testing.B) {
	peerXTimeRate(b, rate.Limit(1<<40), 1<<40)
	b.Run("unlimited", func(b *testing.B) { peerXTimeRate(b, rate.Inf, 1) })
}

// peerXTimeRate runs the peer's keys=1 and keys=10000 cases on limiters of
// the rate and burst given.
func peerXTimeRate(b *testing.B, limit rate.Limit, burst int) {
	for _, keys := range []int{1, 10000} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			names := tenants(keys)
			var mu sync.Mutex
			m := make(map[string]*rate.Limiter, keys)
			for _, k := range names {
				m[k] = rate.NewLimiter(limit, burst)
			}
			allow := func(i int) error {
				k := names[i%keys]
				mu.Lock()
				l := m[k]
				mu.Unlock()
				if !l.AllowN(time.Now(), 1) {
					return errRejected
				}
				return nil
			}
			if keys == 1 {
				l := m[names[0]]
				allow = func(int) error {
					if !l.AllowN(time.Now(), 1) {
						return errRejected
					}
					return nil
				}
			}
			serialAndParallel(b, allow)
		})
	}
}

var errRejected = errors.New("rejected")

// serialAndParallel runs op as a /serial and a /parallel sub-benchmark,
// reporting allocations and cpu-ns/op. Each goroutine of the parallel run
// starts at its own offset of i.
func serialAndParallel(b *testing.B, op func(i int) error) {
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		cpu := benchcpu.Start()
		for i := 0; b.Loop(); i++ {
			if err := op(i); err != nil {
				b.Fatal(err)
			}
		}
		cpu.Report(b)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var seq atomic.Int64
		cpu := benchcpu.Start()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1) * 7919)
			for pb.Next() {
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
		cpu.Report(b)
	})
}

func benchController(b *testing.B, policies []admission.Policy) *admission.Controller {
	c, err := admission.New(admission.Config{Policies: policies})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkAdmit measures a non-blocking admit and settle with every request
// admitted and a no-op observer.
func BenchmarkAdmit(b *testing.B) {
	bucket := admission.Policy{
		Name: "rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket,
		Limit: 1 << 40, Per: time.Second, MaxPartitions: 20000,
	}
	tokens := bucket
	tokens.Name, tokens.Unit = "tpm", limits.UnitTokens
	conc := admission.Policy{
		Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency,
		Limit: 1 << 40, MaxPartitions: 20000,
	}
	cases := []struct {
		name     string
		keys     int
		policies []admission.Policy
	}{
		{"keys=1", 1, []admission.Policy{bucket}},
		{"keys=10000", 10000, []admission.Policy{bucket}},
		{"policies=3", 10000, []admission.Policy{bucket, tokens, conc}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			c := benchController(b, tc.policies)
			names := tenants(tc.keys)
			ctx := context.Background()
			serialAndParallel(b, func(i int) error {
				t, err := c.TryAdmit(ctx, admission.Request{Tenant: names[i%tc.keys], Tokens: 100})
				t.Done()
				return err
			})
		})
	}
}

// BenchmarkStaged compares Admit with Begin then Continue on the same
// three policies (a request rate and a concurrency cap that Begin decides,
// a token rate that needs the body), and Begin alone settled at once (a
// request whose body turned out invalid), every request admitted.
func BenchmarkStaged(b *testing.B) {
	policies := []admission.Policy{
		{Name: "rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Second, MaxPartitions: 20000},
		{Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Second, MaxPartitions: 20000},
		{Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 1 << 40, MaxPartitions: 20000},
	}
	const keys = 10000
	names := tenants(keys)
	ctx := context.Background()
	b.Run("admit", func(b *testing.B) {
		c := benchController(b, policies)
		serialAndParallel(b, func(i int) error {
			t, err := c.Admit(ctx, admission.Request{Tenant: names[i%keys], Model: "gpt-4o", Tokens: 100})
			t.Done()
			return err
		})
	})
	b.Run("begin+continue", func(b *testing.B) {
		c := benchController(b, policies)
		serialAndParallel(b, func(i int) error {
			t, err := c.Begin(ctx, admission.Request{Tenant: names[i%keys]})
			if err == nil {
				err = t.Continue(ctx, admission.Request{Tenant: names[i%keys], Model: "gpt-4o", Tokens: 100})
			}
			t.Done()
			return err
		})
	})
	b.Run("begin", func(b *testing.B) {
		c := benchController(b, policies)
		serialAndParallel(b, func(i int) error {
			t, err := c.Begin(ctx, admission.Request{Tenant: names[i%keys]})
			t.Done()
			return err
		})
	})
}

// BenchmarkRenew measures Renew on every chunk of a stream: most calls
// find the lease fresh and only read the clock.
func BenchmarkRenew(b *testing.B) {
	c := benchController(b, []admission.Policy{{
		Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 1 << 40,
	}})
	t, err := c.Admit(context.Background(), admission.Request{Tenant: "acme"})
	if err != nil {
		b.Fatal(err)
	}
	defer t.Done()
	b.ReportAllocs()
	for b.Loop() {
		if err := t.Renew(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPartitionMemory reports the heap held per idle token-bucket
// partition.
func BenchmarkPartitionMemory(b *testing.B) {
	const n = 1_000_000
	names := tenants(n)
	for b.Loop() {
		c := benchController(b, []admission.Policy{{
			Name: "rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket,
			Limit: 100, Per: time.Minute, MaxPartitions: n,
		}})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ctx := context.Background()
		for _, k := range names {
			t, err := c.TryAdmit(ctx, admission.Request{Tenant: k})
			if err != nil {
				b.Fatal(err)
			}
			t.Done()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		// The tenant names are held by the benchmark, not the table: count
		// the table's own copies, which it clones.
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/partition")
		if s := c.Stats()[0]; s.Partitions != n {
			b.Fatalf("partitions = %d; want %d", s.Partitions, n)
		}
	}
}

// BenchmarkQueueFullRefusal is a refusal by a full rate-policy queue (200
// waiters of 8 tenants) of a tenant that marks its retries, with 1, 100 and
// 3,200 such tenants: each refusal visits the tenants the queue holds
// places for, at most queue.size of them, so the last two cost about the
// same.
func BenchmarkQueueFullRefusal(b *testing.B) {
	for _, tenants := range []int{1, 100, 3200} {
		b.Run("tenants="+strconv.Itoa(tenants), func(b *testing.B) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			c, err := admission.New(admission.Config{Policies: []admission.Policy{{
				Name: "tpm", Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 600, Per: time.Minute,
				Queue: limits.Queue{Size: 200, PerTenant: 25, Timeout: time.Hour},
			}}}, admission.WithClock(clock))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tk, err := c.Admit(ctx, admission.Request{Tenant: "x", Tokens: 600})
			if err != nil {
				b.Fatal(err)
			}
			tk.Done()
			// Fill the queue: 8 tenants x 25 waiters.
			for i := range 200 {
				go c.Admit(ctx, admission.Request{Tenant: "w" + strconv.Itoa(i%8), Tokens: 1})
			}
			for c.Stats()[0].Queued < 200 {
				time.Sleep(time.Millisecond)
			}
			names := make([]string, tenants)
			for i := range names {
				names[i] = "t" + strconv.Itoa(i)
				c.Admit(ctx, admission.Request{Tenant: names[i], Tokens: 1, Retry: true})
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_, err := c.Admit(ctx, admission.Request{Tenant: names[i%tenants], Tokens: 1, Retry: true})
				var rej *admission.Rejection
				if !errors.As(err, &rej) || rej.Reason != admission.ReasonQueueFull {
					b.Fatalf("a request to the full queue: %v; want queue_full", err)
				}
			}
			b.ReportMetric(float64(c.Stats()[0].Held), "held")
		})
	}
}
