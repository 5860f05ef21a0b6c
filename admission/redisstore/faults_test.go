package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

const (
	faultTimeout  = 50 * time.Millisecond
	faultCooldown = 300 * time.Millisecond
	// latencySlack is what a decision may take beyond the timeout on a
	// loaded 2-core machine under the race detector.
	latencySlack = 150 * time.Millisecond
)

type replica struct {
	mode  limits.FailMode
	ctl   *admission.Controller
	store *recorder
	ctlr  *recorder
}

func faultReplicas(t *testing.T, addr string) []*replica {
	var rs []*replica
	for _, mode := range []limits.FailMode{limits.FailOpenMode, limits.FailClosedMode, limits.FailLocalMode} {
		r := &replica{mode: mode, store: &recorder{}, ctlr: &recorder{}}
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { client.Close() })
		st := newStore(t, client, redisstore.Config{
			Timeout: faultTimeout, BreakerFailures: 3, BreakerCooldown: faultCooldown, Name: "redis",
		}, redisstore.WithObserver(r.store))
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

// checkFailMode admits 40 requests while Redis is failing and checks each
// policy's fail mode and the decisions' latency.
func checkFailMode(t *testing.T, r *replica, what string, localLeft int) {
	t.Helper()
	var admitted, unavailable, limited int
	var slowest time.Duration
	for i := 0; i < 40; i++ {
		start := time.Now()
		tk, err := r.ctl.Admit(context.Background(), admission.Request{Tenant: "acme"})
		if d := time.Since(start); d > slowest {
			slowest = d
		}
		switch {
		case err == nil:
			admitted++
			tk.Done()
		case errors.Is(err, admission.ErrStoreUnavailable):
			unavailable++
		case errors.Is(err, admission.ErrRateLimited):
			limited++
		default:
			t.Fatalf("%s, %s: Admit = %v", what, r.mode, err)
		}
	}
	if slowest > faultTimeout+latencySlack {
		t.Errorf("%s, %s: slowest decision %v; want at most the timeout %v (+%v)", what, r.mode, slowest, faultTimeout, latencySlack)
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
	_, br := r.store.snapshot()
	if len(br) == 0 || !br[len(br)-1] {
		t.Errorf("%s, %s: breaker changes %v; want it open", what, r.mode, br)
	}
	calls, _ := r.store.snapshot()
	network := 0
	for _, c := range calls {
		if c.Err != nil && !errors.Is(c.Err, redisstore.ErrBreakerOpen) {
			network++
		}
	}
	if network > 3 {
		t.Errorf("%s, %s: %d failed calls reached the network; want at most 3 (then the breaker answers)", what, r.mode, network)
	}
}

func TestFaults(t *testing.T) {
	srv := redistest.Start(t)
	rs := faultReplicas(t, srv.Addr)
	for _, r := range rs {
		if _, err := r.ctl.Admit(context.Background(), admission.Request{Tenant: "acme"}); err != nil {
			t.Fatalf("%s: Admit with Redis up: %v", r.mode, err)
		}
		r.store.reset()
	}

	// A hung Redis: every call times out.
	if _, err := redistest.Do(srv.Addr, "CLIENT", "PAUSE", "1500", "ALL"); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		checkFailMode(t, r, "paused", 25)
	}
	if _, err := redistest.Do(srv.Addr, "CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		waitRecovered(t, r, "unpaused", time.Now())
	}

	// A dead Redis: killed while the replicas are admitting.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	slowest := make([]time.Duration, len(rs))
	for i, r := range rs {
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < 2000; n++ {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					tk, err := r.ctl.Admit(context.Background(), admission.Request{Tenant: "load"})
					d := time.Since(start)
					if err == nil {
						tk.Done()
					} else if !errors.Is(err, admission.ErrStoreUnavailable) && !errors.Is(err, admission.ErrRateLimited) {
						t.Errorf("%s under load: Admit = %v", r.mode, err)
						return
					}
					r.ctlr.mu.Lock()
					slowest[i] = max(slowest[i], d)
					r.ctlr.mu.Unlock()
				}
			}()
		}
	}
	late := watchTimers(stop)
	time.Sleep(100 * time.Millisecond)
	srv.Kill()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	starved := <-late
	for i, r := range rs {
		t.Logf("%s: slowest decision while Redis was killed under load: %v (timers up to %v late)", r.mode, slowest[i], starved)
		// Three callers per replica: a call queued behind the three on
		// their way has the timeout to be sent, then the timeout for its
		// answer.
		if slowest[i] > 2*faultTimeout+latencySlack {
			t.Errorf("%s: slowest decision while Redis was killed under load: %v; want at most twice the timeout %v (+%v) (meanwhile this process's timers fired up to %v late)",
				r.mode, slowest[i], faultTimeout, latencySlack, starved)
		}
		r.ctlr.mu.Lock()
		r.ctlr.storeErr = nil
		r.ctlr.mu.Unlock()
	}
	for _, r := range rs {
		r.store.reset() // the breaker opened during the load above
	}
	for _, r := range rs {
		// The local limiter was spent during the pause above.
		checkFailMode(t, r, "killed", 0)
	}
	srv.Restart(t)
	restarted := time.Now()
	for _, r := range rs {
		waitRecovered(t, r, "restarted", restarted)
	}
}

