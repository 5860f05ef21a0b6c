package modeltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// RunReload drives one policy of algorithm alg, weighted (it counts
// tokens) and keyed by tenant, through ops random operations drawn from
// seed: admissions of any cost (zero and above the limit included),
// settlements below and above the estimate, Done, Refund, Charge, Renew,
// a second Done on a ticket settled already, the clock's advance (by
// nothing at times), and reloads interleaved with them: SetConfig
// changing the policy's limit (up and down), burst and window (Per),
// SetPlans and SetTenant moving tenants between plans and changing their
// overrides.
// Odd seeds add a second policy that never refuses (a fixed window of a
// huge limit), so that decisions go through batches and rollbacks rather
// than the single policy's path.
//
// Three controllers run the same operations on one fake clock: e, the
// policy enforced; s, the same policy switched between shadow and
// enforce by SetConfig at random; and, when red is not nil, r, the policy
// enforced on red (a shared store using the caller's time). The lease
// keeper runs in each, so that a live ticket's lease never expires.
//
// What it asserts, at every step:
//
//   - Shadow: s decides exactly as e (a shadow policy keeps the state
//     it would keep enforcing), so where s's policy is a shadow one its
//     would-reject equals e's rejection, with the same figures.
//   - Redis: r answers as e, with the same retry-after and the policy's
//     figures (the stores agree but for the resolution of time,
//     microseconds, which the clock's steps respect), except for a
//     token bucket's tenant between a raise of its capacity and the
//     moment both stores read its partition full again (see raise).
//     r's admissions are held to the rate promise below all the same.
//     On Redis the window of a fixed window or sliding window counter
//     is not changed: a window lengthened by a reload starts from the
//     count Redis keeps under the new window's start, where memory
//     carries the current shorter window's count into it.
//   - Concurrency: a request is admitted iff the cost of the tickets
//     live plus its own fits the cap in force for its tenant (work
//     admitted before a lowering stays; nothing expires while the keeper
//     runs), and Stats' in-flight figure is the cost live. Every permit
//     is released once: when every ticket is done, in-flight is zero and
//     every partition reads full.
//   - Rate algorithms: within a stretch of a tenant's decisions and
//     settlements made under one limit, the cost admitted in any stretch of time is within
//     the policy's promise plus the cost refunded in it (a refund gives
//     back room; a settlement's overrun only takes more): a token bucket
//     admits at most Burst + rate·d in any interval of length d, a fixed
//     window and a sliding window counter at most Limit in any aligned
//     window, a sliding log at most Limit in any rolling window, a quota
//     at most Limit in a period.
func RunReload(t testing.TB, red backend.Store, alg limits.Algorithm, seed uint64, ops int) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("RunReload(%v, seed=%d, ops=%d)", alg, seed, ops)
		}
	}()
	m := &reloadModel{
		t: t, alg: alg, rng: rand.New(rand.NewPCG(seed, 0x7e10ad)),
		clock: admissiontest.NewClock(backendtest.Epoch), pad: seed%2 == 1,
		base: 40, pro: 100, tenants: map[string]tenantPlan{},
		hist: map[string]*stretch{}, diverged: map[string]bool{}, caps: map[string]int64{},
	}
	m.per = 10 * time.Second
	m.perChanges = red == nil || (alg != limits.FixedWindow && alg != limits.SlidingWindow)
	if alg == limits.Quota {
		m.per = 30 * time.Second
	}
	newCtl := func(store string, st backend.Store) *admission.Controller {
		opts := []admission.Option{admission.WithClock(m.clock)}
		if st != nil {
			opts = append(opts, admission.WithStore(store, st))
		}
		c, err := admission.New(m.config(store, limits.Enforce), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	m.e = newCtl("", nil)
	m.s = newCtl("", nil)
	if red != nil {
		m.r = newCtl("red", red)
	}
	defer func() {
		for _, c := range m.controllers() {
			c.Close()
		}
	}()
	for step := range ops {
		m.step = step
		m.advance()
		switch k := m.rng.IntN(40); {
		case k < 16 || len(m.live) == 0:
			m.admit()
		case k < 21:
			m.settle(m.rng.IntN(len(m.live)))
		case k < 23:
			m.done(m.rng.IntN(len(m.live)))
		case k < 25:
			m.refund(m.rng.IntN(len(m.live)))
		case k < 27:
			m.charge(m.rng.IntN(len(m.live)))
		case k < 29:
			m.renew(m.rng.IntN(len(m.live)))
		case k < 31:
			m.again()
		case k < 34:
			m.reload()
		case k < 36:
			m.setPlans()
		default:
			m.setTenant()
		}
		m.checkInFlight()
	}
	for len(m.live) > 0 {
		m.done(0)
	}
	m.checkInFlight()
	if alg == limits.Concurrency {
		for _, tenant := range reloadTenants {
			for _, c := range m.controllers() {
				sts, err := c.Remaining(context.Background(), admission.Request{Tenant: tenant}, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, st := range sts {
					if st.Policy == "p" && st.Remaining != st.Limit {
						t.Fatalf("every ticket done: %s's cap reads %d left of %d", tenant, st.Remaining, st.Limit)
					}
				}
			}
		}
	}
	if m.admitted == 0 || m.rejected == 0 {
		t.Fatalf("%d admitted, %d rejected: the traffic does not exercise the limit", m.admitted, m.rejected)
	}
}

var reloadTenants = []string{"t0", "t1", "t2"}

// tenantPlan is a tenant's plan and own override (0: none).
type tenantPlan struct {
	pro   bool
	limit int64
}

// reloadTicket is one request's tickets: e's (zero when e refused), s's
// (a shadow's admission of what e refused, or the twin of e's) and r's.
type reloadTicket struct {
	e, s, r admission.Ticket
	tenant  string
	cost    int64
	charged bool // Charge was called: the refund is bounded by cost only
	eAdmit  bool
	rAdmit  bool
	lim     limits.Limit // the tenant's limit at the admission
	// agreed: e's and r's answers to the admission were compared (the
	// figures a ticket keeps are its admission's).
	agreed  bool
	sShadow bool // s's policy was a shadow one at the admission
}

type reloadModel struct {
	t       testing.TB
	alg     limits.Algorithm
	rng     *rand.Rand
	clock   *admissiontest.Clock
	e, s, r *admission.Controller
	pad     bool
	// perChanges: reloads change the window (Per) too; see RunReload.
	perChanges bool
	step       int

	per     time.Duration
	base    int64 // the policy's Limit
	burst   int64 // its Burst (token bucket; 0: the limit)
	pro     int64 // the pro plan's override (0: none)
	tenants map[string]tenantPlan
	shadow  bool // s's policy is a shadow one
	live    []*reloadTicket
	settled []admission.Ticket  // handles of settled tickets, of every controller
	hist    map[string]*stretch // by controller ("e", "r") and tenant
	// diverged are the tenants whose token bucket r may read fuller than
	// e: see raise.
	diverged map[string]bool
	caps     map[string]int64 // each tenant's capacity installed
	admitted int
	rejected int
}

// stretch is a tenant's history under one limit: the admissions and the
// refunds (negative costs) since the limit was last changed.
type stretch struct {
	lim    limits.Limit
	events []reloadEvent
}

type reloadEvent struct {
	at   time.Time
	cost int64 // > 0 admitted, < 0 refunded (at most)
}

func (m *reloadModel) controllers() []*admission.Controller {
	cs := []*admission.Controller{m.e, m.s}
	if m.r != nil {
		cs = append(cs, m.r)
	}
	return cs
}

func (m *reloadModel) policy(store string, mode limits.Mode) admission.Policy {
	p := admission.Policy{
		Name: "p", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
		Algorithm: m.alg, Limit: m.base, Per: m.per, Burst: m.burst, Mode: mode, Store: store,
	}
	switch m.alg {
	case limits.Concurrency:
		p.Per, p.MaxHold = 0, time.Minute
	case limits.Quota:
		p.Period = limits.PeriodFixed
	}
	return p
}

func (m *reloadModel) plans() limits.Plans {
	pro := map[string]limits.Override{}
	if m.pro > 0 {
		pro["p"] = limits.Override{Limit: m.pro}
	}
	pl := limits.Plans{Default: "free", Plans: map[string]map[string]limits.Override{"free": {}, "pro": pro}, Tenants: map[string]limits.TenantPlan{}}
	for tenant, tp := range m.tenants {
		pl.Tenants[tenant] = *tp.plan()
	}
	return pl
}

func (tp tenantPlan) plan() *limits.TenantPlan {
	p := &limits.TenantPlan{Plan: "free"}
	if tp.pro {
		p.Plan = "pro"
	}
	if tp.limit > 0 {
		p.Overrides = map[string]limits.Override{"p": {Limit: tp.limit}}
	}
	return p
}

func (m *reloadModel) config(store string, mode limits.Mode) admission.Config {
	ps := []admission.Policy{m.policy(store, mode)}
	if m.pad {
		ps = append(ps, admission.Policy{Name: "pad", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.FixedWindow, Limit: 1 << 40, Per: time.Hour, Store: store})
	}
	return admission.Config{Policies: ps, Plans: m.plans()}
}

// limit returns the tenant's limit in force.
func (m *reloadModel) limit(tenant string) limits.Limit {
	p := m.policy("", limits.Enforce)
	l := p.Base()
	tp := m.tenants[tenant]
	if tp.pro && m.pro > 0 {
		l = limits.Override{Limit: m.pro}.Apply(l)
	}
	if tp.limit > 0 {
		l = limits.Override{Limit: tp.limit}.Apply(l)
	}
	return l
}

func (m *reloadModel) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("step %d at %v: %s", m.step, m.clock.Now().Sub(backendtest.Epoch), fmt.Sprintf(format, args...))
}

// advance moves the clock by whole microseconds (Redis's resolution),
// by nothing one step in six.
func (m *reloadModel) advance() {
	if m.rng.IntN(6) == 0 {
		return
	}
	d := time.Duration(m.rng.Int64N(int64(3*time.Second)/1000)) * time.Microsecond
	m.clock.Advance(d)
}

// amount draws a cost or a usage around the limits in play.
func (m *reloadModel) amount() int64 {
	switch m.rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return m.rng.Int64N(250)
	}
	return 1 + m.rng.Int64N(30)
}

