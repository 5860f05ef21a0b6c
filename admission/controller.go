package admission

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
)

// Config is what a Controller enforces: its policies and the tenants'
// plans (package limits holds the vocabulary of both).
type Config = limits.Config

// A Policy is one limit; see limits.Policy.
type Policy = limits.Policy

// An Option configures a Controller.
type Option func(*Controller)

// WithClock sets the clock; the default is SystemClock.
func WithClock(c Clock) Option { return func(ctl *Controller) { ctl.clock = c } }

// WithObserver sets the observer of decisions; the default ignores them.
func WithObserver(o Observer) Option { return func(ctl *Controller) { ctl.obs = o } }

// WithStore registers a store under a name that policies refer to in their
// Store field.
func WithStore(name string, s backend.Store) Option {
	return func(ctl *Controller) { ctl.stores[name] = s }
}

// A Controller admits requests against a set of policies. It is safe for
// concurrent use; its configuration can be replaced while it runs. While
// its tickets hold concurrency leases, it renews them and retries the
// releases its stores failed, in the background, until Close.
type Controller struct {
	clock     Clock
	obs       Observer
	nop       bool // obs ignores everything: skip building events
	stores    map[string]backend.Store
	cfg       atomic.Pointer[PolicySet]
	allShadow atomic.Bool
	tickets   sync.Pool
	keeper    leaseKeeper
	mu        sync.Mutex // serialises configuration changes
}

// A PolicySet is one compiled configuration of a Controller: its
// policies in evaluation order, each with its partitions, and every
// tenant's effective limits. It is immutable: Compile builds one, Install
// makes it the controller's own, WithTenant derives another sharing all
// but one shard of the tenants. A request naming a set
// (Request.Policies) is decided by that set alone, and its ticket
// settles against it, whatever the controller installs meanwhile; so a
// program that derives several things from one file (the policies, the
// key table saying whose they are, prices) decides every request with
// the things of one file, read once.
type PolicySet struct {
	ctl      *Controller
	policies []*policy // in evaluation order
	early    int       // policies[:early] are decided by Begin
	// lone is the set's only policy when it is a rate policy that every
	// request meets and one limiter call decides: admit's short way.
	lone   *policy
	byName map[string]*policy
	limits *limitTable
	// installed is set once the set has been the controller's: its
	// requests waiting in queues are served under the limits installed
	// after it (see limitNow).
	installed atomic.Bool
}

// policy is an installed Policy with its state.
type policy struct {
	Policy
	base  limits.Limit
	unit  limits.Unit
	class int
	index int
	// bySession is set when the key holds limits.KeySession: the policy
	// applies only to requests of a session.
	bySession bool
	// loop is set when the key holds limits.KeyFingerprint: the policy
	// applies only to requests with a fingerprint, and refuses with
	// ReasonLoop.
	loop bool
	// always is set when the policy applies to every request: it is not
	// off, matches every operation and model, and is keyed by neither
	// session nor fingerprint.
	always bool
	// alone is set when the policy is decided by one call of its own
	// limiter: it has no queue and its store does not batch.
	alone bool
	*policyState
}

// policyState is what survives a configuration change: the partitions.
type policyState struct {
	limiter backend.Limiter
	batcher backend.Batcher
	renewer bool // the limiter is a backend.Renewer
	// renewBatcher is the store when it renews leases in batches.
	renewBatcher backend.RenewBatcher
	queues       *queueSet
	local        struct {
		once sync.Once
		l    backend.Limiter
	}
}

// New returns a Controller enforcing cfg.
func New(cfg Config, opts ...Option) (*Controller, error) {
	c := &Controller{
		clock:  SystemClock{},
		obs:    NopObserver{},
		stores: map[string]backend.Store{"": memstore.Store{}, "memory": memstore.Store{}},
	}
	for _, o := range opts {
		o(c)
	}
	_, c.nop = c.obs.(NopObserver)
	c.keeper.init(c)
	c.tickets.New = func() any { return c.keeper.newTicket() }
	if err := c.SetConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// SetConfig replaces the policies and plans: Compile, then Install. It
// validates cfg first and keeps the old configuration when cfg is
// invalid.
func (c *Controller) SetConfig(cfg Config) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	set, err := c.compile(cfg)
	if err != nil {
		return err
	}
	c.install(set)
	return nil
}