// watchTimers sleeps 1ms at a time until stop is closed and then sends
// how much later than asked the latest wake-up was: what the machine's
// load alone adds to any deadline in this process, for the failure
// messages.
func watchTimers(stop <-chan struct{}) <-chan time.Duration {
	late := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		for {
			select {
			case <-stop:
				late <- worst
				return
			default:
			}
			start := time.Now()
			time.Sleep(time.Millisecond)
			worst = max(worst, time.Since(start)-time.Millisecond)
		}
	}()
	return late
}

// waitRecovered admits until a decision is made by Redis again and checks
// that happened within the breaker's cooldown (plus slack).
func waitRecovered(t *testing.T, r *replica, what string, since time.Time) {
	t.Helper()
	r.store.reset()
	deadline := since.Add(faultCooldown + time.Second)
	for time.Now().Before(deadline) {
		tk, _ := r.ctl.Admit(context.Background(), admission.Request{Tenant: "recovery"})
		tk.Done()
		calls, _ := r.store.snapshot()
		if len(calls) > 0 && calls[len(calls)-1].Err == nil {
			if d := time.Since(since); d > faultCooldown+latencySlack+faultTimeout {
				t.Errorf("%s, %s: back on Redis after %v; want within the breaker cooldown %v", what, r.mode, d, faultCooldown)
			}
			_, br := r.store.snapshot()
			if len(br) == 0 || br[len(br)-1] {
				t.Errorf("%s, %s: breaker changes %v; want it closed", what, r.mode, br)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s, %s: decisions did not return to Redis within %v", what, r.mode, faultCooldown+time.Second)
}

// TestCrashedReplicaLeases: a replica holding concurrency leases dies; the
// others get the permits back when the leases expire.
func TestCrashedReplicaLeases(t *testing.T) {
	srv := redistest.Start(t)
	prefix := uniquePrefix()
	p := admission.Policy{Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 3, MaxHold: 700 * time.Millisecond}

	crashed := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	ctlA := newController(t, newStore(t, crashed, redisstore.Config{Prefix: prefix, Timeout: time.Second}), p)
	for i := 0; i < 3; i++ {
		if _, err := ctlA.Admit(context.Background(), admission.Request{Tenant: "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	crashed.Close() // the replica dies with its tickets unsettled
	held := time.Now()

	rec := &recorder{}
	stB := newStore(t, newClient(t, srv.Addr), redisstore.Config{Prefix: prefix, Timeout: time.Second})
	p.Store = "redis"
	ctlB, err := admission.New(admission.Config{Policies: []admission.Policy{p}}, admission.WithStore("redis", stB), admission.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctlB.Admit(context.Background(), admission.Request{Tenant: "acme"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("Admit while the crashed replica's leases are live = %v; want ErrConcurrencyLimited", err)
	}
	time.Sleep(time.Until(held.Add(p.MaxHold + 50*time.Millisecond)))
	for i := 0; i < 3; i++ {
		tk, err := ctlB.Admit(context.Background(), admission.Request{Tenant: "acme"})
		if err != nil {
			t.Fatalf("Admit %d after the leases expired: %v", i, err)
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
// it) is reported to the controller's observer under its policy.
func TestSettleFailureReported(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Timeout: faultTimeout, Name: "shared"})
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
	if _, err := redistest.Do(srv.Addr, "CLIENT", "PAUSE", "500", "ALL"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tk.Settle(admission.Usage{Tokens: 60})
	if d := time.Since(start); d > faultTimeout+latencySlack {
		t.Fatalf("Settle against a hung Redis took %v; want at most %v", d, faultTimeout+latencySlack)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.storeErr) != 1 || rec.storeErr[0].Policy != "tpm" || rec.storeErr[0].Store != "shared" || rec.storeErr[0].Action != limits.FailClosedMode {
		t.Errorf("store error events = %+v; want one for policy tpm on store shared", rec.storeErr)
	}
}
