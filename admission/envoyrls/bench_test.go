package envoyrls_test

import (
	"context"
	"fmt"
	"strconv"
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
