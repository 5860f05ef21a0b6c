package admission_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// flakyReleases is a renewing limiter whose releases fail while err is
// set.
type flakyReleases struct {
	*renewCounter
	releases int // calls that reached the store
}

func (l *flakyReleases) Release(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, now time.Time) error {
	l.mu.Lock()
	err := l.err
	l.releases++
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.Limiter.Release(ctx, key, lim, g, now)
}

// Stats and OnEvict let the in-memory limiter's figures through.
func (l *flakyReleases) Stats(lim *limits.Limit, now time.Time) backend.Stats {
	return l.Limiter.(backend.Inspector).Stats(lim, now)
}

func (l *flakyReleases) OnEvict(f func(partitions, leases int)) {
	l.Limiter.(backend.Inspector).OnEvict(f)
}

// setErr makes the store's releases (and renewals) fail with err, or
// succeed again when nil.
func (l *flakyReleases) setErr(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

// retryRecorder records store errors and the outcomes of retried
// releases.
type retryRecorder struct {
	storeErrors
	outcomes []string
}

func (r *retryRecorder) ReleaseRetry(policy, outcome string) {
	r.mu.Lock()
	r.outcomes = append(r.outcomes, policy+":"+outcome)
	r.mu.Unlock()
}

// pending is the number of releases queued to be retried.
func (r *retryRecorder) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.outcomes {
		if strings.HasSuffix(o, ":retrying") {
			n++
		} else {
			n--
		}
	}
	return n
}

func (r *retryRecorder) snapshot() (errs int, outcomes string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs), strings.Join(r.outcomes, " ")
}

