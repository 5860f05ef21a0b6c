package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/admission/upstream"
	"github.com/sluicehq/sluice/internal/poll"
)

// tpm is the provider's published budget for a model: 1000 tokens a
// minute.
func tpm() limits.Policy {
	return limits.Policy{
		Name: "tpm", Store: "upstream", Key: []limits.KeyPart{limits.KeyModel},
		Unit: limits.UnitTokens, Algorithm: limits.FixedWindow, Limit: 1000, Per: time.Minute,
	}
}

// step is, at Epoch+at, either a report about group (observe) or an
// acquisition of n for group, which must give ok and retry.
type step struct {
	at      time.Duration
	group   string
	observe *upstream.Report
	n       int64
	ok      bool
	retry   time.Duration
}

func tokens(remaining int64, reset time.Duration) *upstream.Report {
	r := &upstream.Report{}
	r.Figures[upstream.Tokens] = fig(-1, remaining, reset)
	return r
}

func throttled(r *upstream.Report, retry time.Duration) *upstream.Report {
	if r == nil {
		r = &upstream.Report{}
	}
	r.Throttled = true
	if retry >= 0 {
		r.RetryAfter, r.HasRetryAfter = retry, true
	}
	return r
}

func TestStoreSteps(t *testing.T) {
	const m = "gpt-4o"
	skewed := upstream.Parse(headers(
		"Date", "Tue, 30 Nov 2026 11:50:00 GMT",
		"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", "2026-11-30T11:50:30Z",
	).Get, 429, backendtest.Epoch)
	requests := tpm()
	requests.Unit, requests.Limit = limits.UnitRequests, 100
	rpm := &upstream.Report{}
	rpm.Figures[upstream.Requests] = fig(100, 1, 10*time.Second)
	tests := []struct {
		name   string
		cfg    upstream.Config
		policy limits.Policy
		steps  []step
	}{
		{"static budget alone", upstream.Config{}, tpm(), []step{
			{n: 600, ok: true}, {n: 400, ok: true}, {n: 1, retry: time.Minute},
			{at: time.Minute, n: 1000, ok: true},
		}},
		{"learned budget tightens", upstream.Config{}, tpm(), []step{
			{observe: tokens(300, 20*time.Second)},
			{n: 200, ok: true}, {n: 200, retry: 20 * time.Second},
			{at: 10 * time.Second, n: 100, ok: true}, {at: 10 * time.Second, n: 1, retry: 10 * time.Second},
			// The provider's window refilled; the static one has 700 left.
			{at: 20 * time.Second, n: 700, ok: true}, {at: 20 * time.Second, n: 1, retry: 40 * time.Second},
		}},
		{"learned budget never loosens", upstream.Config{}, tpm(), []step{
			{observe: &upstream.Report{Figures: [4]upstream.Figure{{}, fig(1_000_000_000, 1_000_000_000, time.Minute)}}},
			{n: 1000, ok: true}, {n: 1, retry: time.Minute},
		}},
		{"a newer report replaces an older one", upstream.Config{}, tpm(), []step{
			{observe: tokens(100, 30*time.Second)}, {n: 100, ok: true},
			{at: time.Second, observe: tokens(500, 29*time.Second)}, {at: time.Second, n: 500, ok: true},
		}},
		{"an older report is ignored", upstream.Config{}, tpm(), []step{
			{at: 10 * time.Second, observe: tokens(100, 50*time.Second)},
			{at: 5 * time.Second, observe: tokens(1000, 55*time.Second)},
			{at: 10 * time.Second, n: 200, retry: 50 * time.Second},
		}},
		{"remaining without a reset holds RemainingTTL", upstream.Config{RemainingTTL: 10 * time.Second}, tpm(), []step{
			{observe: tokens(0, -1)}, {n: 1, retry: 10 * time.Second}, {at: 10 * time.Second, n: 1, ok: true},
		}},
		{"a request beyond the provider's limit never fits", upstream.Config{}, tpm(), []step{
			{observe: &upstream.Report{Figures: [4]upstream.Figure{{}, fig(500, 500, time.Minute)}}},
			{n: 501, retry: limits.Never},
		}},
		{"pause after a 429 until its retry-after", upstream.Config{}, tpm(), []step{
			{observe: throttled(nil, 5*time.Second)},
			{n: 1, retry: 5 * time.Second}, {at: 4 * time.Second, n: 1, retry: time.Second},
			{at: 5 * time.Second, n: 1, ok: true},
		}},
		{"pause after a 429 until the exhausted dimension's reset", upstream.Config{}, tpm(), []step{
			{observe: throttled(tokens(0, 7*time.Second), -1)}, {n: 1, retry: 7 * time.Second}, {at: 7 * time.Second, n: 1, ok: true},
		}},
		{"pause after a bare 429", upstream.Config{Pause: 2 * time.Second}, tpm(), []step{
			{observe: throttled(nil, -1)}, {n: 1, retry: 2 * time.Second}, {at: 2 * time.Second, n: 1, ok: true},
		}},
		{"pause bounded by MaxPause", upstream.Config{MaxPause: time.Minute}, tpm(), []step{
			{observe: throttled(nil, time.Hour)}, {n: 1, retry: time.Minute},
		}},
		{"a day's retry-after pauses no longer than the provider's reset", upstream.Config{}, tpm(), []step{
			{observe: throttled(&upstream.Report{Figures: [4]upstream.Figure{fig(10000, 0, time.Second)}}, 86400*time.Second)},
			{n: 1, retry: time.Second}, {at: time.Second, n: 1, ok: true},
		}},
		{"a day's retry-after without a reset pauses a minute by default", upstream.Config{}, tpm(), []step{
			{observe: throttled(nil, 86400*time.Second)}, {n: 1, retry: time.Minute}, {at: time.Minute, n: 1, ok: true},
		}},
		{"a retry-after shorter than the reset is kept", upstream.Config{}, tpm(), []step{
			{observe: throttled(tokens(5, 30*time.Second), 5*time.Second)}, {n: 1, retry: 5 * time.Second},
		}},
		{"a pause spares the other groups", upstream.Config{}, tpm(), []step{
			{observe: throttled(nil, 5*time.Second)}, {group: "gpt-4o-mini", n: 1, ok: true},
		}},
		{"provider clock skew", upstream.Config{}, tpm(), []step{
			{observe: &skewed}, {n: 1, retry: 30 * time.Second}, {at: 30 * time.Second, n: 1, ok: true},
		}},
		{"a report built by hand is bounded", upstream.Config{}, tpm(), []step{
			{observe: &upstream.Report{Figures: [4]upstream.Figure{{}, {Remaining: -5, Reset: -time.Second, HasRemaining: true, HasReset: true}}}},
			{n: 1, ok: true},
			{observe: &upstream.Report{Throttled: true, RetryAfter: -time.Hour, HasRetryAfter: true}}, {n: 1, ok: true},
			{observe: throttled(nil, 1<<62)}, {n: 1, retry: upstream.DefaultMaxPause},
		}},
		{"a requests policy reads the requests figures", upstream.Config{}, requests, []step{
			// 99 more requests by the reset: one every 10s/99.
			{observe: rpm}, {n: 1, ok: true}, {n: 1, retry: 101010102},
		}},
		{"the learned budget refills toward the provider's limit", upstream.Config{}, tpm(), []step{
			{observe: &upstream.Report{Figures: [4]upstream.Figure{{}, fig(1000, 0, 10*time.Second)}}},
			// 100 tokens a second until the provider's bucket is full.
			{n: 200, retry: 2 * time.Second},
			{at: 2 * time.Second, n: 200, ok: true},
			{at: 2 * time.Second, n: 100, retry: time.Second},
			{at: 2 * time.Second, n: 1, retry: 10 * time.Millisecond},
			// Past the reset the figure is over: the static limit has 800.
			{at: 10 * time.Second, n: 800, ok: true}, {at: 10 * time.Second, n: 1, retry: 50 * time.Second},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := upstream.New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.Limiter(&tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			lim := tt.policy.Base()
			for i, st := range tt.steps {
				group := st.group
				if group == "" {
					group = m
				}
				now := backendtest.Epoch.Add(st.at)
				if st.observe != nil {
					r := *st.observe
					r.Received = now
					if !s.Observe(group, r) {
						t.Fatalf("step %d: Observe(%q) = false; want true", i, group)
					}
					continue
				}
				var g backend.Grant
				if err := l.Acquire(context.Background(), group, &lim, st.n, now, &g); err != nil {
					t.Fatal(err)
				}
				if g.OK != st.ok || (!st.ok && g.RetryAfter != st.retry) {
					t.Errorf("step %d: Acquire(%s, %d) at +%v = ok %v retry %v; want ok %v retry %v", i, group, st.n, st.at, g.OK, g.RetryAfter, st.ok, st.retry)
				}
			}
		})
	}
}

// newController returns a controller on clock with the policies on store s.
func newController(t *testing.T, clock *admissiontest.Clock, s *upstream.Store, ps ...limits.Policy) *admission.Controller {
	t.Helper()
	c, err := admission.New(admission.Config{Policies: ps}, admission.WithClock(clock), admission.WithStore("upstream", s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func queued(c *admission.Controller) int {
	n := 0
	for _, s := range c.Stats() {
		n += s.Queued
	}
	return n
}

// waitFor waits until cond holds, with no deadline (package poll).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 20*time.Second, what, cond)
}

// TestPausedRequestsWait: after the provider's 429, requests wait in the
// policy's queue and are admitted once the retry-after has passed, none
// earlier; a request whose deadline ends before is refused at once.
func TestPausedRequestsWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		report *upstream.Report
		wait   time.Duration
	}{
		{"429 with retry-after", throttled(nil, 5*time.Second), 5 * time.Second},
		{"remaining exhausted", tokens(0, 3*time.Second), 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			s, _ := upstream.New(upstream.Config{})
			p := tpm()
			p.Queue = limits.Queue{Size: 10, Timeout: 30 * time.Second}
			c := newController(t, clock, s, p)
			r := *tc.report
			r.Received = clock.Now()
			s.Observe("gpt-4o", r)

			ctx, cancel := context.WithDeadline(context.Background(), backendtest.Epoch.Add(tc.wait-time.Millisecond))
			_, err := c.Admit(ctx, admission.Request{Tenant: "hurried", Model: "gpt-4o", Tokens: 10})
			cancel()
			if !errors.Is(err, admission.ErrRateLimited) {
				t.Fatalf("Admit with a deadline before the reset = %v; want a rate refusal at once", err)
			}

			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for _, tenant := range []string{"a", "b", "c"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tk, err := c.Admit(context.Background(), admission.Request{Tenant: tenant, Model: "gpt-4o", Tokens: 100})
					tk.Done()
					errs <- err
				}()
			}
			waitFor(t, "three queued requests", func() bool { return queued(c) == 3 })
			clock.Advance(tc.wait - time.Millisecond)
			if n := queued(c); n != 3 {
				t.Fatalf("before the reset %d requests are queued; want 3", n)
			}
			clock.Advance(time.Millisecond)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("queued request after the reset: %v; want admitted", err)
				}
			}
		})
	}
}

