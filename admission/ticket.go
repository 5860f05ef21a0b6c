package admission

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// A Ticket is an admitted request's claim on its policies' permits. Settle
// it when the work ends: Settle with the actual usage, or Done to keep the
// estimate. Settling releases concurrency permits, reconciles weighted
// permits (refunds an over-estimate, charges an overrun) and wakes queued
// requests. Settling twice is harmless, and so is settling the zero Ticket.
//
// A Ticket is a small value: copy it freely. Once settled, every copy is
// inert (the controller reuses the memory behind it, so a stale copy can
// never settle someone else's request).
//
// Settle and Done may be called from any goroutine, any number of times.
// Continue, Charge, Renew, Statuses and WouldReject must not run
// concurrently with Settle.
//
// While a ticket is live, the controller renews its concurrency leases
// (see the package documentation): a ticket holds its permits until it is
// settled, however long the work takes. One whose process stops renewing
// (crashed, or Controller.Close) or that is dropped without being settled
// does not hold them forever: they expire MaxHold after the last renewal,
// and the expiry is reported to the observer.
//
// A ticket from Controller.Begin holds the permits of the policies Begin
// decided until Continue evaluates the rest; it can be settled without
// Continue.
type Ticket struct {
	t   *ticket
	gen uint64
}

// ticket is the pooled state behind Tickets. What every call on a live
// ticket reads (c, gen, ops) comes first, within one cache line.
type ticket struct {
	c   *Controller
	gen atomic.Uint64
	ops []held
	// charged marks the ops a Charge may change (see chargeable), for
	// the first chargedN-1 ops; chargedN is 0 until it is worked out.
	charged   uint64
	chargedN  int
	cfg       *PolicySet // the configuration the ticket was admitted under
	start     time.Time
	tenant    string
	session   string
	model     string
	operation string
	priority  int
	retry     bool // Request.Retry
	batch     []backend.Op
	// dec is the event being reported, so observers get a pointer; its
	// Context is the call's, nil outside Admit, Begin and Continue.
	dec    Decision
	keybuf []byte
	// lease serialises the lease keeper's renewals of the ticket with its
	// settlement, Renew and Continue; kept says the keeper has the ticket,
	// in its shard; self is the ticket's weak pointer, made once (see
	// leaseKeeper).
	lease  sync.Mutex
	kept   bool
	shard  uint8
	stage  stage // next to kept and shard: one word for the three
	self   weak.Pointer[ticket]
	leases *keptLeases // copies of its leases' grants (see leaseKeeper)
}

// held is one policy's part of a ticket. What a charge reads of every
// held policy (p, taken, the grant's Taken) comes first, within one cache
// line: a stream is charged on nearly every chunk.
type held struct {
	p           *policy
	mode        limits.Mode
	taken       bool // the grant holds permits
	failOpen    bool // the store failed and the policy admitted without it
	local       bool // the grant is on the local fallback limiter
	wouldReject bool
	key         string
	lim         *limits.Limit // the partition's limit, owned by the configuration
	est         int64         // estimated cost, reserved at admission
	grant       backend.Grant
	wait        time.Duration
	renewed     time.Time     // when the lease was taken or last renewed (concurrency only)
	lost        bool          // the lease keeper found the lease expired (Renew tells)
	rem0        int64         // the partition's Remaining when the grant was taken
	remAfter    int64         // the partition's Remaining after the settlement (see Settlement)
	win         time.Duration // the Window of the admitted decision
}

// stage is how far a ticket's admission has gone.
type stage uint8

const (
	stageWhole     stage = iota // Admit: every policy
	stageBegun                  // Begin: the early policies, Continue to come
	stageContinued              // Continue: the rest too
)

func (h *held) status() Status {
	s := Status{
		Policy: h.p.Name, Mode: h.mode, Unit: h.p.unit, Algorithm: h.p.Algorithm,
		Limit: h.limit(), Window: h.window(), Remaining: h.grant.Remaining, Reset: h.grant.Reset,
		FailedOpen: h.failOpen,
	}
	switch {
	case h.p.Algorithm == limits.Concurrency:
		// At capacity (or refused) the wait is the policy's hint, never
		// 0, which would read as "retry now".
		s.Reset = 0
		if s.Remaining <= 0 || !h.grant.OK {
			s.Reset = h.p.retryHint()
		}
	case s.Window > 0 && s.Reset > s.Window:
		// A bucket in debt, or a sliding window counter still weighing
		// the current window's requests in the next one: the figures
		// promise no more than one window.
		s.Reset = s.Window
	}
	return s
}