// Compile validates cfg and compiles it into a PolicySet of c, without
// installing it. Policies that keep their name, algorithm, unit, key and
// store keep the partitions they have in the set installed, whatever else
// changes (their limits, their mode): a policy flipped from shadow to
// enforce starts from the state its shadow run built.
func (c *Controller) Compile(cfg Config) (*PolicySet, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.compile(cfg)
}

// Install makes set, compiled by c, the set c decides requests with when
// they name none, in one atomic swap; the sets compiled next take their
// partitions from it. A set of another controller is refused.
func (c *Controller) Install(set *PolicySet) error {
	if set == nil || set.ctl != c {
		return errForeignSet
	}
	c.install(set)
	return nil
}

// install makes set the installed one.
func (c *Controller) install(set *PolicySet) {
	set.installed.Store(true)
	c.cfg.Store(set)
}

// limitNow returns the limit h, a request of tenant decided under set,
// is served under as it leaves a queue: its partition's in the set
// installed now when set was installed before it and h's policy kept its
// partitions through the reloads since (a reload or a plan change applies
// to the requests waiting as to those arriving, so that no more run than
// the cap installed, and a raised one lets the waiters in); else the one
// h was decided with (a request that named a set of its own keeps it).
func (c *Controller) limitNow(set *PolicySet, h *held, tenant string) *limits.Limit {
	cur := c.cfg.Load()
	if cur == set || !set.installed.Load() {
		return h.lim
	}
	p := cur.byName[h.p.Name]
	if p == nil || p.policyState != h.p.policyState {
		return h.lim
	}
	if lims := cur.limitsFor(tenant); lims != nil {
		return &lims[p.index]
	}
	return &p.base
}

// errForeignSet refuses a PolicySet another controller compiled.
var errForeignSet = errors.New("admission: the policy set was compiled by another controller")

// compile validates and builds cfg; c.mu is held.
func (c *Controller) compile(cfg Config) (*PolicySet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	old := c.cfg.Load()
	policies := buildPolicies(cfg.Policies, old)
	for _, p := range policies {
		if p.policyState != nil {
			continue
		}
		st, ok := c.stores[p.Store]
		if !ok {
			return nil, &limits.FieldError{Path: fmt.Sprintf("policies[%s].store", p.Name), Msg: fmt.Sprintf("no store %q", p.Store)}
		}
		lim, err := st.Limiter(&p.Policy)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		p.policyState = &policyState{limiter: lim}
		p.batcher, _ = st.(backend.Batcher)
		_, p.renewer = lim.(backend.Renewer)
		if p.renewer {
			p.renewBatcher, _ = st.(backend.RenewBatcher)
		}
		if in, ok := lim.(backend.Inspector); ok {
			name := p.Name
			in.OnEvict(func(partitions, leases int) {
				c.obs.PartitionsEvicted(name, partitions)
				if leases > 0 {
					c.obs.LeaseExpired(name, leases)
				}
			})
		}
	}
	for _, p := range policies {
		if p.Queue.Size > 0 && p.queues == nil {
			p.queues = newQueueSet(c, p.policyState)
		}
	}
	table := compilePlans(&cfg.Plans, policies)
	next := &PolicySet{ctl: c, policies: policies, byName: map[string]*policy{}, limits: table}
	for _, p := range policies {
		p.alone = p.Queue.Size == 0 && p.batcher == nil
		next.byName[p.Name] = p
		if p.early() {
			next.early++
		}
	}
	if len(policies) == 1 {
		if p := policies[0]; p.always && p.alone && p.Algorithm.IsRate() {
			next.lone = p
		}
	}
	return next, nil
}

// config returns the policies and plans of s as a Config.
func (s *PolicySet) config() Config {
	var cfg Config
	for _, p := range s.policies {
		cfg.Policies = append(cfg.Policies, p.Policy)
	}
	if s.limits != nil {
		cfg.Plans.Default, cfg.Plans.Plans = s.limits.deflt, s.limits.plans
	}
	return cfg
}