func TestStoreGroupsBounded(t *testing.T) {
	s, _ := upstream.New(upstream.Config{MaxGroups: 2})
	now := backendtest.Epoch
	for _, tc := range []struct {
		group string
		at    time.Duration
		want  bool
	}{
		{"a", 0, true}, {"b", 0, true}, {"c", 0, false},
		{"a", time.Second, true}, // known groups are still learned about
		{strings.Repeat("x", 257), 0, false},
		{"", -1, false}, // no Received instant
		// a and b's figures are over at +11s: their room is reused.
		{"c", 11 * time.Second, true}, {"d", 11 * time.Second, true}, {"e", 11 * time.Second, false},
	} {
		r := *tokens(0, 10*time.Second)
		r.Received = now.Add(tc.at)
		if tc.at < 0 {
			r.Received = time.Time{}
		}
		if got := s.Observe(tc.group, r); got != tc.want {
			t.Errorf("Observe(%.8q) at +%v = %v; want %v", tc.group, tc.at, got, tc.want)
		}
	}
}

func TestStoreValidates(t *testing.T) {
	for _, p := range []limits.Policy{
		{Name: "cost", Unit: limits.UnitCost, Algorithm: limits.FixedWindow, Limit: 1, Per: time.Second},
		{Name: "per-tenant", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.FixedWindow, Limit: 1, Per: time.Second},
		// Its partitions ("gpt-4o\x1fchat") are never the group a report
		// is observed for ("gpt-4o"): a provider's 429 would not pause it.
		{Name: "model-and-operation", Key: []limits.KeyPart{limits.KeyModel, limits.KeyOperation}, Algorithm: limits.FixedWindow, Limit: 1, Per: time.Second},
	} {
		s, _ := upstream.New(upstream.Config{})
		if _, err := s.Limiter(&p); err == nil {
			t.Errorf("Limiter(%s) = nil error; want a refusal", p.Name)
		}
	}
	for _, cfg := range []upstream.Config{{MaxGroups: -1}, {Pause: -1}, {MaxPause: -1}, {RemainingTTL: -1}} {
		if _, err := upstream.New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error; want a refusal", cfg)
		}
	}
}

