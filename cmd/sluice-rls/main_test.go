package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

const limit2 = `domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 2}
`

// binary runs the command on loopback ports until the test ends, and
// returns a connection to its gRPC listener and its operator address.
func binary(t *testing.T, args ...string) (*grpc.ClientConn, string, *syncbuf.Buffer) {
	t.Helper()
	conn, op, logs, stop := startBinary(t, args...)
	t.Cleanup(func() {
		if code := stop(); code != 0 {
			t.Errorf("sluice-rls exited with %d after a stop; want 0: %s", code, logs.String())
		}
	})
	return conn, op, logs
}

// startBinary runs the command; stop ends it as SIGTERM does and returns
// its exit status.
func startBinary(t *testing.T, args ...string) (conn *grpc.ClientConn, op string, logs *syncbuf.Buffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs = &syncbuf.Buffer{}
	addrs := make(chan [2]string, 1)
	done := make(chan int, 1)
	args = append([]string{"-listen", "127.0.0.1:0", "-operator", "127.0.0.1:0"}, args...)
	go func() { done <- run(ctx, args, logs, func(g, o string) { addrs <- [2]string{g, o} }) }()
	var a [2]string
	select {
	case a = <-addrs:
	case code := <-done:
		cancel()
		t.Fatalf("sluice-rls exited with %d: %s", code, logs.String())
	}
	var once sync.Once
	code := 0
	stop = func() int {
		once.Do(func() { cancel(); code = <-done })
		return code
	}
	conn, err := grpc.NewClient(a[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, a[1], logs, stop
}

func call(t *testing.T, c rlsv3.RateLimitServiceClient, tenant string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	return callDomain(t, c, "api", tenant)
}

func callDomain(t *testing.T, c rlsv3.RateLimitServiceClient, domain, tenant string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}},
	}}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.OverallCode
}

// TestServe: the binary answers the rate limit protocol, health and
// metrics, reloads its configuration when the file changes (refusing a
// broken one), and stops cleanly.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(file, []byte(limit2), 0o644); err != nil {
		t.Fatal(err)
	}
	conn, op, logs := binary(t, "-config", dir)
	rls := rlsv3.NewRateLimitServiceClient(conn)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := call(t, rls, "a"); got != want {
			t.Fatalf("call %d = %v; want %v", i+1, got, want)
		}
	}
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", h, err)
	}
	if _, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "nobody", Value: "x"}},
	}}}); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, op)
	for _, want := range []string{
		`admission_decisions_total{decision="rejected",mode="enforce",policy="api/tenant",reason="rate"`,
		`rls_descriptors_total{kind="unknown"} 1`,
		`rls_reported_costs_total{how="charged"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics do not contain %s:\n%s", want, body)
		}
	}

	// A broken file is refused; the limit in force keeps serving.
	if err := os.WriteFile(file, []byte("domain: api\ndescriptors: [{key: tenant, rate_limit: {unit: fortnight}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(logs.String(), "configuration refused") })
	if got := call(t, rls, "a"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after a refused reload = %v; want OVER_LIMIT", got)
	}
	// A raised limit applies, and the tenant keeps its count.
	if err := os.WriteFile(file, []byte(strings.Replace(limit2, "requests_per_unit: 2", "requests_per_unit: 3", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Count(logs.String(), "configuration applied") == 2 })
	if got := call(t, rls, "a"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after raising the limit to 3 = %v; want OK", got)
	}
	if got := call(t, rls, "a"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("fourth call = %v; want OVER_LIMIT", got)
	}
	// The reloads are counted: the first load and the raised limit
	// applied, the broken file refused.
	body = scrape(t, op)
	for _, want := range []string{`admission_reloads_total{result="ok"} 2`, `admission_reloads_total{result="rejected"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics do not contain %s:\n%s", want, body)
		}
	}
}

// TestShadowBlockedCounted: a shadow limit of requests_per_unit 0 answers
// OK and its would-rejects are in the metrics, as every shadow limit's.
func TestShadowBlockedCounted(t *testing.T) {
	file := filepath.Join(t.TempDir(), "api.yaml")
	if err := os.WriteFile(file, []byte("domain: api\ndescriptors:\n  - key: tenant\n    shadow_mode: true\n    rate_limit: {unit: day, requests_per_unit: 0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conn, op, _ := binary(t, "-config", file)
	rls := rlsv3.NewRateLimitServiceClient(conn)
	for i := range 2 {
		if got := call(t, rls, "a"); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d = %v; want OK", i+1, got)
		}
	}
	body := scrape(t, op)
	if want := `admission_decisions_total{decision="would_reject",mode="shadow",policy="api/tenant",reason="rate"} 2`; !strings.Contains(body, want) {
		t.Errorf("metrics do not contain %s:\n%s", want, body)
	}
}

// TestRedisReplicas: two processes on one Redis enforce one limit.
func TestRedisReplicas(t *testing.T) {
	srv := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "api.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(limit2, "domain: api\n", "domain: api\nstore: redis\non_store_error: closed\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A timeout no call on a loaded test machine reaches: the counts must
	// not see a store failure.
	a, _, _ := binary(t, "-config", file, "-redis", srv.Addr, "-redis-timeout", "10s")
	b, _, _ := binary(t, "-config", file, "-redis", srv.Addr, "-redis-timeout", "10s")
	ra, rb := rlsv3.NewRateLimitServiceClient(a), rlsv3.NewRateLimitServiceClient(b)
	got := []rlsv3.RateLimitResponse_Code{call(t, ra, "x"), call(t, rb, "x"), call(t, ra, "x"), call(t, rb, "x")}
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("calls alternating between two replicas = %v; want %v", got, want)
		}
	}
}