// SetPlans replaces the plans only, keeping every policy and partition.
func (c *Controller) SetPlans(pl limits.Plans) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := c.cfg.Load().config()
	cfg.Plans = pl
	set, err := c.compile(cfg)
	if err != nil {
		return err
	}
	c.install(set)
	return nil
}

// SetAllShadow switches every enforcing policy to shadow (true) or back to
// its configured mode (false): an emergency switch that stops all
// rejections while keeping all state.
func (c *Controller) SetAllShadow(on bool) { c.allShadow.Store(on) }

// AllShadow reports whether SetAllShadow has switched every enforcing
// policy to shadow, so that an adapter refusing on its own (a limit of
// zero, which needs no policy) stops refusing too.
func (c *Controller) AllShadow() bool { return c.allShadow.Load() }

// Observer returns the observer the controller reports to (WithObserver;
// NopObserver when none was given), so that an adapter deciding on its
// own (a limit of zero, which needs no policy) reports its decision where
// the controller's go.
func (c *Controller) Observer() Observer { return c.obs }

// Policies returns the installed policies in evaluation order.
func (c *Controller) Policies() []Policy {
	cfg := c.cfg.Load()
	if cfg == nil {
		return nil // a zero Controller, not made by New
	}
	out := make([]Policy, len(cfg.policies))
	for i, p := range cfg.policies {
		out[i] = p.Policy
	}
	return out
}

// buildPolicies turns a validated policy list into installed policies in
// evaluation order, reusing the state of compatible policies in old.
func buildPolicies(list []Policy, old *PolicySet) []*policy {
	out := make([]*policy, 0, len(list))
	for i := range list {
		p := &policy{Policy: list[i]}
		p.Key = slices.Clone(p.Key)
		p.Queue.Shares = slices.Clone(p.Queue.Shares)
		p.unit = p.Unit
		if p.unit == "" {
			p.unit = limits.UnitRequests
		}
		p.base = p.Base()
		p.class = p.evalClass()
		p.bySession = p.KeyedBySession()
		p.loop = p.DetectsLoops()
		p.always = p.Mode != limits.Off && len(p.Match.Operations) == 0 && len(p.Match.Models) == 0 && !p.bySession && !p.loop
		if old != nil {
			if o, ok := old.byName[p.Name]; ok && compatible(&o.Policy, &p.Policy) {
				p.policyState = o.policyState
			}
		}
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b *policy) int { return a.class - b.class })
	for i, p := range out {
		p.index = i
	}
	return out
}

// evalClass is the policy's place in the evaluation order: first the
// policies Begin decides (request rates, then request concurrency), then
// the other rate checks, then concurrency, then the policies that may
// queue (rates, then concurrency).
func (p *policy) evalClass() int {
	switch {
	case p.early() && p.Algorithm.IsRate():
		return 0
	case p.early():
		return 1
	case p.Queue.Size == 0 && p.Algorithm.IsRate():
		return 2
	case p.Queue.Size == 0:
		return 3
	case p.Algorithm.IsRate():
		return 4
	}
	return 5
}

// early reports whether Begin decides the policy: it needs nothing a
// request body tells (no model in its match or key, a cost of one request)
// and never waits.
func (p *policy) early() bool { return p.DecidedAtBegin() }

// compatible reports whether b can take over a's partitions.
func compatible(a, b *Policy) bool {
	return a.Algorithm == b.Algorithm && a.Unit == b.Unit && slices.Equal(a.Key, b.Key) &&
		a.Store == b.Store && a.Period == b.Period && a.MaxPartitions == b.MaxPartitions &&
		a.Overflow == b.Overflow && a.IdleTimeout == b.IdleTimeout
}

// limitsFor returns the effective limits of a tenant, or nil for the
// policies' own.
func (cfg *PolicySet) limitsFor(tenant string) []limits.Limit {
	if cfg.limits == nil {
		return nil
	}
	if ls, ok := cfg.limits.lookup(tenant); ok {
		return ls
	}
	return cfg.limits.dflt
}