// figures is a status without its mode, which s's differs in.
func figures(st admission.Status) string {
	st.Mode = 0
	return fmt.Sprintf("%+v", st)
}

func statusOf(tk admission.Ticket, name string) (admission.Status, bool) {
	for _, st := range tk.Statuses(nil) {
		if st.Policy == name {
			return st, true
		}
	}
	return admission.Status{}, false
}

func (m *reloadModel) admit() {
	tenant := reloadTenants[m.rng.IntN(len(reloadTenants))]
	cost := m.amount()
	lim := m.limit(tenant)
	r := admission.Request{Tenant: tenant, Tokens: cost}
	ctx := context.Background()
	inflight := m.inFlight(tenant)
	m.resync(tenant)
	m.touch("e", tenant, lim)
	m.touch("r", tenant, lim)

	te, ee := m.e.TryAdmit(ctx, r)
	ts, es := m.s.TryAdmit(ctx, r)
	var rejE, rejS *admission.Rejection
	if ee != nil && !errors.As(ee, &rejE) {
		m.fatalf("e: %v", ee)
	}
	if es != nil && !errors.As(es, &rejS) {
		m.fatalf("s: %v", es)
	}
	// e against the reference where it is exact.
	if m.alg == limits.Concurrency {
		want := inflight+cost <= lim.Amount
		if want != (ee == nil) {
			m.fatalf("%s's request of %d with %d in flight under a cap of %d: admitted=%v", tenant, cost, inflight, lim.Amount, ee == nil)
		}
	}
	// s as e.
	switch {
	case m.shadow && es != nil:
		m.fatalf("s's shadow policy refused: %v", es)
	case !m.shadow && (ee == nil) != (es == nil):
		m.fatalf("%s's request of %d: e %v, s (enforcing) %v", tenant, cost, ee, es)
	case !m.shadow && rejE != nil && (rejE.RetryAfter != rejS.RetryAfter || figures(rejE.Status) != figures(rejS.Status)):
		m.fatalf("refused by e %+v, by s %+v", rejE, rejS)
	case m.shadow:
		would := len(ts.WouldReject(nil)) > 0
		if would != (ee != nil) {
			m.fatalf("%s's request of %d: e %v, s's shadow would reject: %v", tenant, cost, ee, would)
		}
		st, _ := statusOf(ts, "p")
		want := admission.Status{}
		if rejE != nil {
			want = rejE.Status
		} else {
			want, _ = statusOf(te, "p")
		}
		if figures(st) != figures(want) {
			m.fatalf("%s's request of %d: e's figures %+v, s's shadow's %+v", tenant, cost, want, st)
		}
	case ee == nil && figures(mustStatus(te)) != figures(mustStatus(ts)):
		m.fatalf("admitted with figures %+v by e, %+v by s", te.Statuses(nil), ts.Statuses(nil))
	}
	// r as e.
	var tr admission.Ticket
	var er error
	if m.r != nil {
		tr, er = m.r.TryAdmit(ctx, r)
		if got, want := answer(tr, er), answer(te, ee); got != want && !m.diverged[tenant] {
			m.fatalf("%s's request of %d:\n redis  %s\n memory %s", tenant, cost, got, want)
		}
		if er == nil {
			m.record("r", tenant, lim, cost)
		}
	}
	lt := &reloadTicket{s: ts, r: tr, tenant: tenant, cost: cost, lim: lim, sShadow: m.shadow, rAdmit: m.r != nil && er == nil, agreed: !m.diverged[tenant]}
	if ee != nil {
		m.rejected++
	} else {
		m.admitted++
		m.record("e", tenant, lim, cost)
		lt.e, lt.eAdmit = te, true
	}
	if lt.e.Valid() || lt.s.Valid() || lt.r.Valid() {
		m.live = append(m.live, lt)
	}
}