// TestPausedClassesShare: an upstream policy's queue reserves shares like
// any queued policy: after the provider's pause, interactive and batch
// requests waiting together are served 70/30 as the provider's budget
// (one request per 100ms) allows.
func TestPausedClassesShare(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	s, _ := upstream.New(upstream.Config{})
	p := limits.Policy{
		Name: "rpm", Store: "upstream", Key: []limits.KeyPart{limits.KeyModel},
		Algorithm: limits.TokenBucket, Limit: 600, Per: time.Minute, Burst: 1,
		Queue: limits.Queue{Size: 100, Shares: []limits.Share{{Priority: 10, Percent: 70}}},
	}
	c := newController(t, clock, s, p)
	s.Observe("gpt-4o", *throttled(&upstream.Report{Received: clock.Now()}, 2*time.Second))
	type result struct {
		prio int
		err  error
	}
	out := make(chan result, 20)
	for i := range 20 {
		prio := []int{0, 10}[i/10] // batch queues first
		go func() {
			tk, err := c.Admit(context.Background(), admission.Request{Tenant: fmt.Sprint("t", i%4), Model: "gpt-4o", Priority: prio})
			tk.Done()
			out <- result{prio, err}
		}()
		waitFor(t, "the request to queue", func() bool { return queued(c) == i+1 })
	}
	clock.Advance(2 * time.Second)
	served := map[int]int{}
	for i := range 10 {
		if i > 0 {
			clock.Advance(100 * time.Millisecond)
		}
		r := <-out
		if r.err != nil {
			t.Fatalf("step %d: %v", i, r.err)
		}
		served[r.prio]++
	}
	if served[10] < 6 || served[0] < 2 {
		t.Errorf("10 served after the pause: %v; want priority 10 >= 6 and 0 >= 2 (70%%/30%% within one request)", served)
	}
}