// limit is the partition's limit in the header sense (see Status.Limit).
func (h *held) limit() int64 {
	if h.grant.Limit != 0 {
		return h.grant.Limit
	}
	return h.lim.Capacity()
}

// window is the time window the partition's limit applies to (see
// Status.Window): for a calendar quota, what is left of the grant's period.
func (h *held) window() time.Duration {
	if h.p.Algorithm == limits.Quota && h.lim.Period != limits.PeriodFixed {
		_, end := limits.QuotaPeriod(h.lim, h.grant.Stamp)
		return time.Duration(end - h.grant.Stamp)
	}
	return h.lim.Window()
}

// closing records in h.remAfter what the partition has left once h's grant
// holds final (0 for a concurrency grant, released whole): the Remaining
// at admission less what the ticket charged since, clamped to
// [0, limit]. See Settlement for what the figure promises. (Every term is
// within [0, MaxAmount]: no overflow.)
func (h *held) closing(final int64) {
	h.remAfter = min(max(h.rem0-(final-h.est), 0), h.limit())
}

// retryAfter is the wait a refusal of h advises.
func (h *held) retryAfter() time.Duration {
	if h.grant.RetryAfter == 0 && (h.p.Algorithm == limits.Concurrency || h.grant.Full) {
		return h.p.retryHint()
	}
	return h.grant.RetryAfter
}

// retryHint is the wait advised where none can be computed.
func (p *policy) retryHint() time.Duration {
	if p.RetryHint > 0 {
		return p.RetryHint
	}
	return limits.DefaultRetryHint
}

// final returns the amount to settle h at, and whether u knows it: the
// actual amount (clamped to [0, MaxAmount]), but never less than what
// Charge already charged beyond the estimate, as usage so far never
// decreases. So a settlement refunds only what the partition really took:
// the part of a charge the debt bound forgave is never given back.
func (h *held) final(u *Usage) (int64, bool) {
	actual, ok := u.amount(h.p.unit)
	if h.grant.Taken > h.est {
		actual = max(actual, h.grant.Taken)
	}
	return actual, ok
}

// settleDelta returns what settling h at u changes in its reservation:
// the final amount (see final) less what the grant holds, or 0 when u does
// not know the amount or h is a concurrency lease (released whole).
func (h *held) settleDelta(u *Usage) int64 {
	if h.p.Algorithm == limits.Concurrency {
		return 0
	}
	if actual, ok := h.final(u); ok {
		return actual - h.grant.Taken
	}
	return 0
}

// live returns the ticket state if tk is still the current holder.
func (tk Ticket) live() *ticket {
	if t := tk.t; t != nil && t.gen.Load() == tk.gen {
		return t
	}
	return nil
}

// Done settles the ticket at its estimate: concurrency permits are released
// and weighted permits stay charged as reserved.
func (tk Ticket) Done() { tk.Settle(Usage{}) }

// Settle settles the ticket with the actual usage of the work. Units whose
// actual amount is not known stay charged at their estimate.
func (tk Ticket) Settle(u Usage) {
	u.refund = false
	tk.settle(nil, &u)
}

// SettleContext settles the ticket as Settle does and hands ctx, the
// request's, to the observers with each Settlement, so that a metrics
// observer gives the request's trace to the histograms the settlement
// records (hold time, estimate accuracy) as their exemplar. The store
// calls are not made with ctx: a request cancelled or past its deadline
// still gives its permits back.
func (tk Ticket) SettleContext(ctx context.Context, u Usage) {
	u.refund = false
	tk.settle(ctx, &u)
}

// Refund settles the ticket as work that did not happen (a batch
// cancelled before it ran, a request re-decided under another policy
// file): every unit is given back, the request itself included, so a
// request-rate or request-quota policy counts it no more, and concurrency
// permits are released. Observers get a settlement with Actual 0. Only
// what Charge recorded beyond the estimate stays charged, as usage so far
// never decreases. Refunding a settled ticket is harmless.
func (tk Ticket) Refund() { tk.settle(nil, &Usage{refund: true}) }