func mustStatus(tk admission.Ticket) admission.Status {
	st, _ := statusOf(tk, "p")
	return st
}

// answer is a decision as the Redis comparison reads it: the policy p's
// figures (the pad policy's count differs once the stores have, see
// raise).
func answer(tk admission.Ticket, err error) string {
	var rej *admission.Rejection
	if errors.As(err, &rej) {
		return fmt.Sprintf("rejected by %s (%v) retry=%v %+v", rej.Policy, rej.Reason, rej.RetryAfter, rej.Status)
	}
	if err != nil {
		return "error " + err.Error()
	}
	return fmt.Sprintf("admitted %+v", mustStatus(tk))
}

// inFlight is the cost e's live tickets of tenant hold.
func (m *reloadModel) inFlight(tenant string) int64 {
	var n int64
	for _, lt := range m.live {
		if lt.eAdmit && (tenant == "" || lt.tenant == tenant) {
			n += lt.cost
		}
	}
	return n
}

func (m *reloadModel) checkInFlight() {
	if m.alg != limits.Concurrency {
		return
	}
	want := m.inFlight("")
	for i, c := range []*admission.Controller{m.e, m.s, m.r} {
		if c == nil {
			continue
		}
		for _, st := range c.Stats() {
			if st.Name == "p" && st.InFlight != want {
				m.fatalf("controller %d: Stats in flight = %d; want %d", i, st.InFlight, want)
			}
		}
	}
}

