package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/redistest"
)

// decisionFixture is a store whose client holds the first maxSending lone
// decisions, and a token bucket of 10 per hour; its calls time out after
// timeout.
type decisionFixture struct {
	st   *Store
	hold *holdFirstSettle
	lim  backend.Limiter
	base limits.Limit
}

func newDecisionFixture(t *testing.T, addr string, timeout time.Duration) *decisionFixture {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	st, err := New(client, Config{Prefix: fmt.Sprintf("d%d:", time.Now().UnixNano()), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	p := admission.Policy{Name: "rpm", Algorithm: limits.TokenBucket, Limit: 10, Per: time.Hour}
	f := &decisionFixture{st: st, base: p.Base()}
	f.lim, _ = st.Limiter(&p)
	f.hold = newHoldFirstSettle()
	f.hold.match = isAcquireCall
	client.AddHook(f.hold)
	return f
}

type decision struct {
	tenant string
	g      backend.Grant
	err    error
	took   time.Duration
}

// decideHeld makes one decision per tenant: the first maxSending are held
// by the client, the others queue behind them; ctxs, when set, gives a
// tenant's context. It returns once the others are queued; the decisions
// arrive on the channel once the hold is released.
func (f *decisionFixture) decideHeld(t *testing.T, tenants []string, ctxs map[string]context.Context) <-chan decision {
	t.Helper()
	out := make(chan decision, len(tenants))
	decide := func(tenant string) {
		ctx := ctxs[tenant]
		if ctx == nil {
			ctx = context.Background()
		}
		d := decision{tenant: tenant}
		start := time.Now()
		d.err = f.lim.Acquire(ctx, tenant, &f.base, 1, time.Now(), &d.g)
		d.took = time.Since(start)
		out <- d
	}
	for _, tn := range tenants[:maxSending] {
		go decide(tn)
	}
	<-f.hold.inside
	for _, tn := range tenants[maxSending:] {
		go decide(tn)
	}
	eventuallyQueued(t, f.st, len(tenants)-maxSending)
	return out
}

// collect returns the n decisions of out by tenant.
func collect(t *testing.T, out <-chan decision, n int) map[string]decision {
	t.Helper()
	got := map[string]decision{}
	for range n {
		d := <-out
		got[d.tenant] = d
	}
	return got
}

// remaining checks tenant's bucket has want permits left (a probe of 0).
func (f *decisionFixture) remaining(t *testing.T, tenant string, want int64) {
	t.Helper()
	var g backend.Grant
	if err := f.lim.Acquire(context.Background(), tenant, &f.base, 0, time.Now(), &g); err != nil || g.Remaining != want {
		t.Errorf("%s: %d left, %v; want %d", tenant, g.Remaining, err, want)
	}
}

func tenantsN(n int) []string {
	ts := make([]string, n)
	for i := range ts {
		ts[i] = fmt.Sprintf("tenant-%d", i)
	}
	return ts
}

// TestDecisionsShareRoundTrips holds the decisions on their way to Redis
// while ten others arrive: the ten go out in one pipeline, each its own
// script call, exact and applied once; one failing (a script error, its
// deadline, a server without the scripts) fails alone.
func TestDecisionsShareRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	tenants := tenantsN(10 + maxSending)
	queued := tenants[maxSending:]

	t.Run("one_pipeline", func(t *testing.T) {
		f := newDecisionFixture(t, srv.Addr, healthyTimeout)
		out := f.decideHeld(t, tenants, nil)
		close(f.hold.release)
		for tn, d := range collect(t, out, len(tenants)) {
			if d.err != nil || !d.g.OK || d.g.Taken != 1 || d.g.Remaining != 9 || d.g.Limit != 10 {
				t.Errorf("%s: %+v, %v; want admitted with 9 left of 10", tn, d.g, d.err)
			}
			f.remaining(t, tn, 9)
		}
		if len(f.hold.sizes) != 1 || f.hold.sizes[0] != len(queued) {
			t.Errorf("pipelines %v; want the %d queued decisions in one", f.hold.sizes, len(queued))
		}
	})

	t.Run("script_error", func(t *testing.T) {
		// A key of the wrong type makes one script call fail in Redis.
		f := newDecisionFixture(t, srv.Addr, healthyTimeout)
		bad := queued[3]
		var key [128]byte
		if _, err := redistest.Do(srv.Addr, "HSET", string(f.lim.(*limiter).appendKey(key[:0], bad)), "x", "1"); err != nil {
			t.Fatal(err)
		}
		out := f.decideHeld(t, tenants, nil)
		close(f.hold.release)
		for tn, d := range collect(t, out, len(tenants)) {
			if tn == bad {
				if d.err == nil || !strings.Contains(d.err.Error(), "WRONGTYPE") {
					t.Errorf("%s (a hash): %v; want its WRONGTYPE error", tn, d.err)
				}
				continue
			}
			if d.err != nil || !d.g.OK || d.g.Remaining != 9 {
				t.Errorf("%s, beside a failing decision: %+v, %v; want admitted with 9 left", tn, d.g, d.err)
			}
		}
		if len(f.hold.sizes) != 1 || f.hold.sizes[0] != len(queued) {
			t.Errorf("pipelines %v; want the %d queued decisions in one", f.hold.sizes, len(queued))
		}
	})

	t.Run("deadline", func(t *testing.T) {
		// The pipeline is held past one decision's deadline: that one
		// returns at its deadline, the others when the pipeline does.
		f := newDecisionFixture(t, srv.Addr, healthyTimeout)
		late := queued[5]
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		pipelineHeld := make(chan struct{})
		f.hold.beforePipeline = func() { <-pipelineHeld }
		out := f.decideHeld(t, tenants, map[string]context.Context{late: ctx})
		close(f.hold.release)
		d := <-out
		for d.tenant != late {
			// the held ones return first
			if d.err != nil || !d.g.OK {
				t.Errorf("%s: %+v, %v", d.tenant, d.g, d.err)
			}
			d = <-out
		}
		// It returned while the pipeline is held: by its deadline.
		if !errors.Is(d.err, context.DeadlineExceeded) {
			t.Errorf("%s: %v after %v; want its deadline exceeded at 300ms", late, d.err, d.took)
		}
		close(pipelineHeld)
		for tn, d := range collect(t, out, len(queued)-1) {
			if d.err != nil || !d.g.OK || d.g.Remaining != 9 {
				t.Errorf("%s, beside a decision past its deadline: %+v, %v; want admitted with 9 left", tn, d.g, d.err)
			}
		}
	})

	t.Run("deadline_while_queued", func(t *testing.T) {
		// The decisions on their way are held past a queued one's
		// deadline: it returns at its deadline, not when they do, and is
		// never sent.
		f := newDecisionFixture(t, srv.Addr, healthyTimeout)
		late := queued[5]
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		out := f.decideHeld(t, tenants, map[string]context.Context{late: ctx})
		// The others are held until the release below: the first
		// decision to return is the late one's, by its deadline.
		if d := <-out; d.tenant != late || !errors.Is(d.err, context.DeadlineExceeded) {
			t.Errorf("%s: %v after %v; want %s's deadline exceeded at 300ms", d.tenant, d.err, d.took, late)
		}
		close(f.hold.release)
		for tn, d := range collect(t, out, len(tenants)-1) {
			if d.err != nil || !d.g.OK || d.g.Remaining != 9 {
				t.Errorf("%s, beside a decision that gave up queued: %+v, %v; want admitted with 9 left", tn, d.g, d.err)
			}
		}
		f.remaining(t, late, 10)
		if len(f.hold.sizes) != 1 || f.hold.sizes[0] != len(queued)-1 {
			t.Errorf("pipelines %v; want the %d decisions still queued in one", f.hold.sizes, len(queued)-1)
		}
	})

	t.Run("timeout_while_queued", func(t *testing.T) {
		// The store's Timeout, not the callers' contexts, bounds the
		// decisions: those queued behind the held ones return when it
		// passes, every one, and none is sent.
		f := newDecisionFixture(t, srv.Addr, 300*time.Millisecond)
		out := f.decideHeld(t, tenants, nil)
		// The held ones are held until the release below: the queued
		// ones return first, by the store's timeout.
		for range queued {
			if d := <-out; !errors.Is(d.err, context.DeadlineExceeded) || d.took < 300*time.Millisecond {
				t.Errorf("%s: %v after %v; want the store's timeout at 300ms", d.tenant, d.err, d.took)
			}
		}
		close(f.hold.release)
		collect(t, out, maxSending) // the held ones, past their deadline
		// The timeouts opened the breaker: Redis itself says no queued
		// decision took anything.
		var key [128]byte
		for _, tn := range queued {
			if n, err := redistest.Do(srv.Addr, "EXISTS", string(f.lim.(*limiter).appendKey(key[:0], tn))); err != nil || n != "0" {
				t.Errorf("%s: its bucket exists (%q, %v); want none: the decision was never sent", tn, n, err)
			}
		}
		if len(f.hold.sizes) != 0 {
			t.Errorf("pipelines %v; want none: every queued decision gave up", f.hold.sizes)
		}
	})

	t.Run("scripts_flushed", func(t *testing.T) {
		f := newDecisionFixture(t, srv.Addr, healthyTimeout)
		f.hold.beforePipeline = func() {
			for f.hold.settled.Load() < maxSending {
				time.Sleep(time.Millisecond)
			}
			if r, err := redistest.Do(srv.Addr, "SCRIPT", "FLUSH"); err != nil || !strings.EqualFold(r, "OK") {
				t.Errorf("SCRIPT FLUSH = %q, %v", r, err)
			}
		}
		out := f.decideHeld(t, tenants, nil)
		close(f.hold.release)
		for tn, d := range collect(t, out, len(tenants)) {
			if d.err != nil || !d.g.OK || d.g.Remaining != 9 {
				t.Errorf("%s: %+v, %v; want admitted with 9 left", tn, d.g, d.err)
			}
			f.remaining(t, tn, 9)
		}
		n := len(queued)
		if len(f.hold.sizes) != 2 || f.hold.sizes[0] != n || f.hold.sizes[1] != n {
			t.Errorf("pipelines %v; want the %d queued decisions in one, and in one more sent again with their script", f.hold.sizes, n)
		}
	})
}

// healthyTimeout is the store timeout of the fixtures whose decisions must
// all be answered: one that a loaded machine does not reach while the
// test holds calls on their way.
const healthyTimeout = time.Minute