// settle settles the ticket at u, once; rctx, the request's context or
// nil, goes to the observers only.
func (tk Ticket) settle(rctx context.Context, u *Usage) {
	t := tk.t
	// Claiming the ticket moves its generation on: every copy, this one
	// included, is inert from here.
	if t == nil || !t.gen.CompareAndSwap(tk.gen, tk.gen+1) {
		return
	}
	c := t.c
	c.keeper.drop(t)
	ctx := context.Background()
	if t.stage == stageBegun {
		// Begin's policies report the request admitted once its fate is
		// known: settled without Continue, it was.
		c.reportAdmitted(t, len(t.ops), false)
	}
	for i := 0; i < len(t.ops) && !c.nop; i++ {
		if h := &t.ops[i]; h.taken {
			final := int64(0) // a concurrency grant is released whole
			if h.p.Algorithm.IsRate() {
				final = h.grant.Taken + h.settleDelta(u)
			}
			h.closing(final)
		}
	}
	if t.cfg != t.c.cfg.Load() {
		t.limitsNow()
	}
	// Releasing needs no clock (leases are found by id); only a charge or
	// refund does, so a request settled at its estimate reads it once.
	// A usage that knows no amount (Done's) leaves every rate grant as
	// reserved: only concurrency leases have something to give back.
	now := t.start
	if len(t.ops) < 2 || c.batchSettle(ctx, t, u, now) == 0 {
		clockRead, known := false, u.knowsAny()
		for i := range t.ops {
			h := &t.ops[i]
			if !h.taken {
				continue
			}
			h.taken = false
			if !known && h.p.Algorithm != limits.Concurrency {
				continue
			}
			delta := h.settleDelta(u)
			if delta != 0 && !clockRead {
				now, clockRead = c.clock.Now(), true
			}
			c.settleOne(h, delta, now, false)
		}
	}
	for i := 0; i < len(t.ops) && !c.nop; i++ {
		h := &t.ops[i]
		actual := h.est
		if a, ok := u.amount(h.p.unit); ok && (h.p.Algorithm.IsRate() || u.refund) {
			actual = a
		}
		c.reportSettled(rctx, t, h, actual)
	}
	t.put()
}

// reportSettled reports to the observer how h's reservation ended, at
// actual, when h let the request through; ctx is the request's, or nil.
func (c *Controller) reportSettled(ctx context.Context, t *ticket, h *held, actual int64) {
	if !h.grant.OK && !h.failOpen {
		return
	}
	s := Settlement{
		Policy: h.p.Name, Mode: h.mode, Unit: h.p.unit, Algorithm: h.p.Algorithm, Tenant: t.tenant, Model: t.model,
		Estimated: h.est, Actual: actual, Admitted: t.start, Context: ctx,
	}
	if h.grant.OK { // a policy that failed open has no figures
		s.Limit, s.Remaining, s.Window = h.limit(), h.remAfter, h.win
	}
	if h.p.bySession {
		s.Session = t.session
	}
	c.obs.Settled(s)
}

// batchSettle settles t in one call when all its grants live on one
// Batcher store; it returns 0 when it did not.
func (c *Controller) batchSettle(ctx context.Context, t *ticket, u *Usage, now time.Time) int {
	if len(t.ops) < 2 {
		return 0
	}
	b := t.ops[0].p.batcher
	if b == nil {
		return 0
	}
	for i := range t.ops {
		h := &t.ops[i]
		if h.p.batcher != b || h.local || h.p.queues != nil || h.p.Store != t.ops[0].p.Store {
			return 0
		}
	}
	ops := t.batch[:0]
	adjusts := false
	for i := range t.ops {
		h := &t.ops[i]
		if !h.taken {
			continue
		}
		op := backend.Op{Limiter: h.p.limiter, Key: h.key, Limit: *h.lim, Grant: h.grant,
			Release: h.p.Algorithm == limits.Concurrency, N: h.settleDelta(u)}
		adjusts = adjusts || op.N != 0
		h.taken = false
		if op.Release || op.N != 0 {
			ops = append(ops, op)
		}
	}
	t.batch = ops
	if adjusts {
		// A refund or charge applies now, not at the admission (releases
		// need no clock).
		now = c.clock.Now()
	}
	if len(ops) > 0 {
		if err := b.SettleBatch(ctx, ops, now); err != nil {
			// Ops are in the order of t.ops; report each failed one under
			// its own policy.
			j := 0
			for i := range t.ops {
				h := &t.ops[i]
				if j < len(ops) && ops[j].Limiter == h.p.limiter && ops[j].Key == h.key {
					if ops[j].Err != nil || !anyOpErr(ops) {
						c.settleFailed(h, err)
						if ops[j].Release {
							c.keeper.released(h, err)
						}
					}
					j++
				}
			}
		}
	}
	return len(t.ops)
}

func anyOpErr(ops []backend.Op) bool {
	for i := range ops {
		if ops[i].Err != nil {
			return true
		}
	}
	return false
}