// record adds an admission to the tenant's stretch and checks the
// promise of the limit over it.
func (m *reloadModel) record(ctl, tenant string, lim limits.Limit, cost int64) {
	if m.alg == limits.Concurrency {
		return
	}
	s := m.touch(ctl, tenant, lim)
	now := m.clock.Now()
	s.events = append(s.events, reloadEvent{at: now, cost: cost})
	m.checkStretch(tenant, s, now)
}

// touch returns the tenant's stretch under lim on controller ctl: a
// decision or a settlement under another limit than the stretch's (a
// shorter window that forgot older admissions, a settlement adjusting
// the partition under its ticket's older limit) ends it.
func (m *reloadModel) touch(ctl, tenant string, lim limits.Limit) *stretch {
	s := m.hist[ctl+"/"+tenant]
	if s == nil || s.lim != lim {
		s = &stretch{lim: lim}
		m.hist[ctl+"/"+tenant] = s
	}
	return s
}

// refunded notes that up to n of lt's cost was given back now, by each
// controller that admitted it.
func (m *reloadModel) refunded(lt *reloadTicket, n int64) {
	for ctl, ok := range map[string]bool{"e": lt.eAdmit, "r": lt.rAdmit} {
		if s := m.hist[ctl+"/"+lt.tenant]; s != nil && ok && n > 0 {
			s.events = append(s.events, reloadEvent{at: m.clock.Now(), cost: -n})
		}
	}
}

