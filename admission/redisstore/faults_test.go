package redisstore_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The store settings of the fault tests that also need answers from a
// healthy Redis (before the faults, and the probes after them): a timeout
// that a busy machine does not reach (a first call dials, and loads its
// script, within it), and a breaker's cooldown measured on a fake clock
// that moves only when the test says.
const (
	faultsTimeout  = 2 * time.Second
	faultsCooldown = 300 * time.Millisecond
)

type replica struct {
	mode  limits.FailMode
	ctl   *admission.Controller
	store *breakerRecorder
	ctlr  *recorder
	clock *admissiontest.Clock // the store's breaker's
}

// breakerRecorder is a recorder that also tells when the breaker opens.
type breakerRecorder struct {
	*recorder
	opened chan struct{} // receives when the breaker opens
}

func (r *breakerRecorder) BreakerChanged(store string, open bool) {
	r.recorder.BreakerChanged(store, open)
	if open {
		select {
		case r.opened <- struct{}{}:
		default:
		}
	}
}

func faultReplicas(t *testing.T, addr string) []*replica {
	var rs []*replica
	for _, mode := range []limits.FailMode{limits.FailOpenMode, limits.FailClosedMode, limits.FailLocalMode} {
		r := &replica{mode: mode, store: &breakerRecorder{recorder: &recorder{}, opened: make(chan struct{}, 1)}, ctlr: &recorder{},
			clock: admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
		// After PoolSize failed dials the client answers with the last
		// dial error until a background redial, once a second, succeeds:
		// a pool larger than the failed dials of a few round trips keeps
		// the probe after the restart on the network.
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 100})
		t.Cleanup(func() { client.Close() })
		st := newStore(t, client, redisstore.Config{
			Timeout: faultsTimeout, BreakerFailures: 3, BreakerCooldown: faultsCooldown, Name: "redis",
		}, redisstore.WithObserver(r.store), redisstore.WithClock(r.clock))
		p := admission.Policy{
			Name: "rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket,
			Limit: 100, Per: time.Hour, Store: "redis", OnStoreError: mode, Replicas: 4,
		}
		ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}},
			admission.WithStore("redis", st), admission.WithObserver(r.ctlr))
		if err != nil {
			t.Fatal(err)
		}
		r.ctl = ctl
		rs = append(rs, r)
	}
	return rs
}

// timedOut reports whether err is a call that its deadline ended.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// checkFailMode admits 40 requests while Redis is failing and checks each
// policy's fail mode, and that the breaker let exactly network failed
// calls reach Redis before it answered alone; when timeouts is set, each
// of those was ended by its deadline (Redis never answered: a decision
// that waited for it would not return).
func checkFailMode(t *testing.T, r *replica, what string, localLeft, network int, timeouts bool) {
	t.Helper()
	r.store.reset()
	var admitted, unavailable, limited int
	for i := 0; i < 40; i++ {
		tk, err := r.ctl.Admit(context.Background(), admission.Request{Tenant: "acme"})
		switch {
		case err == nil:
			admitted++
			tk.Done()
		case errors.Is(err, admission.ErrStoreUnavailable):
			unavailable++
		case errors.Is(err, admission.ErrRateLimited):
			limited++
		default:
			t.Errorf("%s, %s: Admit = %v", what, r.mode, err)
			return
		}
	}
	want := map[limits.FailMode][3]int{
		limits.FailOpenMode:   {40, 0, 0},
		limits.FailClosedMode: {0, 40, 0},
		// The local limiter holds 100/4 = 25 (the request admitted by
		// Redis before the failure is not counted there).
		limits.FailLocalMode: {localLeft, 0, 40 - localLeft},
	}[r.mode]
	if got := [3]int{admitted, unavailable, limited}; got != want {
		t.Errorf("%s, %s: admitted/unavailable/rate-limited = %v; want %v", what, r.mode, got, want)
	}
	r.ctlr.mu.Lock()
	events := len(r.ctlr.storeErr)
	r.ctlr.storeErr = nil
	r.ctlr.mu.Unlock()
	if events != 40 {
		t.Errorf("%s, %s: %d store error events; want 40", what, r.mode, events)
	}
	calls, br := r.store.snapshot()
	if len(br) == 0 || !br[len(br)-1] {
		t.Errorf("%s, %s: breaker changes %v; want it open", what, r.mode, br)
	}
	failed := 0
	for _, c := range calls {
		switch {
		case c.Err == nil:
			t.Errorf("%s, %s: a %s call succeeded while Redis was failing", what, r.mode, c.Op)
		case errors.Is(c.Err, redisstore.ErrBreakerOpen):
		case timeouts && !timedOut(c.Err):
			t.Errorf("%s, %s: a %s call failed with %v; want its deadline exceeded", what, r.mode, c.Op, c.Err)
		default:
			failed++
		}
	}
	if failed != network {
		t.Errorf("%s, %s: %d failed calls reached the network; want %d (then the breaker answers)", what, r.mode, failed, network)
	}
}

