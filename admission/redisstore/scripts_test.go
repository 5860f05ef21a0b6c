package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// flushScripts is a client hook that empties the server's script cache
// (SCRIPT FLUSH) before every script call: each call then meets a server
// that does not have its script, as after a restart, a flush or on a
// Cluster node that never ran it. It counts the NOSCRIPT replies and the
// EVALs that followed them.
type flushScripts struct {
	t                 testing.TB
	addrs             []string // the servers, all flushed
	noscript, reloads atomic.Int64
}

func (h *flushScripts) flush() {
	for _, a := range h.addrs {
		if r, err := redistest.Do(a, "SCRIPT", "FLUSH"); err != nil || !strings.EqualFold(r, "OK") {
			h.t.Errorf("SCRIPT FLUSH on %s = %q, %v", a, r, err)
		}
	}
}

func (h *flushScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *flushScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			h.flush()
		}
		err := next(ctx, cmd)
		switch {
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			h.noscript.Add(1)
		case cmd.Name() == "eval" && err == nil:
			h.reloads.Add(1)
		}
		return err
	}
}

// ProcessPipelineHook leaves pipelines alone: TestQueuedSettlesScriptsFlushed
// flushes the scripts before a pipeline of settlements.
func (h *flushScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// check fails t unless calls met NOSCRIPT and each was answered by one
// EVAL that loaded the script.
func (h *flushScripts) check(t *testing.T) {
	t.Helper()
	n, r := h.noscript.Load(), h.reloads.Load()
	t.Logf("%d calls met NOSCRIPT, %d EVALs reloaded their scripts", n, r)
	if n == 0 || r != n {
		t.Errorf("NOSCRIPT replies %d, reloading EVALs %d; want as many, at least one", n, r)
	}
}

// TestScriptsFlushed runs the conformance tables (every algorithm's
// acquire, adjustment, release and renewal) on a server whose script cache
// is emptied before every call: each call loads its script and the figures
// are the tables'.
func TestScriptsFlushed(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	h := &flushScripts{t: t, addrs: []string{srv.Addr}}
	client.AddHook(h)
	backendtest.RunCases(t, callerTimeStores(client))
	h.check(t)
}

// TestScriptsFlushedBatches makes batched acquisitions and settlements of
// every algorithm with a token bucket and a concurrency limit, and of the
// last two alone, on a server whose script cache is emptied before every
// call, and on one that keeps it: the figures are the same.
func TestScriptsFlushedBatches(t *testing.T) {
	srv := redistest.Start(t)
	flushed, kept := newClient(t, srv.Addr), newClient(t, srv.Addr)
	h := &flushScripts{t: t, addrs: []string{srv.Addr}}
	flushed.AddHook(h)
	tenant := []limits.KeyPart{limits.KeyTenant}
	policy := func(name string, alg limits.Algorithm) admission.Policy {
		return admission.Policy{Name: name, Key: tenant, Algorithm: alg, Limit: 10, Per: time.Minute, Period: limits.PeriodFixed, MaxHold: time.Minute}
	}
	tb, cc := policy("tb", limits.TokenBucket), policy("cc", limits.Concurrency)
	batches := [][]admission.Policy{{tb, cc}}
	for _, alg := range []limits.Algorithm{limits.FixedWindow, limits.SlidingWindow, limits.SlidingLog, limits.Quota} {
		batches = append(batches, []admission.Policy{policy("p", alg), tb, cc})
	}
	run := func(t *testing.T, client redis.UniversalClient, policies []admission.Policy) string {
		st := callerTimeStores(client)(t).(*redisstore.Store)
		ops := make([]backend.Op, len(policies))
		for i := range policies {
			l, err := st.Limiter(&policies[i])
			if err != nil {
				t.Fatal(err)
			}
			ops[i] = backend.Op{Limiter: l, Key: "tenant", Limit: policies[i].Base(), N: 3}
		}
		var out []string
		ctx := context.Background()
		for step := 0; step < 3; step++ {
			now := backendtest.Epoch.Add(time.Duration(step) * time.Second)
			if err := st.AcquireBatch(ctx, ops, now); err != nil {
				t.Fatalf("step %d: AcquireBatch: %v", step, err)
			}
			for i := range ops {
				g := ops[i].Grant
				out = append(out, fmt.Sprintf("%s ok=%v taken=%d remaining=%d reset=%v retry=%v", policies[i].Name, g.OK, g.Taken, g.Remaining, g.Reset, g.RetryAfter))
				if !g.OK {
					t.Fatalf("step %d: %s refused: %+v", step, policies[i].Name, g)
				}
			}
			for i := range ops {
				if policies[i].Algorithm == limits.Concurrency {
					ops[i].Release = true
				} else {
					ops[i].N = -1
				}
			}
			if err := st.SettleBatch(ctx, ops, now.Add(time.Millisecond)); err != nil {
				t.Fatalf("step %d: SettleBatch: %v", step, err)
			}
			for i := range ops {
				out = append(out, fmt.Sprintf("%s settled remaining=%d", policies[i].Name, ops[i].Grant.Remaining))
				ops[i].N, ops[i].Release = 3, false
			}
		}
		return strings.Join(out, "\n")
	}
	for _, policies := range batches {
		t.Run(policies[0].Algorithm.String(), func(t *testing.T) {
			if got, want := run(t, flushed, policies), run(t, kept, policies); got != want {
				t.Errorf("with the script cache flushed before every call:\n%s\nwant, as with it kept:\n%s", got, want)
			}
		})
	}
	h.check(t)
}