// checkStretch checks the admissions of s up to now against the promise
// of its limit, each interval ending now.
func (m *reloadModel) checkStretch(tenant string, s *stretch, now time.Time) {
	l := s.lim
	per := l.Per
	sum := func(from time.Time, incl bool) int64 {
		var n int64
		for _, ev := range s.events {
			if ev.at.After(from) || (incl && ev.at.Equal(from)) {
				n += ev.cost
			}
		}
		return n
	}
	switch l.Algorithm {
	case limits.TokenBucket:
		perNs, _ := l.Rates()
		for _, ev := range s.events {
			if ev.cost <= 0 {
				continue
			}
			got := sum(ev.at, true)
			bound := float64(l.Capacity()) + perNs*float64(now.Sub(ev.at))
			if float64(got) > bound*(1+1e-9)+1e-6 {
				m.fatalf("%s: %d admitted in the %v from %v under %+v; at most %.3f", tenant, got, now.Sub(ev.at), ev.at.Sub(backendtest.Epoch), l, bound)
			}
		}
	case limits.FixedWindow, limits.SlidingWindow, limits.Quota:
		start := now.Truncate(per) // the epoch is a whole number of windows
		if got := sum(start, true); got > l.Amount {
			m.fatalf("%s: %d admitted in the window from %v under %+v", tenant, got, start.Sub(backendtest.Epoch), l)
		}
	case limits.SlidingLog:
		if got := sum(now.Add(-per), false); got > l.Amount {
			m.fatalf("%s: %d admitted in the %v to now under %+v", tenant, got, per, l)
		}
	}
}

// each applies f to the live tickets of lt that exist, and notes them
// settled when settles.
func (m *reloadModel) each(lt *reloadTicket, settles bool, f func(admission.Ticket) error) []error {
	var errs []error
	for _, tk := range []admission.Ticket{lt.e, lt.s, lt.r} {
		if !tk.Valid() {
			errs = append(errs, nil)
			continue
		}
		errs = append(errs, f(tk))
		if settles {
			m.settled = append(m.settled, tk)
		}
	}
	return errs
}

func (m *reloadModel) remove(i int) *reloadTicket {
	lt := m.live[i]
	m.live = append(m.live[:i], m.live[i+1:]...)
	return lt
}

