package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
)

// Defaults of Config's zero fields.
const (
	DefaultMaxGroups = 1024
	DefaultPause     = time.Second
	// DefaultMaxPause bounds a pause to what a well-behaved provider
	// asks of per-minute limits: their windows refill within a minute.
	// A longer retry-after (a broken or hostile answer, "retry in a
	// day") would stop every tenant's traffic to the group; an account
	// with daily limits raises it (max_pause).
	DefaultMaxPause     = time.Minute
	DefaultRemainingTTL = time.Minute
)

// maxGroupKey bounds the length of a group's key: longer keys (a model
// name no provider uses) are not learned about.
const maxGroupKey = 256

// Config configures a Store. Zero fields take the defaults.
type Config struct {
	// MaxGroups bounds the groups learned about; DefaultMaxGroups when
	// zero. When the table is full of groups whose figures still hold,
	// reports about new groups are dropped (their policies keep their
	// static budget).
	MaxGroups int
	// Pause is how long a group is paused after a provider refusal that
	// says neither retry-after nor a reset; DefaultPause when zero.
	Pause time.Duration
	// MaxPause bounds every pause and learned reset; DefaultMaxPause (a
	// minute) when zero.
	MaxPause time.Duration
	// RemainingTTL is how long a remaining figure sent without a reset
	// (as Azure OpenAI does) holds; DefaultRemainingTTL when zero.
	RemainingTTL time.Duration
	// Adaptive, when set, makes the cap of the store's concurrency
	// policies adapt to the provider's time to first byte, per group,
	// between Adaptive.Min and the policy's limit (see Adaptive and
	// ObserveLatency).
	Adaptive *Adaptive
	// Accounting bounds the ratio of the provider's token count to the
	// gateway's estimate that each group learns, which the store's token
	// policies reserve at (see Accounting); its zero value takes the
	// defaults.
	Accounting Accounting
	// Account names the provider account the store guards in what a
	// fleet of gateways shares (a Ledger's keys, "<Account>/<group>"):
	// the policy file's store name. At most 128 bytes.
	Account string
}

// maxAccount bounds Config.Account.
const maxAccount = 128

// ledgerTimeout bounds a ledger call when the ledger sets no shorter
// deadline of its own (the Redis store's Timeout does).
const ledgerTimeout = time.Second

// An Option sets an optional collaborator of a Store.
type Option func(*Store)

// WithStaticStore makes s hold the policies' static budgets; nil means
// the in-memory store, the default. With a shared store (Redis) the
// published budget holds for a fleet of gateways, while each replica
// learns the provider's figures from the responses it receives; when s
// is also a Ledger (the Redis store is), the fleet learns the provider's
// accounting there, together (see Ledger).
func WithStaticStore(s backend.Store) Option {
	return func(st *Store) {
		if s != nil {
			st.static = s
			st.ledger, _ = s.(Ledger)
		}
	}
}

// Store is a limit store for the policies that guard a provider: each
// policy is evaluated with its own, static limit (the provider's
// published tier) by the static store (WithStaticStore), in memory by default, and tightened
// by what the provider's responses report, per group. A group is a
// partition key of the policies on the store: "" for a policy keyed
// globally (the whole upstream), the model for a policy keyed by model
// (the operation for one keyed by operation).
// Register one Store per upstream (per provider account, or per Azure
// deployment) with admission.WithStore, and feed it every response with
// Observe.
//
// What is learned only tightens: a request is refused when the group is
// paused after a provider refusal, or when the provider's remaining
// figure, less what was admitted since the report, cannot hold its
// estimate; it is then still subject to the static limit. With the
// provider's limit and reset known, the remaining figure refills
// linearly to the limit at the reset, as OpenAI's and Anthropic's
// buckets do, and a refusal's retry-after is when the estimate fits;
// with the remaining figure alone, it holds until the reset (or
// Config.RemainingTTL). A policy with a queue makes such requests wait
// rather than fail.
type Store struct {
	cfg    Config
	static backend.Store // holds the static budgets
	ledger Ledger        // where the fleet learns the accounting; nil: each group alone
	mu     sync.RWMutex
	groups map[string]*group
	swept  int64                // last sweep of a full table, unix nanoseconds
	wakers []func(group string) // the controller's queues (backend.Waker)
}

var _ backend.Store = (*Store)(nil)