// reason maps a refusal to its reason.
func (p *policy) reason(g *backend.Grant) Reason {
	switch {
	case g.Full:
		return ReasonOverflow
	case p.loop:
		return ReasonLoop
	case p.Algorithm == limits.Quota:
		return ReasonQuota
	case p.Algorithm == limits.Concurrency:
		return ReasonConcurrency
	}
	return ReasonRate
}

// appendKey builds the partition key of r. A key made of one string field
// is that field itself (no copy); other keys are built into buf.
func (p *policy) key(r *Request, buf []byte) (string, []byte) {
	if len(p.Key) == 1 {
		switch p.Key[0] {
		case limits.KeyTenant:
			return r.Tenant, buf
		case limits.KeyKeyID:
			return r.KeyID, buf
		case limits.KeyUser:
			return r.User, buf
		case limits.KeyModel:
			return r.Model, buf
		case limits.KeyOperation:
			return r.Operation, buf
		case limits.KeyGlobal:
			return "", buf
		}
	}
	if len(p.Key) == 0 {
		return "", buf
	}
	start := len(buf)
	for i, k := range p.Key {
		if i > 0 {
			buf = append(buf, backend.KeySeparator)
		}
		switch k {
		case limits.KeyTenant:
			buf = append(buf, r.Tenant...)
		case limits.KeyKeyID:
			buf = append(buf, r.KeyID...)
		case limits.KeyUser:
			buf = append(buf, r.User...)
		case limits.KeyModel:
			buf = append(buf, r.Model...)
		case limits.KeyOperation:
			buf = append(buf, r.Operation...)
		case limits.KeySession:
			buf = append(buf, r.Session...)
		case limits.KeyFingerprint:
			buf = hex.AppendEncode(buf, r.Fingerprint[:])
		case limits.KeyIP:
			if r.Addr.IsValid() {
				buf = r.Addr.Unmap().AppendTo(buf)
			}
		case limits.KeyIPPrefix:
			buf = appendPrefix(buf, r.Addr)
		}
	}
	if len(buf) == start {
		return "", buf
	}
	// The key lives in the ticket's buffer, which is only appended to until
	// the ticket is recycled; limiters copy keys they keep.
	return unsafe.String(&buf[start], len(buf)-start), buf
}

// appendPrefix appends the address grouped as partitions see it: IPv4 as
// is, IPv6 by its /64 prefix.
func appendPrefix(buf []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return buf
	}
	a = a.Unmap()
	if a.Is4() {
		return a.AppendTo(buf)
	}
	p, _ := a.Prefix(64)
	return p.AppendTo(buf)
}

// Admit asks every policy matching r for admission, waiting in queues where
// policies have them, until ctx ends. It returns a Ticket to settle when the
// work is done, or a *Rejection (match it with errors.Is against
// ErrRateLimited and the other sentinels), or the context's error when the
// caller gave up while waiting. A request with an amount outside
// [0, MaxAmount] gets an error matching ErrInvalidCost and is evaluated by
// no policy.
func (c *Controller) Admit(ctx context.Context, r Request) (Ticket, error) {
	return c.admit(ctx, nil, &r, true, stageWhole)
}

// TryAdmit is Admit without waiting: a request that would have to queue is
// rejected at once.
func (c *Controller) TryAdmit(ctx context.Context, r Request) (Ticket, error) {
	return c.admit(ctx, nil, &r, false, stageWhole)
}

// Begin is the first stage of a staged admission, for a request whose body
// (and so its model and cost estimate) is not read yet: it evaluates only
// the policies that need none of it, those whose Match names no model,
// whose Key has no KeyModel part, that count UnitRequests and have no
// queue, so a caller over its request rate or concurrency is refused
// before its body is read. r needs only the request's identity and
// operation. A rejection is final, as Admit's.
//
// The Ticket it returns holds what those policies took. Continue it with
// the full request to evaluate the other policies, or settle it as is: a
// request that needs nothing else (its body turned out invalid, say) is
// settled like an admitted one. Begin followed by Continue decides, counts
// and reports exactly what Admit would on the same request (Admit
// evaluates the same policies first).
func (c *Controller) Begin(ctx context.Context, r Request) (Ticket, error) {
	return c.admit(ctx, nil, &r, false, stageBegun)
}

