package envoyrls_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
	"github.com/sluicehq/sluice/internal/benchcpu"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The benchmarks compare one ShouldRateLimit call over loopback gRPC (the
// official client, one connection) with the core's Admit of the same
// policy, in the same run, with the memory store and with Redis:
//
//	go test -run '^$' -bench . -benchmem ./admission/envoyrls/
//
// parallel=N runs N×GOMAXPROCS goroutines, as the store benchmarks do.

const benchTenantCount = 10_000

var benchParallelism = []int{1, 8, 64}

// benchConfig admits everything: the figures are the cost of a decision.
func benchConfig(store string) string {
	s := "domain: bench\nalgorithm: token_bucket\n"
	if store != "" {
		s += "store: " + store + "\n"
	}
	return s + "descriptors:\n  - key: tenant\n    tenant: true\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n"
}

func benchRig(b *testing.B, store string) *rig {
	if store == "" {
		return start(b, mustParse(b, benchConfig("")), rigOption{clock: admission.SystemClock{}})
	}
	srv := redistest.Start(b)
	return replica(b, srv.Addr, mustParse(b, benchConfig("redis")), slowOK)
}

func BenchmarkShouldRateLimit(b *testing.B) {
	benchStores(b, func(r *rig) func(i int) error {
		reqs := benchRequests()
		return func(i int) error {
			resp, err := r.client.ShouldRateLimit(context.Background(), reqs[i%benchTenantCount])
			if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
				err = fmt.Errorf("ShouldRateLimit = %v", resp)
			}
			return err
		}
	})
}

// BenchmarkServeInProcess is the adapter without the network: the same
// call made to the Server directly, so that the protocol's own cost and
// the adapter's can be told apart.
func BenchmarkServeInProcess(b *testing.B) {
	benchStores(b, func(r *rig) func(i int) error {
		reqs := benchRequests()
		return func(i int) error {
			resp, err := r.srv.ShouldRateLimit(context.Background(), reqs[i%benchTenantCount])
			if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
				err = fmt.Errorf("ShouldRateLimit = %v", resp)
			}
			return err
		}
	})
}

func benchRequests() []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, benchTenantCount)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "t"+strconv.Itoa(i))}}
	}
	return reqs
}

// BenchmarkAdmit is the peer: the core's own decision for the same policy
// and partitions, without the protocol.
func BenchmarkAdmit(b *testing.B) {
	benchStores(b, func(r *rig) func(i int) error {
		reqs := make([]admission.Request, benchTenantCount)
		policy := r.srv.Config().Policies[0].Name
		for i := range reqs {
			tenant := "t" + strconv.Itoa(i)
			reqs[i] = admission.Request{Operation: policy, Tenant: tenant, User: tenant, Units: []admission.UnitAmount{{Unit: rlsconfig.UnitHits, Amount: 1}}}
		}
		return func(i int) error {
			t, err := r.ctl.TryAdmit(context.Background(), reqs[i%benchTenantCount])
			t.Done()
			return err
		}
	})
}

// benchStores runs the decision op builds, with the memory store and with
// Redis, at every parallelism, reporting CPU per decision.
func benchStores(b *testing.B, build func(*rig) func(i int) error) {
	for _, store := range []string{"", "redis"} {
		op := build(benchRig(b, store))
		for _, par := range benchParallelism {
			b.Run("store="+storeName(store)+"/parallel="+strconv.Itoa(par), func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(par)
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
	}
}

func storeName(s string) string {
	if s == "" {
		return "memory"
	}
	return s
}

// BenchmarkDescriptors is a load client for the rate limit service on
// Redis: calls of 1 or 3 descriptors (a tenant's, its route's and its
// model's, each a limit of its own, a fixed window: the service's default
// algorithm and envoyproxy/ratelimit's) over loopback gRPC from exactly
// inflight concurrent callers (not a multiple of GOMAXPROCS), every call
// admitted. Besides ns/op and cpu-ns/op (this process: client and server),
// it reports the Redis server's CPU per call (redis-cpu-ns/op), its
// script calls per call (scripts/op) and the commands sent to it per call
// (cmds/op), from INFO.
func BenchmarkDescriptors(b *testing.B) {
	srv := redistest.Start(b)
	cfg := "domain: bench\nalgorithm: fixed_window\nstore: redis\ndescriptors:\n"
	for _, k := range []string{"tenant", "route", "model"} {
		cfg += "  - key: " + k + "\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n"
	}
	r := replica(b, srv.Addr, mustParse(b, cfg), slowOK)
	for _, n := range []int{1, 3} {
		reqs := make([]*rlsv3.RateLimitRequest, benchTenantCount)
		for i := range reqs {
			ds := []*rlv3.RateLimitDescriptor{desc("tenant", "t"+strconv.Itoa(i)), desc("route", "r"+strconv.Itoa(i%100)), desc("model", "m"+strconv.Itoa(i%10))}
			reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: ds[:n]}
		}
		for _, inflight := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("descriptors=%d/inflight=%d", n, inflight), func(b *testing.B) {
				b.ReportAllocs()
				before := redisFigures(b, srv.Addr)
				cpu := benchcpu.Start()
				var seq atomic.Int64
				var wg sync.WaitGroup
				for g := range inflight {
					wg.Go(func() {
						i := g * 7919
						for seq.Add(1) <= int64(b.N) {
							resp, err := r.client.ShouldRateLimit(context.Background(), reqs[i%benchTenantCount])
							if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
								b.Errorf("ShouldRateLimit = %v, %v", resp, err)
								return
							}
							i++
						}
					})
				}
				wg.Wait()
				cpu.Report(b)
				after := redisFigures(b, srv.Addr)
				b.ReportMetric(float64(after.cpu-before.cpu)/float64(b.N), "redis-cpu-ns/op")
				b.ReportMetric(float64(after.scripts-before.scripts)/float64(b.N), "scripts/op")
				b.ReportMetric(float64(after.cmds-before.cmds-1)/float64(b.N), "cmds/op") // less the INFO
			})
		}
	}
}

// serverFigures are a Redis server's CPU time (user and system, ns), its
// script calls and the commands its clients sent so far.
type serverFigures struct{ cpu, scripts, cmds int64 }

func redisFigures(b testing.TB, addr string) serverFigures {
	b.Helper()
	info, err := redistest.Do(addr, "INFO", "all")
	if err != nil {
		b.Fatal(err)
	}
	var f serverFigures
	for _, line := range strings.Split(info, "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		switch name {
		case "used_cpu_sys", "used_cpu_user":
			s, _ := strconv.ParseFloat(value, 64)
			f.cpu += int64(s * 1e9)
		case "total_commands_processed":
			f.cmds, _ = strconv.ParseInt(value, 10, 64)
		case "cmdstat_evalsha", "cmdstat_eval":
			calls, _, _ := strings.Cut(strings.TrimPrefix(value, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			f.scripts += n
		}
	}
	return f
}
