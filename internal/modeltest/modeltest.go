// Package modeltest is the model-based test of the admission controller:
// random operations against a reference model of the limits configured,
// run on the in-memory store by the admission package's tests and on a
// real Redis by the Redis store's, where the store may also pause and die.
//
// The tolerance each operation asserts is written out on Run and Faults.
package modeltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// The model-based test drives a controller with random operations
// (admit, settle, refund, charge, renew, statistics, a reload with other
// limits, a change of plans, a tenant's override) and checks each
// decision against a reference model of the limits configured at that
// moment: a fixed window of requests per tenant, then a cap on requests
// in flight per tenant, each with the tenant's plan and overrides.
//
// Runs start with the controller's lease keeper on, or off (Close, as a
// process that renews nothing but what its caller renews), and a run with
// the keeper on may stop it at any step (the operation "crash"). On a
// shared store, a replica may also restart: it stops, its tickets are
// never settled and their leases count until they expire, and a new
// controller on the same store takes its place with the configuration in
// force.
//
// The tolerance asserted: the window is exact (a request is admitted iff
// the requests counted in the current window, less those refunded in it,
// plus one fit the limit in force). The cap is exact up to what renewal
// leaves unknown: a lease lives MaxHold from its admission or its last
// renewal that reached the store, and Renew reaches the store only once
// half of MaxHold has passed since the last one, so after a Renew at r a
// lease expires between r+MaxHold/2 and r+MaxHold. While the keeper runs,
// a live ticket's lease never expires (the keeper renews a lease a sixth
// of its MaxHold old every third of MaxHold, so no lease is older than
// MaxHold/2); once it stops at t, each lease expires between t+MaxHold/2
// and t+MaxHold, and explicit renewals take over. A request is refused
// when the leases certainly alive fill the cap, admitted when those
// possibly alive leave room, and either in between, in memory and on
// Redis alike; a settled ticket's lease is never counted (no permit is
// held after its work ended). A limit lowered below what is held revokes
// nothing: it refuses new requests until the held ones end. The in-flight
// statistic lies between the leases certainly and possibly alive; on a
// shared store, between those certainly alive and those not yet settled
// (the figure is the replica's own count, read without asking the store).
//
// Store faults (Faults, on a shared store only): a pause and a kill.
//
// During a pause the store answers no script call: every decision is the
// policies' failure mode's, chosen per run from the seed (open, closed or
// local, the same for every policy). Fail-open admits every request,
// counted apart (the model's failOpen, checked against the observer's
// FailOpen decisions); fail-closed refuses every request with
// ReasonStoreUnavailable from the first policy; local lets the in-memory
// fallback decide (admitted, or refused by the window or the cap, never
// for the store). A request admitted so holds nothing in the store and
// counts against nothing the model checks. A refund, a charge or an
// explicit renewal that fails changes nothing in the store (a renewal's
// error is not ErrLeaseExpired), and a release that fails leaves its
// lease held in the store: with the keeper running, the release is
// retried, so the lease is held no later than retryMax (two seconds)
// after the pause ends (the keeper tries each failed release again at
// most that long after its previous attempt), and otherwise until its
// lease expires. The pause lasts at most pauseSteps steps of at most
// pauseStep each, so that it ends before a lease the keeper renews can
// expire (the keeper renews a lease at most MaxHold/2 old; the longest
// gap between its runs is MaxHold/3). No crash, restart nor kill happens
// during a pause or within MaxHold/3 after it (the keeper's first run
// after a pause renews what the pause left unrenewed).
//
// A kill stops the server by its process id and starts it again on the
// same port with persistence off: the store forgets every count and
// lease, and the model resets its reference with it (windows empty,
// no lease held, the stopped replicas' and the failed releases' leases
// gone). The replica's live tickets have lost their leases: a renewal
// says ErrLeaseExpired, and their callers settle them (releasing
// nothing). The decisions after a kill are exact again.

const (
	modelHold = 30 * time.Second
	modelPer  = time.Minute
	// pauseSteps and pauseStep bound a store pause: steps, and the
	// clock's advance at each (a pause stays under 4s, below the
	// MaxHold/6 of slack the keeper's renewals leave).
	pauseSteps = 4
	pauseStep  = time.Second
	// retryMax is the longest delay between two attempts of a failed
	// release (admission's lease keeper).
	retryMax = 2 * time.Second
)