func (m *reloadModel) settle(i int) {
	lt := m.remove(i)
	m.touch("e", lt.tenant, m.limit(lt.tenant))
	m.touch("r", lt.tenant, m.limit(lt.tenant))
	var actual int64
	switch m.rng.IntN(3) {
	case 0:
		actual = m.rng.Int64N(lt.cost + 1) // an under-run
	case 1:
		actual = lt.cost + m.rng.Int64N(3*lt.cost+5) // an overrun
	default:
		actual = lt.cost
	}
	u := admission.Usage{Tokens: actual, TokensKnown: true}
	m.each(lt, true, func(tk admission.Ticket) error { tk.Settle(u); return nil })
	if lt.charged {
		m.refunded(lt, lt.cost)
	} else {
		m.refunded(lt, lt.cost-actual)
	}
}

func (m *reloadModel) done(i int) {
	lt := m.remove(i)
	m.touch("e", lt.tenant, m.limit(lt.tenant))
	m.touch("r", lt.tenant, m.limit(lt.tenant))
	m.each(lt, true, func(tk admission.Ticket) error { tk.Done(); return nil })
	if lt.charged {
		m.refunded(lt, lt.cost)
	}
}

func (m *reloadModel) refund(i int) {
	lt := m.remove(i)
	m.touch("e", lt.tenant, m.limit(lt.tenant))
	m.touch("r", lt.tenant, m.limit(lt.tenant))
	m.each(lt, true, func(tk admission.Ticket) error { tk.Refund(); return nil })
	m.refunded(lt, lt.cost)
}

func (m *reloadModel) charge(i int) {
	lt := m.live[i]
	m.touch("e", lt.tenant, m.limit(lt.tenant))
	m.touch("r", lt.tenant, m.limit(lt.tenant))
	u := admission.Usage{Tokens: m.rng.Int64N(3*lt.cost + 5), TokensKnown: true}
	errs := m.each(lt, false, func(tk admission.Ticket) error { return tk.Charge(u) })
	for _, err := range errs {
		var rej *admission.Rejection
		if err != nil && !errors.As(err, &rej) {
			m.fatalf("Charge(%d): %v", u.Tokens, err)
		}
	}
	// A charge that leaves an enforcing policy nothing says so: e, and r
	// alike, and s when its policy enforced the admission (a ticket keeps
	// the mode it was admitted under).
	same := lt.eAdmit && lt.rAdmit && lt.agreed && !m.diverged[lt.tenant]
	if same && fmt.Sprint(errs[0]) != fmt.Sprint(errs[2]) {
		m.fatalf("Charge(%d):\n redis  %v\n memory %v", u.Tokens, errs[2], errs[0])
	}
	if lt.eAdmit && !lt.sShadow && fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) {
		m.fatalf("Charge(%d): e %v, s %v", u.Tokens, errs[0], errs[1])
	}
	lt.charged = true
	if same {
		if got, want := fmt.Sprint(mustStatus(lt.r)), fmt.Sprint(mustStatus(lt.e)); got != want {
			m.fatalf("after Charge(%d):\n redis  %s\n memory %s", u.Tokens, got, want)
		}
	}
}

func (m *reloadModel) renew(i int) {
	errs := m.each(m.live[i], false, func(tk admission.Ticket) error { return tk.Renew() })
	for _, err := range errs {
		if err != nil {
			m.fatalf("Renew: %v", err)
		}
	}
}

// again settles a ticket settled already: nothing happens, whatever
// ticket the controller has since made of its memory.
func (m *reloadModel) again() {
	if len(m.settled) == 0 {
		return
	}
	tk := m.settled[m.rng.IntN(len(m.settled))]
	if tk.Valid() {
		m.fatalf("a settled ticket is valid")
	}
	switch m.rng.IntN(3) {
	case 0:
		tk.Done()
	case 1:
		tk.Refund()
	default:
		tk.Settle(admission.Usage{Tokens: m.amount(), TokensKnown: true})
	}
	if len(m.settled) > 1000 {
		m.settled = m.settled[len(m.settled)-1000:]
	}
}