func TestStoreGroups(t *testing.T) {
	s, _ := upstream.New(upstream.Config{})
	r := *throttled(tokens(40, 30*time.Second), 5*time.Second)
	r.Figures[upstream.Tokens].Limit, r.Figures[upstream.Tokens].HasLimit = 1000, true
	r.Received = backendtest.Epoch
	s.Observe("gpt-4o", r)
	for _, tc := range []struct {
		at   time.Duration
		want upstream.GroupStatus
	}{
		// 40 left of 1000, full in 30s: 32 tokens a second. Nothing
		// learned of the provider's accounting: the ratio is Initial.
		{2 * time.Second, upstream.GroupStatus{Group: "gpt-4o", Paused: 3 * time.Second, Figures: [4]upstream.Figure{{}, fig(1000, 104, 28*time.Second)}, Ratio: 1}},
		{10 * time.Second, upstream.GroupStatus{Group: "gpt-4o", Figures: [4]upstream.Figure{{}, fig(1000, 360, 20*time.Second)}, Ratio: 1}},
		{30 * time.Second, upstream.GroupStatus{Group: "gpt-4o", Ratio: 1}},
	} {
		got := s.Groups(backendtest.Epoch.Add(tc.at))
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("Groups(+%v) = %+v; want [%+v]", tc.at, got, tc.want)
		}
	}
}