// Faults injects store faults into a run on a shared store. Each call
// returns once the fault is in force: Pause once the store answers no
// script call (until Resume), Resume once calls reach the store again
// (its circuit breaker lets them through), Kill once the store runs
// again, empty, on the same address.
type Faults interface {
	Pause()
	Resume()
	Kill()
}

// modelLimits are a plan's or tenant's overrides of the two modelled
// policies: 0 keeps the figure below.
type modelLimits struct{ win, conc int64 }

type modelLease struct {
	tenant string
	tk     admission.Ticket
	window int64 // the window the request was counted in
	lo, hi time.Time
	// local: admitted by the store's failure mode (open or the
	// in-memory fallback), it holds nothing in the store.
	local bool
	// retried: a release that failed, which the keeper retries.
	retried bool
	// until: a release that failed counts in the replica's in-flight
	// figure until then, unless a retry lands.
	until time.Time
}

type model struct {
	t       testing.TB
	store   string // the policies' store; "" for memory
	rng     *rand.Rand
	clock   *admissiontest.Clock
	c       *admission.Controller
	base    modelLimits
	pro     modelLimits
	tenants map[string]modelLimits // own overrides; the plan is pro for tenants on it
	onPro   map[string]bool
	count   map[string]map[int64]int64 // requests counted by tenant and window
	live    []*modelLease
	// orphans are the leases of a replica that stopped (on a shared
	// store): they count against the cap until they expire, and nobody
	// settles or renews them.
	orphans []*modelLease
	// releasing are the leases whose release failed during a pause:
	// held in the store until a retry lands or they expire.
	releasing []*modelLease
	opts      []admission.Option
	ctx       context.Context
	keeper    bool // the controller's lease keeper runs

	faults   Faults
	mode     limits.FailMode // the policies' failure mode
	paused   int             // steps left in the pause; 0 when none
	pausedAt time.Time       // when the last pause began
	resumed  time.Time       // when the last pause ended
	failOpen int64           // requests admitted by failing open
	obs      *failOpens
}

// failOpens counts the fail-open decisions the controller reports.
type failOpens struct {
	admission.NopObserver
	n atomic.Int64
}

// Decision implements admission.Observer.
func (f *failOpens) Decision(d *admission.Decision) {
	if d.Outcome == admission.FailOpen && d.Policy == "win" {
		f.n.Add(1)
	}
}

// forever is the expiry of a lease the keeper renews.
var forever = time.Unix(1<<40, 0)

func (m *model) policies() []admission.Policy {
	tenant := []limits.KeyPart{limits.KeyTenant}
	return []admission.Policy{
		{Name: "win", Key: tenant, Algorithm: limits.FixedWindow, Limit: m.base.win, Per: modelPer, Store: m.store, OnStoreError: m.mode},
		{Name: "conc", Key: tenant, Algorithm: limits.Concurrency, Limit: m.base.conc, MaxHold: modelHold, Store: m.store, OnStoreError: m.mode},
		{Name: "tpm", Key: tenant, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1 << 30, Per: time.Minute, Store: m.store, OnStoreError: m.mode},
	}
}

func overrides(l modelLimits) map[string]limits.Override {
	o := map[string]limits.Override{}
	if l.win > 0 {
		o["win"] = limits.Override{Limit: l.win}
	}
	if l.conc > 0 {
		o["conc"] = limits.Override{Limit: l.conc}
	}
	return o
}

func (m *model) tenantPlan(tenant string) *limits.TenantPlan {
	tp := &limits.TenantPlan{Plan: "free", Overrides: overrides(m.tenants[tenant])}
	if m.onPro[tenant] {
		tp.Plan = "pro"
	}
	return tp
}

func (m *model) config() admission.Config {
	pl := limits.Plans{Default: "free", Plans: map[string]map[string]limits.Override{
		"free": {}, "pro": overrides(m.pro),
	}, Tenants: map[string]limits.TenantPlan{}}
	for tenant := range m.onPro {
		pl.Tenants[tenant] = *m.tenantPlan(tenant)
	}
	return admission.Config{Policies: m.policies(), Plans: pl}
}

// limit returns the tenant's limits in force.
func (m *model) limit(tenant string) modelLimits {
	l := m.base
	layers := []modelLimits{m.tenants[tenant]}
	if m.onPro[tenant] {
		layers = []modelLimits{m.pro, m.tenants[tenant]}
	}
	for _, o := range layers {
		if o.win > 0 {
			l.win = o.win
		}
		if o.conc > 0 {
			l.conc = o.conc
		}
	}
	return l
}

func (m *model) window() int64 { return m.clock.Now().UnixNano() / int64(modelPer) }