// admit evaluates for r the policies of one stage of an admission: every
// policy (Admit), Begin's, or the others (Continue, given the ticket
// Begin issued; t is nil otherwise).
func (c *Controller) admit(ctx context.Context, t *ticket, r *Request, wait bool, part stage) (Ticket, error) {
	if err := r.checkAmounts(); err != nil {
		return Ticket{}, err
	}
	var cfg *PolicySet
	lo, hi := 0, 0
	now := c.clock.Now()
	if t == nil {
		var err error
		if cfg, err = c.setOf(r, nil); err != nil {
			return Ticket{}, err
		}
		t = c.issue(cfg, r, now)
		if cfg.lone != nil && part == stageWhole {
			return c.admitLone(ctx, t, r, now)
		}
		hi = len(cfg.policies)
		if part == stageBegun {
			hi = cfg.early
		}
	} else {
		// Continue: the rest of the configuration Begin started with. The
		// lease keeper leaves the ticket alone while its ops grow.
		c.keeper.drop(t)
		cfg = t.cfg
		t.model, t.session = r.Model, r.Session
		lo, hi = cfg.early, len(cfg.policies)
	}
	t.stage = part
	t.dec.Context = ctx // kept across the reports of this call (see report)
	first := len(t.ops)
	t.match(cfg.policies[lo:hi], cfg.limitsFor(r.Tenant), r, c.allShadow.Load(), now)
	evaluated, err := c.evaluate(ctx, t, first, wait, now)
	return c.conclude(t, evaluated, err, err != nil, part, nil)
}

// admitLone is admit's short way for a set of one rate policy that every
// request meets, decided by one limiter call (PolicySet.lone): the same
// decision, reports and ticket, without the general loops. t is issued
// for r at now.
func (c *Controller) admitLone(ctx context.Context, t *ticket, r *Request, now time.Time) (Ticket, error) {
	t.dec.Context = ctx
	h := t.add(t.cfg.lone, t.cfg.limitsFor(r.Tenant), r, c.allShadow.Load())
	if err := c.acquire(ctx, t, h, now); err != nil || !h.taken || !c.nop {
		// A refusal, a failure, a would-reject or a decision to report:
		// conclude's general way. (A rate policy holds no lease to keep.)
		return c.conclude(t, 1, err, err != nil, stageWhole, nil)
	}
	t.dec.Context = nil
	return Ticket{t: t, gen: t.gen.Load()}, nil
}

// setOf returns the policy set r is decided under: its own, or cur (the
// controller's current one when cur is nil).
func (c *Controller) setOf(r *Request, cur *PolicySet) (*PolicySet, error) {
	switch {
	case r.Policies == nil && cur != nil:
		return cur, nil
	case r.Policies == nil:
		return c.cfg.Load(), nil
	case r.Policies.ctl != c:
		return nil, errForeignSet
	}
	return r.Policies, nil
}

// issue takes a ticket from the pool for r, decided under cfg at now,
// holding no policy yet.
func (c *Controller) issue(cfg *PolicySet, r *Request, now time.Time) *ticket {
	t := c.tickets.Get().(*ticket)
	t.cfg = cfg
	t.start = now
	t.tenant, t.model, t.operation, t.priority = r.Tenant, r.Model, r.Operation, r.Priority
	t.session, t.retry = r.Session, r.Retry
	t.ops = t.ops[:0]
	t.keybuf = t.keybuf[:0]
	t.stage = stageWhole
	return t
}

// applies reports whether p evaluates r (limits.Policy.AppliesTo): it
// matches r, and r has a session when p is keyed by session.
func (p *policy) applies(r *Request) bool {
	return (r.Session != "" || !p.bySession) && (!p.loop || !r.Fingerprint.IsZero()) && p.Matches(r.Operation, r.Model)
}