func (m *reloadModel) install(what string, f func(c *admission.Controller, store string, mode limits.Mode) error) {
	mode := limits.Enforce
	if m.shadow {
		mode = limits.Shadow
	}
	if err := f(m.e, "", limits.Enforce); err != nil {
		m.fatalf("%s on e: %v", what, err)
	}
	if err := f(m.s, "", mode); err != nil {
		m.fatalf("%s on s: %v", what, err)
	}
	if m.r != nil {
		if err := f(m.r, "red", limits.Enforce); err != nil {
			m.fatalf("%s on r: %v", what, err)
		}
	}
	m.raise()
}

// raise notes the tenants whose token bucket capacity the last
// installation raised, on a run with r. The stores disagree there: a
// bucket full under the old capacity is a key Redis has deleted, which
// reads full under the new one, where memory keeps the partition (until
// it has idled for its IdleTimeout) at the old capacity's level, to
// refill from there. Their decisions are compared again once both read
// the partition full (see resync).
func (m *reloadModel) raise() {
	for _, tenant := range reloadTenants {
		l := m.limit(tenant)
		if c, ok := m.caps[tenant]; ok && l.Capacity() > c && m.r != nil && m.alg == limits.TokenBucket {
			m.diverged[tenant] = true
		}
		m.caps[tenant] = l.Capacity()
	}
}

// resync ends the divergence of tenant when its partition reads full
// (Remaining, which changes nothing) on e and on r alike: both then hold
// the same state, a full bucket.
func (m *reloadModel) resync(tenant string) {
	if !m.diverged[tenant] {
		return
	}
	for _, c := range []*admission.Controller{m.e, m.r} {
		sts, err := c.Remaining(context.Background(), admission.Request{Tenant: tenant}, nil)
		if err != nil {
			m.fatalf("Remaining: %v", err)
		}
		for _, st := range sts {
			if st.Policy == "p" && st.Remaining < st.Limit {
				return
			}
		}
	}
	m.diverged[tenant] = false
}

// reload changes the policy's limit, burst or s's mode.
func (m *reloadModel) reload() {
	switch m.rng.IntN(5) {
	case 0:
		m.shadow = !m.shadow
	case 4:
		if m.alg != limits.Concurrency && m.perChanges {
			m.per = []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second}[m.rng.IntN(3)]
		}
	case 1:
		if m.alg == limits.TokenBucket {
			m.burst = []int64{0, 10, 60, 200}[m.rng.IntN(4)]
			break
		}
		fallthrough
	default:
		m.base = 1 + m.rng.Int64N(120)
	}
	m.install("SetConfig", func(c *admission.Controller, store string, mode limits.Mode) error {
		return c.SetConfig(m.config(store, mode))
	})
}

// setPlans changes the pro plan's limit and moves a tenant between
// plans, all plans at once.
func (m *reloadModel) setPlans() {
	m.pro = m.rng.Int64N(150)
	tenant := reloadTenants[m.rng.IntN(len(reloadTenants))]
	tp := m.tenants[tenant]
	tp.pro = !tp.pro
	m.tenants[tenant] = tp
	pl := m.plans()
	m.install("SetPlans", func(c *admission.Controller, _ string, _ limits.Mode) error { return c.SetPlans(pl) })
}

// setTenant changes one tenant's plan and override.
func (m *reloadModel) setTenant() {
	tenant := reloadTenants[m.rng.IntN(len(reloadTenants))]
	tp := tenantPlan{pro: m.rng.IntN(2) == 0}
	if m.rng.IntN(2) == 0 {
		tp.limit = 1 + m.rng.Int64N(120)
	}
	m.tenants[tenant] = tp
	m.install("SetTenant", func(c *admission.Controller, _ string, _ limits.Mode) error {
		return c.SetTenant(tenant, tp.plan())
	})
}