// alive returns the tenant's leases certainly and possibly alive now.
func (m *model) alive(tenant string) (certain, possible int64) {
	now := m.clock.Now()
	all := append(m.live[:len(m.live):len(m.live)], m.orphans...)
	for _, ls := range append(all, m.releasing...) {
		if (tenant != "" && ls.tenant != tenant) || ls.local {
			continue
		}
		if now.Before(ls.lo) {
			certain++
		}
		if now.Before(ls.hi) {
			possible++
		}
	}
	return certain, possible
}

func (m *model) admit(step int) {
	tenant := fmt.Sprintf("t%d", m.rng.IntN(4))
	l := m.limit(tenant)
	w := m.window()
	counted := m.count[tenant][w]
	certain, possible := m.alive(tenant)
	tk, err := m.c.TryAdmit(m.ctx, admission.Request{Tenant: tenant, Tokens: m.rng.Int64N(1000)})
	var rej *admission.Rejection
	if err != nil && !errors.As(err, &rej) {
		m.t.Fatal(err)
	}
	got := "admitted"
	if rej != nil {
		got = "rejected by " + rej.Policy
		if rej.Reason == admission.ReasonStoreUnavailable {
			got += " for store_unavailable"
		}
	}
	var want []string
	switch {
	case m.paused > 0 && m.mode == limits.FailOpenMode:
		want = []string{"admitted"}
	case m.paused > 0 && m.mode == limits.FailClosedMode:
		want = []string{"rejected by win for store_unavailable"}
	case m.paused > 0:
		// The in-memory fallback's state is its own.
		want = []string{"admitted", "rejected by win", "rejected by conc"}
	case counted+1 > l.win:
		want = []string{"rejected by win"}
	case certain+1 > l.conc:
		want = []string{"rejected by conc"}
	case possible+1 <= l.conc:
		want = []string{"admitted"}
	default:
		want = []string{"admitted", "rejected by conc"}
	}
	ok := false
	for _, w := range want {
		ok = ok || got == w
	}
	if !ok {
		m.t.Fatalf("step %d: %s's request (limits %+v, %d counted in the window, %d to %d leases alive) %s; want %v",
			step, tenant, l, counted, certain, possible, got, want)
	}
	if rej != nil {
		return
	}
	now := m.clock.Now()
	if m.paused > 0 {
		// Nothing reached the store: the request holds nothing there.
		m.live = append(m.live, &modelLease{tenant: tenant, tk: tk, window: -1, lo: now, hi: now, local: true})
		if m.mode == limits.FailOpenMode {
			m.failOpen++
			if got := m.obs.n.Load(); got != m.failOpen {
				m.t.Fatalf("step %d: fail-open decisions reported = %d; want %d", step, got, m.failOpen)
			}
		}
		return
	}
	if m.count[tenant] == nil {
		m.count[tenant] = map[int64]int64{}
	}
	m.count[tenant][w]++
	ls := &modelLease{tenant: tenant, tk: tk, window: w, lo: now.Add(modelHold), hi: now.Add(modelHold)}
	if m.keeper {
		ls.lo, ls.hi = forever, forever
	}
	m.live = append(m.live, ls)
}