// match adds to t the policies of ps that apply to r.
func (t *ticket) match(ps []*policy, lims []limits.Limit, r *Request, allShadow bool, now time.Time) {
	for _, p := range ps {
		if !p.always && !p.applies(r) {
			continue
		}
		if h := t.add(p, lims, r, allShadow); p.Algorithm == limits.Concurrency {
			h.renewed = now // only a lease is renewed
		}
	}
}

// evaluate decides t's ops from first on, in order, waiting in queues
// when wait is set, until one refuses. It returns how far it went and the
// refusal (or failure).
func (c *Controller) evaluate(ctx context.Context, t *ticket, first int, wait bool, now time.Time) (int, error) {
	var err error
	evaluated := first
	for evaluated < len(t.ops) && err == nil {
		if h := &t.ops[evaluated]; h.p.alone {
			err = c.acquire(ctx, t, h, now)
			evaluated++
			continue
		}
		if n := c.batchable(t.ops[evaluated:]); n > 1 {
			err = c.acquireBatch(ctx, t, t.ops[evaluated:evaluated+n], now)
			evaluated += n
			continue
		}
		h := &t.ops[evaluated]
		if h.p.Queue.Size > 0 && h.mode == limits.Enforce {
			err = h.p.queues.acquire(ctx, t, h, wait, now)
			if h.wait > 0 {
				// The evaluation goes on from the end of the wait: what
				// is taken from now on is taken then (a lease taken at
				// the instant the request arrived would be born
				// expired after a wait longer than its MaxHold).
				now = now.Add(h.wait)
				for j := evaluated + 1; j < len(t.ops); j++ {
					t.ops[j].renewed = now
				}
			}
		} else {
			err = c.acquire(ctx, t, h, now)
		}
		evaluated++
	}
	return evaluated, err
}

// conclude ends one stage of t's admission, whose first evaluated ops
// were decided with err: it gives back what t holds when rolledBack (err
// refused, or another request of its group did), and reports the
// decisions. When st is set, it receives the figures of the refusing
// policy, or else of t's first policy (after the rollback).
func (c *Controller) conclude(t *ticket, evaluated int, err error, rolledBack bool, part stage, st *Status) (Ticket, error) {
	rej, _ := err.(*Rejection)
	if rolledBack {
		c.rollback(t, c.clock.Now())
		if rej != nil {
			// After the rollback: refunds update the grants' figures.
			for i := range evaluated {
				rej.Statuses = append(rej.Statuses, t.ops[i].status())
			}
		}
	}
	if st != nil {
		switch {
		case rej != nil:
			*st = rej.Status
		case evaluated > 0:
			*st = t.ops[0].status()
		}
	}
	// Once the request's fate is known, each policy that let it through
	// reports it, marked when another policy's refusal gave its permits
	// back: after Begin only if it refused, after Continue for Begin's
	// policies too.
	if (part != stageBegun || rolledBack) && !c.nop {
		c.reportAdmitted(t, evaluated, rolledBack)
	}
	t.dec.Context = nil // the ticket outlives the call; the context must not
	if rolledBack {
		t.recycle()
		return Ticket{}, err
	}
	c.keeper.keep(t)
	return Ticket{t: t, gen: t.gen.Load()}, nil
}

// add appends p's part of r to t, with every field set but the grant
// (which the evaluation always writes) and renewed (which only a
// concurrency policy's lease reads).
func (t *ticket) add(p *policy, lims []limits.Limit, r *Request, allShadow bool) *held {
	n := len(t.ops)
	if n < cap(t.ops) {
		t.ops = t.ops[:n+1]
	} else {
		t.ops = append(t.ops, held{})
	}
	h := &t.ops[n]
	h.p, h.mode, h.lim, h.est, h.wait = p, p.Mode, &p.base, r.Amount(p.unit), 0
	h.taken, h.failOpen, h.local, h.wouldReject = false, false, false, false
	if allShadow && h.mode == limits.Enforce {
		h.mode = limits.Shadow
	}
	if lims != nil {
		h.lim = &lims[p.index]
	}
	h.key, t.keybuf = p.key(r, t.keybuf)
	return h
}