// TestControllerRefusesBadPolicy: the controller names the policy whose
// configuration the store refuses.
func TestControllerRefusesBadPolicy(t *testing.T) {
	s, _ := upstream.New(upstream.Config{})
	p := tpm()
	p.Key = []limits.KeyPart{limits.KeyTenant}
	_, err := admission.New(admission.Config{Policies: []limits.Policy{p}}, admission.WithStore("upstream", s))
	const want = `policy "tpm": upstream: key tenant: an upstream policy is keyed by global, model or operation, as providers limit`
	if err == nil || err.Error() != want {
		t.Errorf("New = %v; want %s", err, want)
	}
}

// plainStore is the in-memory store without the optional interfaces, as
// a shared store may be.
type plainStore struct{}

func (plainStore) Limiter(p *limits.Policy) (backend.Limiter, error) {
	l, err := memstore.Store{}.Limiter(p)
	return struct{ backend.Limiter }{l}, err
}

// TestStaticStore: the static budget lives in the configured store (the
// in-memory one by default), and what that store cannot do (renew leases,
// count partitions) the upstream store reports as such rather than
// pretending.
func TestStaticStore(t *testing.T) {
	for _, tc := range []struct {
		name       string
		static     backend.Store
		renew      error
		partitions int
	}{
		{"memory", nil, nil, 1},
		{"without renewals or stats", plainStore{}, errors.ErrUnsupported, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			s, _ := upstream.New(upstream.Config{}, upstream.WithStaticStore(tc.static))
			p := limits.Policy{Name: "inflight", Store: "upstream", Algorithm: limits.Concurrency, Limit: 1}
			c := newController(t, clock, s, p)
			tk, err := c.Admit(context.Background(), admission.Request{Tenant: "a"})
			if err != nil {
				t.Fatal(err)
			}
			defer tk.Done()
			if _, err := c.Admit(context.Background(), admission.Request{Tenant: "b"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
				t.Errorf("second Admit = %v; want the static limit of 1 in flight", err)
			}
			clock.Advance(limits.DefaultMaxHold / 2) // Renew calls the store from then on
			if err := tk.Renew(); !errors.Is(err, tc.renew) {
				t.Errorf("Renew = %v; want %v", err, tc.renew)
			}
			if st := c.Stats(); st[0].Partitions != tc.partitions {
				t.Errorf("Stats partitions = %d; want %d", st[0].Partitions, tc.partitions)
			}
		})
	}
}

// TestNeverLoosensProperty: whatever the provider reports, in whatever
// order (random figures, resets, pauses, out-of-order instants), the
// upstream store never admits more in a window than the static budget
// alone would, and never admits what the in-memory store refuses.
func TestNeverLoosensProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 1))
	p := tpm()
	lim := p.Base()
	for trial := range 200 {
		s, _ := upstream.New(upstream.Config{MaxGroups: 1 + rng.IntN(3)})
		up, _ := s.Limiter(&p)
		peer, _ := memstore.Store{}.Limiter(&p)
		now := backendtest.Epoch
		for step := range 500 {
			now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Second))))
			group := fmt.Sprint("m", rng.IntN(4))
			if rng.IntN(3) == 0 {
				var r upstream.Report
				r.Received = now.Add(-time.Duration(rng.Int64N(int64(time.Second))))
				for d := range r.Figures {
					r.Figures[d] = fig(rng.Int64N(3000)-500, rng.Int64N(3000)-500, time.Duration(rng.Int64N(int64(2*time.Minute)))-time.Second)
				}
				if r.Throttled = rng.IntN(4) == 0; r.Throttled {
					r.RetryAfter, r.HasRetryAfter = time.Duration(rng.Int64N(int64(time.Minute))), rng.IntN(2) == 0
				}
				s.Observe(group, r)
				continue
			}
			n := rng.Int64N(1200)
			var g, pg backend.Grant
			_ = up.Acquire(context.Background(), group, &lim, n, now, &g)
			if g.OK {
				// The peer is asked only for what the upstream store
				// admitted, so it holds the same state: it must agree.
				_ = peer.Acquire(context.Background(), group, &lim, n, now, &pg)
				if !pg.OK {
					t.Fatalf("trial %d step %d: the upstream store admitted %d for %s that the static budget alone refuses", trial, step, n, group)
				}
			}
			if !g.OK && g.RetryAfter < 0 && g.RetryAfter != limits.Never {
				t.Fatalf("trial %d step %d: retry-after %v", trial, step, g.RetryAfter)
			}
		}
	}
}
