package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// weekLimit is a fixed window of n a week on Redis: no window boundary
// inside a test but once a week, and each admission's count is its
// answer's limit minus what remains.
func weekLimit(n int) string {
	return fmt.Sprintf("domain: api\non_store_error: closed\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: week, requests_per_unit: %d}\n", n)
}

// writeConfig replaces dir/api.yaml in one rename: the watcher never
// reads half a file.
func writeConfig(t *testing.T, dir, text string) {
	t.Helper()
	tmp := filepath.Join(dir, ".api.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
}

// rlsReplica is one sluice-rls process of a fleet, with its own
// configuration directory.
type rlsReplica struct {
	dir string
	rls rlsv3.RateLimitServiceClient
	op  string
}

func startFleet(t *testing.T, n int, config string, args ...string) []*rlsReplica {
	t.Helper()
	var fleet []*rlsReplica
	for range n {
		dir := t.TempDir()
		writeConfig(t, dir, config)
		conn, op, _ := binary(t, append([]string{"-config", dir}, args...)...)
		fleet = append(fleet, &rlsReplica{dir: dir, rls: rlsv3.NewRateLimitServiceClient(conn), op: op})
	}
	return fleet
}

// callHits sends one request-phase call for tenant, of cost hits (0:
// the call's default of one).
func callHits(t *testing.T, c rlsv3.RateLimitServiceClient, tenant string, hits uint64) *rlsv3.RateLimitResponse {
	t.Helper()
	d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}}
	if hits > 0 {
		d.HitsAddend = wrapperspb.UInt64(hits)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Errorf("ShouldRateLimit: %v", err)
		return nil
	}
	return resp
}

// metric returns the value of the series named exactly name on the page,
// "" when it is absent.
func metric(body, name string) string {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestFleetReloadMidBurst: three processes on one Redis enforce a limit
// of 30; one of them reloads its file, the limit lowered to 20, between
// two bursts. Its later calls obey 20 while the others still obey 30 and
// fill the window to 30; once they reload too, every call is refused.
// Each admission's count (its answer's limit minus what remains) is
// distinct and they are 1 to 30: nothing counted twice nor lost, the
// limit's count kept across the reload. Each process's metrics show its
// reloads.
func TestFleetReloadMidBurst(t *testing.T) {
	srv := redistest.Start(t)
	fleet := startFleet(t, 3, weekLimit(30), "-redis", srv.Addr, "-redis-timeout", "10s")
	type answer struct {
		replica int
		resp    *rlsv3.RateLimitResponse
	}
	burst := func(calls int) []answer {
		var mu sync.Mutex
		var out []answer
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				resp := callHits(t, fleet[i%3].rls, "acme", 0)
				if resp == nil {
					return
				}
				mu.Lock()
				out = append(out, answer{i % 3, resp})
				mu.Unlock()
			})
		}
		wg.Wait()
		return out
	}
	var counts []int
	admit := func(phase string, as []answer, limits [3]uint32, wantOK int) {
		t.Helper()
		ok := 0
		for _, a := range as {
			st := a.resp.Statuses[0]
			if got := st.CurrentLimit.GetRequestsPerUnit(); got != limits[a.replica] {
				t.Errorf("%s: replica %d answered by a limit of %d; want %d", phase, a.replica, got, limits[a.replica])
			}
			if a.resp.OverallCode != rlsv3.RateLimitResponse_OK {
				continue
			}
			ok++
			count := int(st.CurrentLimit.GetRequestsPerUnit()) - int(st.LimitRemaining)
			if count > int(limits[a.replica]) {
				t.Errorf("%s: replica %d admitted the %dth request against its limit of %d", phase, a.replica, count, limits[a.replica])
			}
			counts = append(counts, count)
		}
		if ok != wantOK {
			t.Errorf("%s: %d of %d calls admitted; want %d", phase, ok, len(as), wantOK)
		}
	}
	reloaded := func(i, n int) {
		t.Helper()
		writeConfig(t, fleet[i].dir, weekLimit(20))
		want := fmt.Sprint(n)
		waitFor(t, func() bool { return metric(scrape(t, fleet[i].op), `admission_reloads_total{result="ok"}`) == want })
	}
	admit("before the reload", burst(15), [3]uint32{30, 30, 30}, 15)
	reloaded(0, 2)
	admit("after one replica reloaded", burst(30), [3]uint32{20, 30, 30}, 15)
	reloaded(1, 2)
	reloaded(2, 2)
	admit("after every replica reloaded", burst(9), [3]uint32{20, 20, 20}, 0)
	slices.Sort(counts)
	want := make([]int, 30)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(counts, want) {
		t.Errorf("the admissions' counts = %v; want 1 to 30, once each", counts)
	}
	for i, r := range fleet {
		body := scrape(t, r.op)
		if got := metric(body, `admission_reloads_total{result="ok"}`); got != "2" {
			t.Errorf("replica %d: admission_reloads_total{result=\"ok\"} = %q; want 2", i, got)
		}
		if got := metric(body, `admission_reloads_total{result="rejected"}`); got != "" && got != "0" {
			t.Errorf("replica %d: admission_reloads_total{result=\"rejected\"} = %q; want none", i, got)
		}
	}
}