// Charge records usage so far while the work still runs (a long stream):
// every unit whose actual amount now exceeds what is charged is charged the
// difference at once, so parallel work cannot overshoot a rate limit by
// much. Usage so far never decreases: a later Settle with a smaller amount
// settles at what was charged. It returns a *Rejection (ErrQuotaExceeded or ErrRateLimited) when an
// enforcing policy's partition has nothing left after the charge, so the
// caller may cut the work off; the ticket stays live either way.
func (tk Ticket) Charge(u Usage) error {
	t := tk.live()
	if t == nil {
		return nil
	}
	now := t.c.clock.Now()
	if t.cfg != t.c.cfg.Load() {
		t.limitsNow()
	}
	var rej *Rejection
	if len(t.ops) <= 64 {
		for m := t.chargeable(); m != 0; m &= m - 1 {
			t.charge(&t.ops[bits.TrailingZeros64(m)], &u, now, &rej)
		}
	} else {
		for i := range t.ops {
			t.charge(&t.ops[i], &u, now, &rej)
		}
	}
	if rej != nil {
		return rej
	}
	return nil
}

// limitsNow points t's rate grants at the limits their partitions are
// under now (Controller.limitNow), for a ticket admitted under a set no
// longer installed (its callers check, inline, that it is not): a reload
// or plan change since the admission (another window, period, burst or
// limit) applies to the ticket's refund or charge as to the requests
// arriving. A settlement placed by the window of the older limit would
// move the partition on to that window, and forget what the window in
// force has counted since.
func (t *ticket) limitsNow() {
	for i := range t.ops {
		if h := &t.ops[i]; h.taken && !h.local && h.p.Algorithm.IsRate() {
			h.lim = t.c.limitNow(t.cfg, h, t.tenant)
		}
	}
}

// charge charges h, when it is a rate policy, what u exceeds its grant
// by, at now, and sets *rej (if still nil) when h enforces and has
// nothing left.
func (t *ticket) charge(h *held, u *Usage, now time.Time, rej **Rejection) {
	if !h.taken || !h.p.Algorithm.IsRate() {
		return
	}
	actual, ok := u.amount(h.p.unit)
	if !ok || actual <= h.grant.Taken {
		return
	}
	t.c.settleOne(h, actual-h.grant.Taken, now, false)
	if h.mode == limits.Enforce && h.grant.Remaining <= 0 && *rej == nil {
		reason := ReasonRate
		switch {
		case h.p.loop:
			reason = ReasonLoop
		case h.p.Algorithm == limits.Quota:
			reason = ReasonQuota
		}
		*rej = &Rejection{Policy: h.p.Name, Reason: reason, RetryAfter: h.grant.Reset, Status: h.status()}
	}
}

// chargeable returns the set of t's ops a Charge may change, bit i for
// op i, when t has at most 64: the rate policies of a unit other than
// requests (a charge never counts a request again). It is worked out once
// for the ticket's ops (a ticket's ops only grow while it lives), so that
// a charge, on nearly every chunk of a slow stream, reads only the
// policies it may charge.
func (t *ticket) chargeable() uint64 {
	if t.chargedN == len(t.ops)+1 {
		return t.charged
	}
	var m uint64
	for i := range t.ops {
		if p := t.ops[i].p; p.Algorithm.IsRate() && p.unit != limits.UnitRequests && p.unit != "" {
			m |= 1 << i
		}
	}
	t.charged, t.chargedN = m, len(t.ops)+1
	return m
}

// ErrNotBegun is returned by Continue on a ticket that did not come from
// Begin, was continued already, or is settled.
var ErrNotBegun = errors.New("admission: Continue on a ticket not from Begin, or continued or settled already")

// errOtherRequest is returned by Continue given another request than
// Begin's.
var errOtherRequest = errors.New("admission: Continue with another tenant, operation or priority than Begin's")

// Continue is the second stage of a staged admission (see
// Controller.Begin): it evaluates, for r, the full request (with its model
// and cost estimates, and the same tenant, operation and priority as
// Begin's), every matching policy Begin did not, in the order Admit would,
// waiting in queues until ctx ends. If one of them rejects, the
// *Rejection (or the context's error) is returned, everything Begin took
// is given back as well, and the ticket is settled: every copy is inert.
// Otherwise the ticket holds every policy's permits, to settle as an
// admitted one.
//
// Continue returns ErrNotBegun on a ticket that is not from Begin or was
// continued already, and an error, leaving the ticket as it was (to
// settle), when r's tenant, operation or priority differ from Begin's or an
// amount of r is outside [0, MaxAmount] (ErrInvalidCost). It must not run
// concurrently with Settle.
func (tk Ticket) Continue(ctx context.Context, r Request) error {
	t := tk.live()
	if t == nil || t.stage != stageBegun {
		return ErrNotBegun
	}
	if r.Tenant != t.tenant || r.Operation != t.operation || r.Priority != t.priority {
		return errOtherRequest
	}
	_, err := t.c.admit(ctx, t, &r, true, stageContinued)
	return err
}