// reportAdmitted reports an admitted decision for each of the first n ops
// of t that let the request through. (A store failure that admitted was
// reported as fail_open already.)
func (c *Controller) reportAdmitted(t *ticket, n int, rolledBack bool) {
	for i := 0; i < n && !c.nop; i++ {
		h := &t.ops[i]
		if h.grant.OK {
			t.dec = Decision{
				Status: h.status(), Outcome: Admitted, Tenant: t.tenant, Session: t.session, Operation: t.operation,
				Model: t.model, Cost: h.est, QueueWait: h.wait, RolledBack: rolledBack, Context: t.dec.Context,
			}
			h.win = t.dec.Window // for the settlement, computed once
			c.obs.Decision(&t.dec)
		}
	}
}

// batchable returns how many ops at the head of ops can go to one store in
// one batch: consecutive, unqueued ops on the same Batcher.
func (c *Controller) batchable(ops []held) int {
	b := ops[0].p.batcher
	if b == nil || ops[0].p.Queue.Size > 0 {
		return 1
	}
	n := 1
	for n < len(ops) && ops[n].p.batcher == b && ops[n].p.Queue.Size == 0 && ops[n].p.Store == ops[0].p.Store {
		n++
	}
	return n
}

// acquire evaluates one policy without queueing.
func (c *Controller) acquire(ctx context.Context, t *ticket, h *held, now time.Time) error {
	if err := h.p.limiter.Acquire(ctx, h.key, h.lim, h.est, now, &h.grant); err != nil {
		return c.storeFailed(ctx, t, h, err, now)
	}
	if g := &h.grant; g.OK && g.Expired == 0 {
		// Taken, nothing to report: decide's common case.
		h.taken, h.rem0, h.remAfter = true, g.Remaining, g.Remaining
		return nil
	}
	return c.decide(t, h)
}

// decide acts on h.grant: a taken grant, a would-reject or a rejection.
func (c *Controller) decide(t *ticket, h *held) error {
	g := &h.grant
	if g.Expired > 0 {
		c.obs.LeaseExpired(h.p.Name, int(g.Expired))
	}
	if g.OK {
		h.taken, h.rem0, h.remAfter = true, g.Remaining, g.Remaining
		return nil
	}
	reason := h.p.reason(g)
	retry := h.retryAfter()
	if h.mode == limits.Shadow {
		h.wouldReject = true
		c.report(t, h, WouldReject, reason, retry)
		return nil
	}
	c.report(t, h, Rejected, reason, retry)
	return &Rejection{Policy: h.p.Name, Reason: reason, RetryAfter: retry, Status: h.status()}
}

func (c *Controller) report(t *ticket, h *held, o Outcome, reason Reason, retry time.Duration) {
	t.dec = Decision{
		Status: h.status(), Outcome: o, Reason: reason, Tenant: t.tenant, Session: t.session, Operation: t.operation,
		Model: t.model, Cost: h.est, QueueWait: h.wait, RetryAfter: retry, Context: t.dec.Context,
	}
	c.obs.Decision(&t.dec)
}