// group is what was learned about one group.
type group struct {
	mu     sync.Mutex
	paused int64 // refuse until then, unix nanoseconds
	dims   [numDimensions]learned
	grad   gradient   // the adaptive concurrency cap (Config.Adaptive)
	acct   accounting // the provider's token count over the estimate
}

// learned is the provider's budget of one dimension of a group. OpenAI
// and Anthropic replenish their limits continuously (a token bucket that
// is full again at the reset), so with a limit and a reset known the
// budget refills linearly from the reported remaining to the limit at
// the reset; without them (Azure's remaining alone) it holds still until
// the figure expires.
type learned struct {
	at        int64   // the report's instant, unix nanoseconds
	until     int64   // the figure holds until then; 0 when nothing is known
	limit     int64   // 0 when not reported
	remaining float64 // as reported, less what was admitted since
	perNs     float64 // refill per nanosecond; 0 when the budget holds still
}

// available returns the budget at now, before until: it reaches the
// limit at the reset, when the figure ends.
func (l *learned) available(now int64) float64 {
	return l.remaining + l.perNs*float64(now-l.at)
}

// wait returns how long from now until n fits in the budget, at most
// until the figure expires.
func (l *learned) wait(n int64, now int64) time.Duration {
	end := time.Duration(l.until - now)
	if l.perNs == 0 {
		return end
	}
	return min(end, limits.CeilDuration((float64(n)-l.available(now))/l.perNs))
}