// decisions returns the fleet's admission_decisions_total of policy
// api/tenant for decision in mode, summed over its processes.
func decisions(t *testing.T, fleet []*rlsReplica, decision, mode string) int {
	t.Helper()
	n := 0
	for _, r := range fleet {
		v := metric(scrape(t, r.op), fmt.Sprintf(`admission_decisions_total{decision=%q,mode=%q,policy="api/tenant",reason="rate"}`, decision, mode))
		if v != "" {
			var k int
			if _, err := fmt.Sscan(v, &k); err != nil {
				t.Fatalf("decision count %q: %v", v, err)
			}
			n += k
		}
	}
	return n
}

// TestFleetShadowPredictsEnforce: two fleets of two processes, each on
// its own Redis, get the same calls (weighted, alternating replicas); one
// enforces, the other runs with -shadow. The shadow fleet answers every
// call OK and its /metrics count a would-reject for exactly the calls the
// enforcing fleet refuses, one by one, because a call it would reject
// takes nothing from its limit, as a refused one takes nothing from the
// enforced limit.
func TestFleetShadowPredictsEnforce(t *testing.T) {
	config := "domain: api\non_store_error: closed\nalgorithm: token_bucket\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: week, requests_per_unit: 10}\n"
	enforce := startFleet(t, 2, config, "-redis", redistest.Start(t).Addr, "-redis-timeout", "10s")
	shadow := startFleet(t, 2, config, "-redis", redistest.Start(t).Addr, "-redis-timeout", "10s", "-shadow")
	refused := 0
	for i, cost := range []uint64{3, 4, 5, 2, 1, 2, 3, 1, 1, 11, 1} {
		e := callHits(t, enforce[i%2].rls, "acme", cost)
		s := callHits(t, shadow[i%2].rls, "acme", cost)
		if e == nil || s == nil {
			t.FailNow()
		}
		if s.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d (cost %d): shadow fleet answered %v; want OK", i, cost, s.OverallCode)
		}
		if e.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			refused++
		}
		if got := decisions(t, shadow, "would_reject", "shadow"); got != refused {
			t.Fatalf("call %d (cost %d): enforcing fleet answered %v, %d refusals so far; shadow fleet counts %d would-rejects", i, cost, e.OverallCode, refused, got)
		}
	}
	if refused != 7 {
		t.Errorf("enforcing fleet refused %d calls; want 7 (3, 4, 2 and 1 fill the 10; 5 finds 3 left)", refused)
	}
	if got := decisions(t, enforce, "rejected", "enforce"); got != refused {
		t.Errorf("enforcing fleet's metrics count %d rejections; want %d", got, refused)
	}
	if got := decisions(t, shadow, "rejected", "enforce") + decisions(t, shadow, "rejected", "shadow"); got != 0 {
		t.Errorf("shadow fleet's metrics count %d rejections; want 0", got)
	}
}
