package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// releaseRecorder records the outcomes of retried releases besides the
// rest.
type releaseRecorder struct {
	recorder
	outcomes []string
}

func (r *releaseRecorder) ReleaseRetry(_, outcome string) {
	r.mu.Lock()
	r.outcomes = append(r.outcomes, outcome)
	r.mu.Unlock()
}

// pending returns the number of releases waiting to be retried, and the
// store errors.
func (r *releaseRecorder) pending() (n, storeErrors int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.outcomes {
		if o == "retrying" {
			n++
		} else {
			n--
		}
	}
	return n, len(r.storeErr)
}

// pausedTimeout is the store timeout of the tests that pause Redis's
// writes: the calls Redis holds fail at it whatever its length, and the
// others, which must land, never reach it on a loaded machine.
const pausedTimeout = time.Second

// pauseWrites makes the Redis at addr hold every script (each writes),
// so the store's calls time out whatever the machine's speed, until the
// returned function resumes it. That waits first until Redis has dropped
// the calls whose clients gave up (none of them then lands later).
func pauseWrites(t *testing.T, addr string) (resume func()) {
	t.Helper()
	if _, err := redistest.Do(addr, "CLIENT", "PAUSE", "3600000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		poll.Until(t, time.Second, "Redis to drop the calls that timed out", func() bool {
			info, err := redistest.Do(addr, "INFO", "clients")
			return err == nil && strings.Contains(info, "blocked_clients:0\r\n")
		})
		if _, err := redistest.Do(addr, "CLIENT", "UNPAUSE"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReleaseRetriedAfterPause: two requests under a global cap of 2 end
// while Redis holds their scripts (CLIENT PAUSE WRITE), so their releases
// time out.
// The permits stay held, and shown in flight, while the releases cannot
// land; once Redis answers again, the controller's retry (100ms after the
// failure, on the fake clock) releases them: a third request is admitted
// then, not a lease later. Before, a lost release held its permit until
// the lease expired (10 minutes by default), in flight read 0 all along.
func TestReleaseRetriedAfterPause(t *testing.T) {
	srv := redistest.Start(t)
	rec := &releaseRecorder{}
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Timeout: pausedTimeout, Name: "redis"})
	p := admission.Policy{Name: "global", Algorithm: limits.Concurrency, Limit: 2, Store: "redis"}
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}},
		admission.WithStore("redis", st), admission.WithClock(clock), admission.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ctx := context.Background()
	inflight := func() int64 { return ctl.Stats()[0].InFlight }
	var slow [2]admission.Ticket
	for i := range slow {
		if slow[i], err = ctl.Admit(ctx, admission.Request{Tenant: "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := inflight(); n != 2 {
		t.Errorf("in flight with two requests running = %d; want 2", n)
	}
	resume := pauseWrites(t, srv.Addr)
	for i := range slow {
		slow[i].Done()
	}
	resume()
	if n, failed := rec.pending(); n != 2 || failed != 2 {
		t.Fatalf("releases during the pause: %d pending, %d store errors; want 2 and 2", n, failed)
	}
	if n := inflight(); n != 2 {
		t.Errorf("in flight while the releases have not landed = %d; want 2", n)
	}
	// Redis answers again, but the lost releases did not reach it.
	if _, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "other"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("TryAdmit before the retry = %v; want ErrConcurrencyLimited (the releases were lost)", err)
	}
	clock.Advance(100 * time.Millisecond)
	if n, _ := rec.pending(); n != 0 {
		t.Errorf("pending releases after the retry = %d; want 0", n)
	}
	if n := inflight(); n != 0 {
		t.Errorf("in flight after the retry = %d; want 0", n)
	}
	for i := range 2 {
		tk, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "other"})
		if err != nil {
			t.Fatalf("TryAdmit %d after the retry = %v; want admitted", i, err)
		}
		defer tk.Done()
	}
	if n := inflight(); n != 2 {
		t.Errorf("in flight with the two new requests = %d; want 2", n)
	}
}

// TestReleaseAbandonedAtExpiry: a release that cannot land before its
// lease expires is abandoned; the in-flight figure counts the permit
// until its lease would have expired and then no more (it does not drift
// up with every lost release), and Redis has reclaimed the permit.
func TestReleaseAbandonedAtExpiry(t *testing.T) {
	srv := redistest.Start(t)
	rec := &releaseRecorder{}
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Timeout: pausedTimeout, Name: "redis"})
	const hold = 300 * time.Millisecond
	p := admission.Policy{Name: "global", Algorithm: limits.Concurrency, Limit: 1, MaxHold: hold, Store: "redis"}
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}},
		admission.WithStore("redis", st), admission.WithClock(clock), admission.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ctx := context.Background()
	tk, err := ctl.Admit(ctx, admission.Request{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	resume := pauseWrites(t, srv.Addr)
	tk.Done()
	failed := time.Now()
	if n := ctl.Stats()[0].InFlight; n != 1 {
		t.Errorf("in flight while the release has not landed = %d; want 1", n)
	}
	clock.Advance(hold) // one more failed attempt at 100ms, then the lease's expiry
	resume()
	rec.mu.Lock()
	outcomes := strings.Join(rec.outcomes, " ")
	rec.mu.Unlock()
	if outcomes != "retrying abandoned" {
		t.Errorf("release outcomes = %q; want retrying abandoned", outcomes)
	}
	// Redis reclaims the lease on its own clock: the test waits for that
	// (the machine's clock, which Redis on loopback reads too).
	time.Sleep(time.Until(failed.Add(hold)))
	if n := ctl.Stats()[0].InFlight; n != 0 {
		t.Errorf("in flight once the lease would have expired = %d; want 0", n)
	}
	tk, err = ctl.TryAdmit(ctx, admission.Request{Tenant: "other"})
	if err != nil {
		t.Fatalf("TryAdmit once the lease expired = %v; want admitted", err)
	}
	tk.Done()
	if n := ctl.Stats()[0].InFlight; n != 0 {
		t.Errorf("in flight after the next request = %d; want 0", n)
	}
}