// New returns a Store; it fails when a field of cfg is negative.
func New(cfg Config, opts ...Option) (*Store, error) {
	var errs []error
	if cfg.MaxGroups < 0 {
		errs = append(errs, errors.New("upstream: MaxGroups must be >= 0"))
	}
	if len(cfg.Account) > maxAccount {
		errs = append(errs, fmt.Errorf("upstream: Account must be at most %d bytes", maxAccount))
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"Pause", &cfg.Pause, DefaultPause}, {"MaxPause", &cfg.MaxPause, DefaultMaxPause}, {"RemainingTTL", &cfg.RemainingTTL, DefaultRemainingTTL}} {
		if *d.v < 0 {
			errs = append(errs, fmt.Errorf("upstream: %s must be >= 0", d.name))
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.MaxGroups == 0 {
		cfg.MaxGroups = DefaultMaxGroups
	}
	if err := cfg.Accounting.normalize(); err != nil {
		return nil, err
	}
	if cfg.Adaptive != nil {
		a := *cfg.Adaptive
		if err := a.normalize(); err != nil {
			return nil, err
		}
		cfg.Adaptive = &a
	}
	s := &Store{cfg: cfg, static: memstore.Store{}, groups: map[string]*group{}}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Limiter returns the limiter of p. An upstream policy counts requests,
// tokens, or Anthropic's input_tokens or output_tokens (a named unit),
// or is a concurrency cap (which pauses too); it is keyed globally, by
// model or by operation, the groupings providers limit by, with one key
// part at most: its partition key is then the group Observe is told (a
// composite key, model and operation, would never be the group of a
// report, and the provider's refusals would not pause it).
func (s *Store) Limiter(p *limits.Policy) (backend.Limiter, error) {
	dim, ok := Requests, true
	switch p.Unit {
	case "", limits.UnitRequests:
	case limits.UnitTokens:
		dim = Tokens
	case "input_tokens":
		dim = InputTokens
	case "output_tokens":
		dim = OutputTokens
	default:
		ok = false
	}
	var errs []error
	if !ok {
		errs = append(errs, fmt.Errorf("upstream: unit %.64q: an upstream policy counts requests, tokens, input_tokens or output_tokens", p.Unit))
	}
	for _, k := range p.Key {
		if k != limits.KeyGlobal && k != limits.KeyModel && k != limits.KeyOperation {
			errs = append(errs, fmt.Errorf("upstream: key %s: an upstream policy is keyed by global, model or operation, as providers limit", k))
		}
	}
	if len(p.Key) > 1 {
		errs = append(errs, fmt.Errorf("upstream: key %v: an upstream policy has one key part, the group its reports are observed for", p.Key))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	inner, err := s.static.Limiter(p)
	if err != nil {
		return nil, err
	}
	return &limiter{s: s, inner: inner, dim: dim, rate: p.Algorithm.IsRate()}, nil
}

// Observe records a provider response's report about group (see Store):
// its remaining figures replace those of older reports, and a refusal
// (Report.Throttled) pauses the group until the provider's retry-after,
// else the reset of a dimension it reports exhausted, else Config.Pause;
// never longer than the latest reset the same response reports (the
// provider says its windows are full again by then, whatever its
// retry-after says), nor than Config.MaxPause. It reports whether the report was kept: a
// report without a Received instant, about a group whose key is longer
// than 256 bytes, or about a new group when the table is full of groups
// whose figures still hold, is not. A report built by hand rather than by
// Parse is held to Parse's bounds.
func (s *Store) Observe(group string, r Report) bool {
	if len(group) > maxGroupKey || r.Received.IsZero() {
		return false
	}
	now := r.Received.UnixNano()
	g := s.group(group, now)
	if g == nil {
		return false
	}
	x, learn := s.sample(r, now)
	if learn && s.ledger != nil {
		// The fleet's ledger learns it, outside the group's lock: a
		// network call. On failure the group learns it alone.
		ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
		ratio, err := s.ledger.LearnRatio(ctx, s.cfg.Account+"/"+group, x)
		cancel()
		if err == nil {
			learn = false
			g.mu.Lock()
			g.acct.ratio = ratio
			g.mu.Unlock()
		}
	}
	g.observe(s, r, now, x, learn)
	// The queues waiting on the group look again at once: the report may
	// say its budget refilled, sooner than their retry-after.
	s.mu.RLock()
	wakers := s.wakers
	s.mu.RUnlock()
	for _, w := range wakers {
		w(group)
	}
	return true
}

// sample returns the accounting sample of r, received at now, and
// whether there is one to learn: r reports the tokens remaining.
func (s *Store) sample(r Report, now int64) (RatioSample, bool) {
	f := r.Figures[Tokens].bounded()
	if !f.HasRemaining {
		return RatioSample{}, false
	}
	reqs := r.Figures[Requests]
	return s.cfg.Accounting.sample(f, now, min(max(r.Sent, 0), limits.MaxAmount), r.Throttled, !reqs.HasRemaining || reqs.Remaining > 0), true
}

// observe records r, received at now, in g (see Store.Observe); with
// learn, g learns the accounting sample x of it alone.
func (g *group) observe(s *Store, r Report, now int64, x RatioSample, learn bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if learn {
		g.acct.learn(x)
	}
	pause, exhausted := time.Duration(0), false
	refill, hasRefill := time.Duration(0), false // the latest reset reported
	for d := range g.dims {
		f, l := r.Figures[d].bounded(), &g.dims[d]
		if f.HasReset {
			refill, hasRefill = max(refill, f.Reset), true
		}
		if !f.HasRemaining || now < l.at {
			continue
		}
		ttl := s.cfg.RemainingTTL
		if f.HasReset {
			ttl = min(f.Reset, s.cfg.MaxPause)
		}
		*l = learned{at: now, until: now + int64(ttl), remaining: float64(f.Remaining)}
		if f.HasLimit {
			l.limit = f.Limit
			if f.HasReset && f.Reset > 0 && f.Limit > f.Remaining {
				l.perNs = float64(f.Limit-f.Remaining) / float64(f.Reset)
			}
		}
		if f.Remaining == 0 && f.HasReset {
			pause, exhausted = max(pause, f.Reset), true
		}
	}
	if r.Throttled {
		switch {
		case r.HasRetryAfter:
			pause = min(max(r.RetryAfter, 0), MaxReset)
		case !exhausted:
			pause = s.cfg.Pause
		}
		if hasRefill {
			pause = min(pause, refill)
		}
		g.paused = max(g.paused, now+int64(min(pause, s.cfg.MaxPause)))
	}
}

// group returns the group of key, created if there is room, or nil.
func (s *Store) group(key string, now int64) *group {
	s.mu.RLock()
	g := s.groups[key]
	s.mu.RUnlock()
	if g != nil {
		return g
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g = s.groups[key]; g != nil {
		return g
	}
	if len(s.groups) >= s.cfg.MaxGroups && now-s.swept >= int64(time.Second) {
		// Drop the groups whose figures and pause are all over: they
		// refuse nothing any more. At most once a second, so a flood of
		// new groups costs a lookup each, not a sweep each.
		s.swept = now
		for k, o := range s.groups {
			if o.over(now) {
				delete(s.groups, k)
			}
		}
	}
	if len(s.groups) >= s.cfg.MaxGroups {
		return nil
	}
	g = &group{}
	s.groups[strings.Clone(key)] = g
	return g
}

// over reports whether nothing learned about g holds at now.
func (g *group) over(now int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now < g.paused || g.grad.constrained() {
		return false
	}
	for _, l := range g.dims {
		if now < l.until {
			return false
		}
	}
	return true
}

// GroupStatus is what a Store holds about one group, for gauges.
type GroupStatus struct {
	// Group is the group's key, as given to Observe.
	Group string
	// Paused is how long the group stays paused after a provider
	// refusal; zero when it is not paused.
	Paused time.Duration
	// Figures holds, per Dimension, the learned figures that still hold:
	// the provider's limit, its remaining less what was admitted since,
	// and the time to its reset. A dimension with nothing that holds has
	// no Has flag set.
	Figures [numDimensions]Figure
	// Concurrency is the adaptive cap of the group's concurrency
	// policies (Config.Adaptive), TTFB and BaselineTTFB the short- and
	// long-term averages of the provider's time to first byte it follows;
	// all zero before the first sample.
	Concurrency        int64
	TTFB, BaselineTTFB time.Duration
	// Ratio is what the group's token policies reserve per token of the
	// gateway's estimate: the provider's count over it as learned, or
	// Accounting.Initial before it is (see Accounting).
	Ratio float64
}

// Groups returns the status at now of every group the store holds, in no
// particular order. Call it at metric collection time, not per request.
func (s *Store) Groups(now time.Time) []GroupStatus {
	ns := now.UnixNano()
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]GroupStatus, 0, len(s.groups))
	for k, g := range s.groups {
		st := GroupStatus{Group: k}
		g.mu.Lock()
		st.Paused = time.Duration(max(g.paused-ns, 0))
		st.Ratio = g.acct.ratioOf(&s.cfg.Accounting)
		if gr := &g.grad; gr.limit > 0 {
			st.Concurrency, st.TTFB, st.BaselineTTFB = int64(gr.limit), time.Duration(gr.short), time.Duration(gr.long)
		}
		for d, l := range g.dims {
			if ns < l.until {
				st.Figures[d] = Figure{
					Limit: l.limit, Remaining: int64(max(l.available(ns), 0)), Reset: time.Duration(l.until - ns),
					HasLimit: l.limit > 0, HasRemaining: true, HasReset: true,
				}
			}
		}
		g.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// lookup returns the group of key, or nil when nothing was learned.
func (s *Store) lookup(key string) *group {
	s.mu.RLock()
	g := s.groups[key]
	s.mu.RUnlock()
	return g
}

// limiter evaluates one policy: the in-memory limiter, behind what was
// learned about the partition's group.
type limiter struct {
	s     *Store
	inner backend.Limiter
	dim   Dimension
	rate  bool
}

var (
	_ backend.Limiter   = (*limiter)(nil)
	_ backend.Renewer   = (*limiter)(nil)
	_ backend.Inspector = (*limiter)(nil)
	_ backend.Waker     = (*limiter)(nil)
)

// Acquire implements backend.Limiter: the group's pause and learned
// budget first, then the static limit. A token policy reserves n times
// the group's learned ratio (see Accounting), in the provider's units;
// the grant's Taken stays n, the estimate the controller settles.
func (l *limiter) Acquire(ctx context.Context, key string, lim *limits.Limit, n int64, now time.Time, g *backend.Grant) error {
	ns := now.UnixNano()
	gr := l.s.lookup(key)
	if gr == nil && !l.rate && l.s.cfg.Adaptive != nil {
		gr = l.s.group(key, ns) // the cap adapts from the first response
	}
	if gr == nil {
		return l.acquireStatic(ctx, key, lim, n, scale(n, l.ratio(nil)), now, g)
	}
	gr.mu.Lock()
	defer gr.mu.Unlock()
	if ns < gr.paused {
		wait := time.Duration(gr.paused - ns)
		*g = backend.Grant{Limit: lim.Capacity(), Reset: wait, RetryAfter: wait}
		return nil
	}
	if !l.rate && l.s.cfg.Adaptive != nil {
		return l.adaptiveAcquire(ctx, gr, key, lim, n, now, g)
	}
	m := scale(n, l.ratio(gr))
	b := &gr.dims[l.dim]
	if !l.rate || ns >= b.until {
		return l.acquireStatic(ctx, key, lim, n, m, now, g)
	}
	avail := b.available(ns)
	if float64(m) > avail {
		reset := time.Duration(b.until - ns)
		*g = backend.Grant{Limit: lim.Capacity(), Remaining: int64(max(avail, 0)), Reset: reset, RetryAfter: b.wait(m, ns)}
		if b.limit > 0 {
			g.Limit = min(g.Limit, b.limit)
		}
		if b.limit > 0 && m > b.limit {
			g.RetryAfter = limits.Never
		}
		return nil
	}
	if err := l.acquireStatic(ctx, key, lim, n, m, now, g); err != nil || !g.OK {
		return err
	}
	b.remaining -= float64(m)
	g.Remaining = min(g.Remaining, int64(avail)-m)
	return nil
}

// ratio returns the ratio a token policy reserves at in group gr (nil:
// nothing learned), 1 for a policy of another unit.
func (l *limiter) ratio(gr *group) float64 {
	if l.dim != Tokens || !l.rate {
		return 1
	}
	if gr == nil {
		return l.s.cfg.Accounting.Initial
	}
	return gr.acct.ratioOf(&l.s.cfg.Accounting)
}

// acquireStatic takes m, n in the provider's units, from the static
// limit; the grant holds n.
func (l *limiter) acquireStatic(ctx context.Context, key string, lim *limits.Limit, n, m int64, now time.Time, g *backend.Grant) error {
	err := l.inner.Acquire(ctx, key, lim, m, now, g)
	if g.OK {
		g.Taken = n
	}
	return err
}

// Adjust implements backend.Limiter. It settles the static limit only
// (the provider's next report says what it counted), as the providers
// count: a token policy's reservation, in the provider's units, stays
// charged whatever the answer's length (the provider charged its own
// estimate of the request when it accepted it), and is given back whole
// when the request is settled at nothing (the provider refused it, or it
// never reached the provider). An overrun (an answer whose usage passes
// the estimate) is charged at the group's ratio only while the group has
// not learned it: once learned, the reservation is what the provider's
// limiter counted when it accepted the request (the ratio holds whatever
// made its count differ from the estimate: its prompt count, an output
// reservation the gateway capped), and charging the overrun again would
// count it twice; before, it is the best guess of what the provider
// counted.
func (l *limiter) Adjust(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, delta int64, now time.Time) error {
	if l.dim != Tokens || !l.rate {
		return l.inner.Adjust(ctx, key, lim, g, delta, now)
	}
	r, learned := l.s.cfg.Accounting.Initial, false
	if gr := l.s.lookup(key); gr != nil {
		gr.mu.Lock()
		r, learned = l.ratio(gr), gr.acct.ratio != 0
		gr.mu.Unlock()
	}
	n := g.Taken
	in := *g
	in.Taken = scale(n, r)
	d := int64(0)
	switch {
	case delta > 0 && !learned:
		d = scale(n+delta, r) - in.Taken
	case n+delta <= 0:
		d = -in.Taken
	}
	err := l.inner.Adjust(ctx, key, lim, &in, d, now)
	*g = in
	g.Taken = n
	if err == nil {
		g.Taken = n + delta
	}
	return err
}

// Release implements backend.Limiter.
func (l *limiter) Release(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, now time.Time) error {
	return l.inner.Release(ctx, key, lim, g, now)
}

// Renew implements backend.Renewer when the static store's limiter
// does; otherwise it fails with an error matching errors.ErrUnsupported.
func (l *limiter) Renew(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, now time.Time) error {
	rn, ok := l.inner.(backend.Renewer)
	if !ok {
		return fmt.Errorf("upstream: the static store cannot renew leases: %w", errors.ErrUnsupported)
	}
	return rn.Renew(ctx, key, lim, g, now)
}

// Stats implements backend.Inspector: the static limit's partitions, when
// the static store's limiter can describe them (the zero Stats
// otherwise, as for a store that cannot).
func (l *limiter) Stats(lim *limits.Limit, now time.Time) backend.Stats {
	if in, ok := l.inner.(backend.Inspector); ok {
		return in.Stats(lim, now)
	}
	return backend.Stats{}
}

// OnWake implements backend.Waker: f is called with the group of every
// report Store.Observe keeps.
func (l *limiter) OnWake(f func(key string)) {
	l.s.mu.Lock()
	l.s.wakers = append(l.s.wakers[:len(l.s.wakers):len(l.s.wakers)], f)
	l.s.mu.Unlock()
}

// OnEvict implements backend.Inspector.
func (l *limiter) OnEvict(f func(partitions, leases int)) {
	if in, ok := l.inner.(backend.Inspector); ok {
		in.OnEvict(f)
	}
}