// callerEnded returns the caller's own end of ctx, if any: its error, or
// context.DeadlineExceeded once its deadline has passed by the wall clock
// (a context's deadline is wall-clock time) though its timer has not yet
// marked it done, which a store call cut by the same deadline (a socket
// deadline taken from it) can see first.
func callerEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// storeFailed applies the policy's failure mode when its store failed.
// A call that ended because its caller's context did is no failure of
// the store: the request ends with the context's error (reported as
// Canceled), no store error is counted and no failure mode decides.
func (c *Controller) storeFailed(ctx context.Context, t *ticket, h *held, err error, now time.Time) error {
	p := h.p
	h.grant = backend.Grant{}
	if cerr := callerEnded(ctx); cerr != nil {
		c.report(t, h, Canceled, ReasonNone, 0)
		return cerr
	}
	c.obs.StoreError(StoreEvent{Policy: p.Name, Store: p.Store, Err: err, Action: p.OnStoreError})
	switch p.OnStoreError {
	case limits.FailLocalMode:
		lim := *h.lim
		if r := int64(max(p.Replicas, 1)); r > 1 {
			lim.Amount = max(1, lim.Amount/r)
			lim.Burst = max(1, lim.Burst/r)
		}
		h.local = true
		h.lim = &lim
		_ = p.localLimiter().Acquire(ctx, h.key, &lim, h.est, now, &h.grant)
		return c.decide(t, h)
	case limits.FailClosedMode:
		retry := p.RetryHint
		if retry == 0 {
			retry = limits.DefaultRetryHint
		}
		if h.mode == limits.Shadow {
			h.wouldReject = true
			c.report(t, h, WouldReject, ReasonStoreUnavailable, retry)
			return nil
		}
		c.report(t, h, FailClosed, ReasonStoreUnavailable, retry)
		return &Rejection{Policy: p.Name, Reason: ReasonStoreUnavailable, RetryAfter: retry, Status: h.status()}
	default:
		h.failOpen = true
		c.report(t, h, FailOpen, ReasonStoreUnavailable, 0)
		return nil
	}
}

// settleFailed reports a failed release, refund or charge: the permits stay
// with the store until its leases or windows expire.
func (c *Controller) settleFailed(h *held, err error) {
	if err != nil {
		c.obs.StoreError(StoreEvent{Policy: h.p.Name, Store: h.p.Store, Err: err, Action: h.p.OnStoreError})
	}
}

func (p *policy) localLimiter() backend.Limiter {
	p.local.once.Do(func() { p.local.l, _ = memstore.Store{}.Limiter(&p.Policy) })
	return p.local.l
}

// limiterOf returns the limiter holding h's grant.
func (h *held) limiterOf() backend.Limiter {
	if h.local {
		return h.p.localLimiter()
	}
	return h.p.limiter
}

// acquireBatch evaluates several policies on one store in one call.
func (c *Controller) acquireBatch(ctx context.Context, t *ticket, hs []held, now time.Time) error {
	ops := t.batch[:0]
	for i := range hs {
		ops = append(ops, backend.Op{Limiter: hs[i].p.limiter, Key: hs[i].key, Limit: *hs[i].lim, N: hs[i].est, Shadow: hs[i].mode == limits.Shadow})
	}
	t.batch = ops
	if err := hs[0].p.batcher.AcquireBatch(ctx, ops, now); err != nil {
		for i := range hs {
			if e := c.storeFailed(ctx, t, &hs[i], err, now); e != nil {
				return e
			}
		}
		return nil
	}
	var first error
	for i := range hs {
		hs[i].grant = ops[i].Grant
		if err := c.decide(t, &hs[i]); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// rollback gives back everything t holds, for a request another policy
// refused.
func (c *Controller) rollback(t *ticket, now time.Time) {
	for i := range t.ops {
		h := &t.ops[i]
		if !h.taken {
			continue
		}
		h.taken = false
		c.settleOne(h, -h.grant.Taken, now, true)
	}
}

// settleOne settles what h holds, or part of it: a concurrency lease is
// released whole and its queue served; any other grant is adjusted by
// delta (an overrun charged when positive, an over-estimate refunded when
// negative, nothing when zero), and its queue served after a refund when
// wake is set. A store's failure goes to the observer.
func (c *Controller) settleOne(h *held, delta int64, now time.Time, wake bool) {
	ctx, l := context.Background(), h.limiterOf()
	if h.p.Algorithm == limits.Concurrency {
		if len(h.p.Queue.Shares) > 0 && !h.local {
			h.p.queues.released(h)
		}
		if err := l.Release(ctx, h.key, h.lim, &h.grant, now); err != nil {
			c.settleFailed(h, err)
			c.keeper.released(h, err)
		}
		wake = true
	} else if delta != 0 {
		c.settleFailed(h, l.Adjust(ctx, h.key, h.lim, &h.grant, delta, now))
	} else {
		return
	}
	if wake && h.p.queues != nil {
		h.p.queues.dispatch(h.key)
	}
}