// end settles a live ticket: its lease is gone, and a refund in the
// window it was counted in takes its request back.
func (m *model) end(i int, refund bool) {
	ls := m.live[i]
	m.live = append(m.live[:i], m.live[i+1:]...)
	if refund {
		ls.tk.Refund()
		if ls.window == m.window() && m.paused == 0 && !ls.local {
			m.count[ls.tenant][ls.window]--
		}
	} else {
		ls.tk.Settle(admission.Usage{Tokens: m.rng.Int64N(2000), TokensKnown: true})
	}
	now := m.clock.Now()
	if m.paused == 0 || ls.local {
		return
	}
	// The release failed: the lease stays in the store until it expires
	// (by MaxHold from now at the latest when the keeper renewed it, a
	// keeper renews leases at most MaxHold/2 old) or a retry lands, and
	// in the replica's figure until then or MaxHold from now (even when
	// it may have expired already).
	if ls.hi == forever {
		ls.lo, ls.hi = minTime(now, m.pausedAt.Add(modelHold/2)), now.Add(modelHold)
	}
	ls.retried, ls.until = m.keeper, now.Add(modelHold)
	m.releasing = append(m.releasing, ls)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (m *model) renew(step int, ls *modelLease) {
	now := m.clock.Now()
	err := ls.tk.Renew()
	switch {
	case ls.local:
		if err != nil && !errors.Is(err, admission.ErrLeaseExpired) {
			m.t.Fatalf("step %d: Renew of a ticket admitted without the store: %v", step, err)
		}
	case err != nil && m.paused > 0 && !errors.Is(err, admission.ErrLeaseExpired):
		// The store did not answer: the lease is as it was.
	case err == nil:
		if !now.Before(ls.hi) {
			m.t.Fatalf("step %d: Renew of a lease past its latest expiry succeeded", step)
		}
		ls.lo = maxTime(ls.lo, now.Add(modelHold/2))
		ls.hi = maxTime(ls.hi, now.Add(modelHold))
	case errors.Is(err, admission.ErrLeaseExpired):
		if now.Before(ls.lo) {
			m.t.Fatalf("step %d: Renew of a lease certainly alive: %v", step, err)
		}
		ls.lo, ls.hi = now, now
	default:
		m.t.Fatal(err)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (m *model) stats(step int) {
	certain, possible := m.alive("")
	if m.store != "" {
		// This replica's own leases only: a stopped replica's were its.
		now := m.clock.Now()
		certain = 0
		for _, ls := range m.live {
			if now.Before(ls.lo) && !ls.local {
				certain++
			}
		}
		// A shared store's figure is this replica's leases not yet
		// released nor found expired by a renewal (it asks the store
		// nothing): a lease past its expiry whose ticket is not yet
		// settled still counts, and so does a lease whose release
		// failed, until a retry lands or MaxHold has passed.
		possible = int64(len(m.releasing))
		for _, ls := range m.live {
			if !ls.local {
				possible++
			}
		}
	}
	for _, s := range m.c.Stats() {
		if s.Name == "conc" && (s.InFlight < certain || s.InFlight > possible) {
			m.t.Fatalf("step %d: Stats in flight = %d; want %d to %d", step, s.InFlight, certain, possible)
		}
	}
}

func (m *model) randLimits() modelLimits {
	return modelLimits{win: m.rng.Int64N(8), conc: m.rng.Int64N(4)}
}

// crash stops the controller's lease keeper: from then on, each live
// lease expires between MaxHold/2 and MaxHold from now unless renewed.
func (m *model) crash() {
	m.c.Close()
	m.keeper = false
	for _, ls := range m.releasing {
		ls.retried = false
	}
	now := m.clock.Now()
	for _, ls := range m.live {
		ls.lo, ls.hi = now.Add(modelHold/2), now.Add(modelHold)
	}
}

// restart stands for a replica that stops (its keeper with it) and a new
// one that takes its place on the same shared store: the stopped
// replica's tickets are never settled, and their leases count until they
// expire; the new replica starts with the configuration in force.
func (m *model) restart() {
	if m.keeper {
		m.crash()
	}
	for _, ls := range m.live {
		if !ls.local {
			m.orphans = append(m.orphans, ls)
		}
	}
	m.live = nil
	m.releasing = nil // a stopped replica's figure is no more
	c, err := admission.New(m.config(), m.opts...)
	if err != nil {
		m.t.Fatal(err)
	}
	m.c, m.keeper = c, true
}

// pause stops the store answering: the next steps run on the failure
// mode, for 1 to pauseSteps steps.
func (m *model) pause() {
	m.faults.Pause()
	m.paused = 1 + m.rng.IntN(pauseSteps) + 1 // this step's, then 1 to pauseSteps
	m.pausedAt = m.clock.Now()
}

// resume lets the store answer again: the keeper's retries of the
// releases that failed land within retryMax.
func (m *model) resume() {
	m.faults.Resume()
	m.paused = 0
	m.resumed = m.clock.Now()
	for _, ls := range m.releasing {
		if ls.retried {
			ls.lo = minTime(ls.lo, m.resumed)
			ls.hi = minTime(ls.hi, m.resumed.Add(retryMax))
			ls.until = minTime(ls.until, ls.hi)
		}
	}
}

// kill stops the store and starts it empty: the model forgets with it.
func (m *model) kill() {
	m.faults.Kill()
	now := m.clock.Now()
	clear(m.count)
	m.orphans, m.releasing = nil, nil
	for _, ls := range m.live {
		if !ls.local {
			// Lost: its caller learns so and ends the work.
			ls.lo, ls.hi = now, now
		}
	}
}

// calm reports whether the store is neither paused nor within MaxHold/3
// of its last pause (when the keeper's first run after it may not have
// come yet): the moment for a crash, a restart or a kill.
func (m *model) calm() bool {
	return m.paused == 0 && (m.resumed.IsZero() || !m.clock.Now().Before(m.resumed.Add(modelHold/3)))
}

// Run drives a controller over st (the in-memory store when nil) with ops
// random operations drawn from seed, the controller's lease keeper
// running or not from the start, and fails t at the first decision or
// figure the model does not allow. With faults (on a shared store; nil
// otherwise) the store may also pause and die; the policies' failure
// mode is then drawn from the seed.
func Run(t testing.TB, st backend.Store, faults Faults, seed uint64, ops int, keeper bool) {
	t.Helper()
	m := &model{
		t: t, rng: rand.New(rand.NewPCG(seed, 0x30de1)), clock: admissiontest.NewClock(backendtest.Epoch),
		base: modelLimits{win: 4, conc: 2}, pro: modelLimits{win: 8, conc: 4},
		tenants: map[string]modelLimits{}, onPro: map[string]bool{"t0": true},
		count: map[string]map[int64]int64{}, ctx: context.Background(),
		faults: faults, obs: &failOpens{},
	}
	if faults != nil {
		m.mode = limits.FailMode(seed % 3)
	}
	opts := []admission.Option{admission.WithClock(m.clock), admission.WithObserver(m.obs)}
	if st != nil {
		m.store = "model"
		opts = append(opts, admission.WithStore(m.store, st))
	}
	m.opts = opts
	c, err := admission.New(m.config(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	m.c, m.keeper = c, true
	if !keeper {
		m.crash()
	}
	for step := range ops {
		if m.paused > 0 {
			m.clock.Advance(time.Duration(m.rng.Int64N(int64(pauseStep))))
		} else {
			m.clock.Advance(time.Duration(m.rng.Int64N(int64(4 * time.Second))))
		}
		switch k := m.rng.IntN(20); {
		case k < 9 || len(m.live) == 0:
			m.admit(step)
		case k < 11:
			m.end(m.rng.IntN(len(m.live)), false)
		case k < 12:
			m.end(m.rng.IntN(len(m.live)), true)
		case k < 13:
			// Charges tokens only: the modelled policies count requests.
			if err := m.live[m.rng.IntN(len(m.live))].tk.Charge(admission.Usage{Tokens: m.rng.Int64N(3000), TokensKnown: true}); err != nil {
				t.Fatalf("step %d: Charge: %v", step, err)
			}
		case k < 16:
			m.renew(step, m.live[m.rng.IntN(len(m.live))])
		case k < 17:
			switch n := m.rng.IntN(20); {
			case !m.calm():
			case n == 0 && m.keeper:
				m.crash()
			case n == 1 && m.store != "":
				m.restart()
			case n == 2 && m.faults != nil:
				m.pause()
			case n == 3 && m.faults != nil:
				m.kill()
			}
			m.stats(step)
		case k < 18:
			b := m.randLimits()
			m.base = modelLimits{win: max(b.win, 1), conc: max(b.conc, 1)}
			if err := m.c.SetConfig(m.config()); err != nil {
				t.Fatalf("step %d: SetConfig: %v", step, err)
			}
		case k < 19:
			m.pro = m.randLimits()
			if err := m.c.SetConfig(m.config()); err != nil {
				t.Fatalf("step %d: SetConfig with new plans: %v", step, err)
			}
		default:
			tenant := fmt.Sprintf("t%d", m.rng.IntN(4))
			m.tenants[tenant] = m.randLimits()
			m.onPro[tenant] = m.rng.IntN(2) == 0
			if err := m.c.SetTenant(tenant, m.tenantPlan(tenant)); err != nil {
				t.Fatalf("step %d: SetTenant: %v", step, err)
			}
		}
		// A ticket that can no longer hold its lease is one the caller
		// stops renewing: its work is over as far as the model goes.
		now := m.clock.Now()
		for i := 0; i < len(m.live); i++ {
			if ls := m.live[i]; !now.Before(ls.hi) {
				m.end(i, false)
				i--
			}
		}
		kept := m.orphans[:0]
		for _, ls := range m.orphans {
			if now.Before(ls.hi) {
				kept = append(kept, ls)
			}
		}
		m.orphans = kept
		kept = m.releasing[:0]
		for _, ls := range m.releasing {
			if now.Before(ls.hi) || now.Before(ls.until) {
				kept = append(kept, ls)
			}
		}
		m.releasing = kept
		if m.paused > 0 {
			if m.paused--; m.paused == 0 {
				m.resume()
			}
		}
	}
	if m.paused > 0 {
		m.resume()
	}
}