// ErrLeaseExpired is returned by Renew when a concurrency lease of the
// ticket had expired before it was renewed: its permit is free for others,
// and the work now runs uncounted by that policy.
var ErrLeaseExpired = errors.New("admission: concurrency lease expired before it was renewed")

// Renew extends the concurrency leases the ticket holds by their policy's
// MaxHold from now. The controller's lease keeper does so on its own for
// every live ticket; Renew is for a controller whose keeper is closed, or
// to learn at once whether a lease was lost. It calls a lease's store only
// once half its MaxHold has passed since the lease was taken or last
// renewed, so calling it on every chunk of a stream costs a clock read.
//
// Renew returns ErrLeaseExpired (matched with errors.Is) when a lease had
// expired already (it is not taken again; a loss the keeper found is told
// once, by the next Renew), a store's error when a store
// failed (the lease is renewed at a later call), and an error wrapping
// errors.ErrUnsupported when a policy's store cannot renew leases. It is
// a no-op on a settled ticket. It must not run concurrently with Settle.
func (tk Ticket) Renew() error {
	t := tk.live()
	if t == nil {
		return nil
	}
	t.lease.Lock() // the lease keeper may be renewing too
	defer t.lease.Unlock()
	var now time.Time
	var errs []error
	for i := range t.ops {
		h := &t.ops[i]
		if h.lost {
			h.lost = false
			errs = append(errs, fmt.Errorf("admission: policy %q: %w", h.p.Name, ErrLeaseExpired))
		}
		if !h.taken || h.p.Algorithm != limits.Concurrency || h.grant.Stamp == 0 {
			continue
		}
		if now.IsZero() {
			now = t.c.clock.Now()
		}
		if now.Sub(h.renewed) < h.lim.MaxHold/2 {
			continue
		}
		if err := t.c.renew(h, now); err != nil {
			errs = append(errs, err)
		}
		if h.grant.Stamp == 0 {
			t.leases.lost(i) // its store counts it no more
		}
	}
	return errors.Join(errs...)
}

// renew renews the lease of h at now.
func (c *Controller) renew(h *held, now time.Time) error {
	if err := c.renewGrant(h, &h.grant, now); err != nil {
		return err
	}
	if h.grant.Stamp == 0 {
		return fmt.Errorf("admission: policy %q: %w", h.p.Name, ErrLeaseExpired)
	}
	h.renewed = now
	return nil
}

// errNoRenew is the error of renewing h on a store that cannot.
func errNoRenew(h *held) error {
	return fmt.Errorf("admission: policy %q: store %q cannot renew leases: %w", h.p.Name, h.p.Store, errors.ErrUnsupported)
}

// wrapRenew wraps a store's error renewing h.
func wrapRenew(h *held, err error) error {
	return fmt.Errorf("admission: policy %q: renewing a lease: %w", h.p.Name, err)
}

// Statuses appends the standing of every policy the ticket passed to dst,
// for response headers, and returns the extended slice.
func (tk Ticket) Statuses(dst []Status) []Status {
	t := tk.live()
	if t == nil {
		return dst
	}
	for i := range t.ops {
		dst = append(dst, t.ops[i].status())
	}
	return dst
}

// QueueWait returns how long the request waited in policies' queues
// before it was admitted (the sum over its queued policies; zero when it
// was admitted at once or the ticket is settled).
func (tk Ticket) QueueWait() time.Duration {
	t := tk.live()
	if t == nil {
		return 0
	}
	var d time.Duration
	for i := range t.ops {
		d += t.ops[i].wait
	}
	return d
}

// WouldReject appends to dst the names of the shadow policies that would
// have rejected the request, and returns the extended slice.
func (tk Ticket) WouldReject(dst []string) []string {
	t := tk.live()
	if t == nil {
		return dst
	}
	for i := range t.ops {
		if t.ops[i].wouldReject {
			dst = append(dst, t.ops[i].p.Name)
		}
	}
	return dst
}

// Valid reports whether the ticket is live (admitted and not yet settled).
func (tk Ticket) Valid() bool { return tk.live() != nil }

// recycle returns an unissued ticket to the pool.
func (t *ticket) recycle() {
	t.gen.Add(1)
	t.put()
}

// put returns a ticket whose generation has moved on to the pool. The ops
// keep their references until overwritten: they point into the
// configuration and the requests' strings, and the pool drops idle tickets
// at the next collection.
func (t *ticket) put() {
	t.ops = t.ops[:0]
	t.chargedN = 0
	t.batch = t.batch[:0]
	t.c.tickets.Put(t)
}