// TestRedisUnchangedEnvoyFile: given -redis, two replicas serving an
// envoyproxy/ratelimit file as it is (no store: key) keep its limit in
// Redis, one limit for both, with the store's default timeout; a domain
// whose file says store: memory keeps its own in each replica.
func TestRedisUnchangedEnvoyFile(t *testing.T) {
	srv := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "api.yaml")
	if err := os.WriteFile(file, []byte(`domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 5}
---
domain: local
store: memory
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 1}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	a, opA, _ := binary(t, "-config", file, "-redis", srv.Addr)
	b, opB, _ := binary(t, "-config", file, "-redis", srv.Addr)
	fleet := []rlsv3.RateLimitServiceClient{rlsv3.NewRateLimitServiceClient(a), rlsv3.NewRateLimitServiceClient(b)}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if call(t, fleet[i%2], "x") == rlsv3.RateLimitResponse_OK {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if got := ok.Load(); got != 5 {
		t.Errorf("two replicas admitted %d of 8 against a limit of 5; want 5", got)
	}
	if n, err := redistest.Do(srv.Addr, "DBSIZE"); err != nil || n == "0" {
		t.Errorf("DBSIZE = %q, %v; want the limit's key", n, err)
	}
	for _, op := range []string{opA, opB} {
		if body := scrape(t, op); strings.Contains(body, `decision="fail_open"`) {
			t.Errorf("a replica failed open against a healthy Redis:\n%s", body)
		}
	}
	// store: memory: one each.
	for i, r := range fleet {
		if got := callDomain(t, r, "local", "x"); got != rlsv3.RateLimitResponse_OK {
			t.Errorf("replica %d, domain kept in memory: first call = %v; want OK", i, got)
		}
	}
}

// TestFailOpenLoggedAndCounted: a limit that answers without its store
// (Redis gone, on_store_error open by default) is counted as fail_open by
// policy and logged.
func TestFailOpenLoggedAndCounted(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Stop()
	file := filepath.Join(t.TempDir(), "api.yaml")
	if err := os.WriteFile(file, []byte(limit2), 0o644); err != nil {
		t.Fatal(err)
	}
	conn, op, logs := binary(t, "-config", file, "-redis", addr)
	rls := rlsv3.NewRateLimitServiceClient(conn)
	for i := range 3 {
		if got := call(t, rls, "a"); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d with Redis gone = %v; want OK (on_store_error open)", i+1, got)
		}
	}
	if body := scrape(t, op); !strings.Contains(body, `admission_decisions_total{decision="fail_open",mode="enforce",policy="api/tenant",reason="store_unavailable"`) {
		t.Errorf("metrics do not count the fail-open decisions:\n%s", body)
	}
	if l := logs.String(); !strings.Contains(l, `"decision":"fail_open"`) || !strings.Contains(l, `"policy":"api/tenant"`) {
		t.Errorf("the fail-open decisions are not logged:\n%s", l)
	}
}

// TestUsage: bad command lines exit 2.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"-config", "x", "extra"}, {"-config", "x", "-unknown-domain", "maybe"}, {"-nope"}} {
		if code := run(context.Background(), args, io.Discard, nil); code != 2 {
			t.Errorf("run(%q) = %d; want 2", args, code)
		}
	}
	if code := run(context.Background(), []string{"-config", filepath.Join(t.TempDir(), "missing")}, io.Discard, nil); code != 1 {
		t.Errorf("run with a missing file = %d; want 1", code)
	}
}

// waitFor waits until cond holds, with no deadline (package poll).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, "the condition", cond)
}

// TestGracefulStop: a stop lets the call in flight (held in a queue)
// finish with its answer, then refuses new calls, and exits 0.
func TestGracefulStop(t *testing.T) {
	file := filepath.Join(t.TempDir(), "api.yaml")
	if err := os.WriteFile(file, []byte(`domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 1, queue: {size: 5, timeout: 5s}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	conn, op, _, stop := startBinary(t, "-config", file)
	rls := rlsv3.NewRateLimitServiceClient(conn)
	if got := call(t, rls, "a"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call = %v", got)
	}
	type answer struct {
		resp *rlsv3.RateLimitResponse
		err  error
	}
	held := make(chan answer, 1)
	go func() { // waits ~500ms in the queue for the next token
		resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "a"}},
		}}})
		held <- answer{resp, err}
	}()
	waitFor(t, func() bool { return strings.Contains(scrape(t, op), `decision="queued"`) })
	if code := stop(); code != 0 {
		t.Fatalf("exit status %d after a stop; want 0", code)
	}
	select {
	case a := <-held:
		if a.err != nil || a.resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call in flight = %v, %v; want OK", a.resp, a.err)
		}
	default:
		t.Fatal("the call in flight got no answer before the process stopped")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "a"}},
	}}}); err == nil {
		t.Fatal("a call after the stop was answered")
	}
}

// scrape returns the operator listener's metrics page.
func scrape(t *testing.T, op string) string {
	t.Helper()
	resp, err := http.Get("http://" + op + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