// checkRecovered checks that the breaker, opened by failures, keeps
// decisions off Redis until its cooldown has passed on its clock, not a
// nanosecond less, and that the probe it then lets through, answered,
// closes it: decisions are Redis's again.
func checkRecovered(t *testing.T, r *replica, what string) {
	t.Helper()
	decide := func() error {
		r.store.reset()
		tk, err := r.ctl.Admit(context.Background(), admission.Request{Tenant: "recovery"})
		if err == nil {
			tk.Done()
		}
		calls, _ := r.store.snapshot()
		for _, c := range calls {
			if c.Op == "acquire" {
				return c.Err
			}
		}
		t.Fatalf("%s, %s: a decision made no acquire call (calls %+v, Admit = %v)", what, r.mode, calls, err)
		return nil
	}
	r.clock.Advance(faultsCooldown - time.Nanosecond)
	if err := decide(); !errors.Is(err, redisstore.ErrBreakerOpen) {
		t.Errorf("%s, %s: decision 1ns before the breaker's cooldown has passed: %v; want refused by the open breaker", what, r.mode, err)
	}
	r.clock.Advance(time.Nanosecond)
	if err := decide(); err != nil {
		t.Errorf("%s, %s: decision once the breaker's cooldown has passed: %v; want Redis's answer", what, r.mode, err)
	}
	if _, br := r.store.snapshot(); len(br) == 0 || br[len(br)-1] {
		t.Errorf("%s, %s: breaker changes %v; want it closed", what, r.mode, br)
	}
	r.ctlr.mu.Lock()
	r.ctlr.storeErr = nil // the refused decision's
	r.ctlr.mu.Unlock()
	select {
	case <-r.store.opened: // it has closed since
	default:
	}
}

// TestFaults: a hung Redis, then one killed while the replicas are
// admitting, then restarted. Each replica's policy fails open, closed or
// to its local limiter as configured, for every decision; the breaker
// opens after three failed calls and answers alone until its cooldown has
// passed; every call to the hung Redis ends at its deadline; and once
// Redis answers again the first probe after the cooldown brings the
// decisions back to it. The breaker's cooldown runs on a fake clock, and
// nothing is timed on the wall clock: the hung Redis is paused for longer
// than the test could run, so a decision that waited for it would never
// return.
func TestFaults(t *testing.T) {
	srv := redistest.Start(t)
	rs := faultReplicas(t, srv.Addr)
	for _, r := range rs {
		if _, err := r.ctl.Admit(context.Background(), admission.Request{Tenant: "acme"}); err != nil {
			t.Fatalf("%s: Admit with Redis up: %v", r.mode, err)
		}
	}

	// A hung Redis: every call times out. The replicas are independent:
	// checked side by side, the test waits for three timeouts, not nine.
	if _, err := redistest.Do(srv.Addr, "CLIENT", "PAUSE", "3600000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(func() { checkFailMode(t, r, "paused", 25, 3, true) })
	}
	wg.Wait()
	if _, err := redistest.Do(srv.Addr, "CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		checkRecovered(t, r, "unpaused")
	}

	// A dead Redis: killed while the replicas are admitting, three callers
	// each; it is killed once each caller has had a decision, and the
	// callers stop once each replica's breaker has opened.
	stop := make(chan struct{})
	started := make(chan struct{}, 3*len(rs))
	for _, r := range rs {
		for range 3 {
			wg.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					tk, err := r.ctl.Admit(context.Background(), admission.Request{Tenant: "load"})
					if err == nil {
						tk.Done()
					} else if !errors.Is(err, admission.ErrStoreUnavailable) && !errors.Is(err, admission.ErrRateLimited) {
						t.Errorf("%s under load: Admit = %v", r.mode, err)
						return
					}
					if n == 0 {
						started <- struct{}{}
					}
				}
			})
		}
	}
	for range 3 * len(rs) {
		<-started
	}
	srv.Kill()
	for _, r := range rs {
		<-r.store.opened
	}
	close(stop)
	wg.Wait()
	for _, r := range rs {
		r.ctlr.mu.Lock()
		r.ctlr.storeErr = nil
		r.ctlr.mu.Unlock()
		// The cooldown passes: the first decision is a probe, refused by
		// the dead server, and the breaker answers the others. The local
		// limiter was spent during the pause above.
		r.clock.Advance(faultsCooldown)
		checkFailMode(t, r, "killed", 0, 1, false)
	}
	srv.Restart(t)
	for _, r := range rs {
		checkRecovered(t, r, "restarted")
	}
}