// keeperController is a controller on a fake clock whose concurrency
// policy (limit cap, MaxHold 9s) is on a store that counts renewals and
// fails releases on demand.
func keeperController(t *testing.T, limit int64, obs admission.Observer, opts ...admission.Option) (*admission.Controller, *admissiontest.Clock, *flakyReleases) {
	t.Helper()
	clock := admissiontest.NewClock(backendtest.Epoch)
	var lim *flakyReleases
	st := wrapStore{func(l backend.Limiter) backend.Limiter {
		lim = &flakyReleases{renewCounter: &renewCounter{Limiter: l}}
		return lim
	}}
	p := admission.Policy{Name: "inflight", Algorithm: limits.Concurrency, Limit: limit, MaxHold: 9 * time.Second, Store: "flaky"}
	opts = append([]admission.Option{admission.WithClock(clock), admission.WithObserver(obs), admission.WithStore("flaky", st)}, opts...)
	c, err := admission.New(admission.Config{Policies: []admission.Policy{p}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, clock, lim
}

// TestLeaseKeeper: live tickets keep their permits for as long as they
// are not settled, whatever their callers do (here: nothing, as a stream
// whose client stopped reading), renewed by the controller every third
// of MaxHold; settled, their permits return at once, and the keeper's
// timer stops once no lease is held.
func TestLeaseKeeper(t *testing.T) {
	c, clock, lim := keeperController(t, 2, &storeErrors{})
	ctx := context.Background()
	a, err := c.Admit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Admit(ctx, admission.Request{Tenant: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for at := time.Second; at <= 60*time.Second; at += time.Second {
		clock.Set(backendtest.Epoch.Add(at))
		if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "c"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
			t.Fatalf("TryAdmit at %v beside two live tickets under a cap of 2 = %v; want ErrConcurrencyLimited", at, err)
		}
		if s := c.Stats()[0]; s.InFlight != 2 {
			t.Fatalf("in flight at %v = %d; want 2", at, s.InFlight)
		}
	}
	// Runs every 3s (MaxHold/3), each renewing both leases.
	if n := lim.count(); n != 2*20 {
		t.Errorf("renewals over 60s = %d; want %d (both leases every third of MaxHold)", n, 2*20)
	}
	if err := a.Renew(); err != nil {
		t.Errorf("Renew of a kept ticket = %v; want nil", err)
	}
	a.Done()
	tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "c"})
	if err != nil {
		t.Fatalf("TryAdmit once a ticket is settled = %v; want admitted", err)
	}
	tk.Done()
	b.Done()
	clock.Advance(3 * time.Second) // the run that finds nothing held
	if n := clock.Pending(); n != 0 {
		t.Errorf("timers pending with no lease held = %d; want 0", n)
	}
	if s := c.Stats()[0]; s.InFlight != 0 {
		t.Errorf("in flight after every settlement = %d; want 0", s.InFlight)
	}
}

// TestReleaseRetried: a release the store fails is tried again, after
// 100ms and then twice as long each time, until it lands: the permit is
// held (and shown in flight) only until then, not until its lease expires.
// One that cannot land before the lease expires is abandoned at the
// expiry, when the store reclaims it. Each failure is reported, and
// logged at most once per 10s.
func TestReleaseRetried(t *testing.T) {
	rec := &retryRecorder{}
	var log bytes.Buffer
	c, clock, lim := keeperController(t, 1, rec, admission.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	ctx := context.Background()
	tk, err := c.Admit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	down := errors.New("store timed out")
	lim.setErr(down)
	tk.Done()
	if n := rec.pending(); n != 1 {
		t.Fatalf("pending releases after a failed release = %d; want 1", n)
	}
	if s := c.Stats()[0]; s.InFlight != 1 {
		t.Errorf("in flight while the release is pending = %d; want 1", s.InFlight)
	}
	clock.Advance(100 * time.Millisecond) // fails again
	clock.Advance(200 * time.Millisecond) // and again
	if errs, _ := rec.snapshot(); errs != 3 {
		t.Errorf("store errors after three failed attempts = %d; want 3", errs)
	}
	lim.setErr(nil)
	clock.Advance(400*time.Millisecond - time.Nanosecond)
	if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "b"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("TryAdmit before the next attempt = %v; want ErrConcurrencyLimited", err)
	}
	clock.Advance(time.Nanosecond)
	if n := rec.pending(); n != 0 {
		t.Errorf("pending releases once one landed = %d; want 0", n)
	}
	if s := c.Stats()[0]; s.InFlight != 0 {
		t.Errorf("in flight once the release landed = %d; want 0", s.InFlight)
	}
	tk, err = c.TryAdmit(ctx, admission.Request{Tenant: "b"})
	if err != nil {
		t.Fatalf("TryAdmit 700ms after the failed release = %v; want admitted", err)
	}
	if lines := strings.Count(log.String(), "\n"); lines != 1 {
		t.Errorf("log lines for three failures within 10s = %d; want 1:\n%s", lines, log.String())
	}

	// A store down for longer than the lease: abandoned at its expiry.
	lim.setErr(down)
	tk.Done()
	clock.Advance(9*time.Second - 700*time.Millisecond - time.Nanosecond)
	if n := rec.pending(); n != 1 {
		t.Errorf("pending releases before the lease expires = %d; want 1", n)
	}
	clock.Advance(2 * time.Second)
	if n := rec.pending(); n != 0 {
		t.Errorf("pending releases after the lease expired = %d; want 0", n)
	}
	if _, got := rec.snapshot(); got != "inflight:retrying inflight:landed inflight:retrying inflight:abandoned" {
		t.Errorf("release outcomes = %q", got)
	}
	if lines := strings.Count(log.String(), "\n"); lines != 1 {
		t.Errorf("log lines within 10s of the first = %d; want 1:\n%s", lines, log.String())
	}
	// 11s: the next failure is logged, with the count of those unsaid.
	tk, err = c.TryAdmit(ctx, admission.Request{Tenant: "b"})
	if err != nil {
		t.Fatal(err)
	}
	tk.Done()
	if lines := strings.Split(strings.TrimSpace(log.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "failures=") {
		t.Errorf("log lines after 11s = %q; want a second one with the failures since the first", lines)
	}
}

// TestLeaseKeeperConcurrent: the keeper renews while tickets are
// admitted, continued, charged, renewed, read and settled from many
// goroutines (run with -race); once all are settled nothing is in flight
// and nothing was lost.
func TestLeaseKeeperConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &storeErrors{}
		c, err := admission.New(admission.Config{Policies: []admission.Policy{
			{Name: "inflight", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 1000, MaxHold: 30 * time.Millisecond},
			{Name: "tokens", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.Concurrency, Limit: 1 << 40, MaxHold: 60 * time.Millisecond},
			{Name: "tpm", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Minute},
		}}, admission.WithObserver(rec))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				ctx := context.Background()
				for i := range 50 {
					r := admission.Request{Tenant: fmt.Sprint("t", g%3), Tokens: 10}
					tk, err := c.Begin(ctx, r)
					if err != nil {
						t.Error(err)
						return
					}
					time.Sleep(time.Duration(i%7) * 5 * time.Millisecond)
					if err := tk.Continue(ctx, r); err != nil {
						t.Error(err)
						return
					}
					for range i % 4 {
						time.Sleep(20 * time.Millisecond)
						_ = tk.Charge(admission.Usage{Tokens: 20, TokensKnown: true})
						if err := tk.Renew(); err != nil {
							t.Error(err)
						}
						_ = tk.Statuses(nil)
					}
					tk.Settle(admission.Usage{Tokens: 30, TokensKnown: true})
				}
			})
		}
		wg.Wait()
		for _, s := range c.Stats() {
			if s.InFlight != 0 {
				t.Errorf("%s: in flight after every settlement = %d; want 0", s.Name, s.InFlight)
			}
		}
		if rec.expired != 0 {
			t.Errorf("leases lost while their tickets were live = %d; want 0", rec.expired)
		}
	})
}