// TestCrashedReplicaLeases: a replica holding concurrency leases dies; the
// others get the permits back when the leases expire. The scripts take the
// controllers' instants (CallerTime), read on fake clocks, so the leases
// expire when the test says; the keys outlive the test in Redis.
func TestCrashedReplicaLeases(t *testing.T) {
	srv := redistest.Start(t)
	prefix := uniquePrefix()
	cfg := redisstore.Config{Prefix: prefix, Timeout: 10 * time.Second, CallerTime: true, IdleGrace: time.Hour}
	p := admission.Policy{Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 3,
		MaxHold: 700 * time.Millisecond, Store: "redis"}

	crashed := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	// The crashed replica's clock never moves: its timers (lease renewals)
	// never fire, as a dead process's do not.
	ctlA, err := admission.New(admission.Config{Policies: []admission.Policy{p}},
		admission.WithStore("redis", newStore(t, crashed, cfg)), admission.WithClock(admissiontest.NewClock(backendtest.Epoch)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := ctlA.Admit(context.Background(), admission.Request{Tenant: "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	crashed.Close() // the replica dies with its tickets unsettled

	rec := &recorder{}
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctlB, err := admission.New(admission.Config{Policies: []admission.Policy{p}},
		admission.WithStore("redis", newStore(t, newClient(t, srv.Addr), cfg)), admission.WithObserver(rec), admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctlB.Admit(context.Background(), admission.Request{Tenant: "acme"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("Admit while the crashed replica's leases are live = %v; want ErrConcurrencyLimited", err)
	}
	clock.Advance(p.MaxHold - time.Millisecond)
	if _, err := ctlB.Admit(context.Background(), admission.Request{Tenant: "acme"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("Admit 1ms before the crashed replica's leases expire = %v; want ErrConcurrencyLimited", err)
	}
	clock.Advance(time.Millisecond)
	for i := 0; i < 3; i++ {
		tk, err := ctlB.Admit(context.Background(), admission.Request{Tenant: "acme"})
		if err != nil {
			t.Fatalf("Admit %d once the leases expired: %v", i, err)
		}
		defer tk.Done()
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.expired != 3 {
		t.Errorf("LeaseExpired reported %d leases; want 3", rec.expired)
	}
}

// TestSettleFailureReported: a settlement that fails (no request waits for
// it) is reported to the controller's observer under its policy. Redis is
// paused for longer than the test could run, so Settle returns only by
// the store's deadline.
func TestSettleFailureReported(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Timeout: faultsTimeout, Name: "shared"}, redisstore.WithObserver(rec))
	p := admission.Policy{Name: "tpm", Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Minute,
		Store: "shared", OnStoreError: limits.FailClosedMode}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}}, admission.WithStore("shared", st), admission.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: "acme", Tokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr, "CLIENT", "PAUSE", "3600000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	rec.reset()
	tk.Settle(admission.Usage{Tokens: 60})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 1 || rec.calls[0].Op != "settle" || !timedOut(rec.calls[0].Err) {
		t.Errorf("calls = %+v; want one settle call ended by its deadline", rec.calls)
	}
	if len(rec.storeErr) != 1 || rec.storeErr[0].Policy != "tpm" || rec.storeErr[0].Store != "shared" || rec.storeErr[0].Action != limits.FailClosedMode {
		t.Errorf("store error events = %+v; want one for policy tpm on store shared", rec.storeErr)
	}
}
