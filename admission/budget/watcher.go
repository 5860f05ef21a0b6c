package budget

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

// MaxThresholds bounds the thresholds of one policy.
const MaxThresholds = 8

// Policy is one quota that warns.
type Policy struct {
	// Name is the quota policy's name.
	Name string
	// Thresholds are the percents of the limit that warn, each in
	// [1, 100], ascending, at most MaxThresholds.
	Thresholds []int
	// Soft marks a quota that never refuses; warnings report it.
	Soft bool
	// Global marks a quota with one partition for everyone: it warns once
	// per period, with no tenant.
	Global bool
	// Period and Location are the quota's (see limits.Policy): they say
	// when a period ends and its crossed thresholds are forgotten.
	Period   limits.Period
	Location *time.Location
	// MaxTenants bounds the tenants remembered; zero means
	// limits.DefaultMaxPartitions.
	MaxTenants int
}

// Config lists the quotas a Watcher watches.
type Config struct {
	Policies []Policy
}

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, p := range c.Policies {
		at := fmt.Sprintf("policies[%d]", i)
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: must not be empty", at))
		} else if seen[p.Name] {
			errs = append(errs, fmt.Errorf("%s.name: %q appears twice", at, p.Name))
		}
		seen[p.Name] = true
		if len(p.Thresholds) == 0 || len(p.Thresholds) > MaxThresholds {
			errs = append(errs, fmt.Errorf("%s.thresholds: want 1 to %d, got %d", at, MaxThresholds, len(p.Thresholds)))
		}
		for j, t := range p.Thresholds {
			if t < 1 || t > 100 || j > 0 && t <= p.Thresholds[j-1] {
				errs = append(errs, fmt.Errorf("%s.thresholds[%d]: %d: want ascending percents in [1, 100]", at, j, t))
			}
		}
		if p.MaxTenants < 0 {
			errs = append(errs, fmt.Errorf("%s.max_tenants: must be >= 0", at))
		}
	}
	return errors.Join(errs...)
}

// A Warning is one threshold a tenant's usage crossed; it is also the
// webhook's JSON body. It carries names and figures only, nothing of the
// request that crossed it.
type Warning struct {
	// ID identifies the warning: the same for a policy, tenant, threshold
	// and period on every replica and every retry.
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Policy string `json:"policy"`
	// Threshold is the percent of the limit crossed.
	Threshold int         `json:"threshold"`
	Unit      limits.Unit `json:"unit"`
	// Used and Limit are the quota's figures when it was crossed.
	Used  int64 `json:"used"`
	Limit int64 `json:"limit"`
	Soft  bool  `json:"soft"`
	// PeriodStart and PeriodEnd bound the quota's current period; Time is
	// when the crossing was seen. All are in UTC.
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	Time        time.Time `json:"time"`
}

// warningID derives a Warning's ID from what identifies it.
func warningID(policy, tenant string, threshold int, start time.Time) string {
	h := sha256.New()
	h.Write([]byte(policy))
	h.Write([]byte{0})
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(threshold), 10))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, start.UnixNano(), 10))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// An Option configures a Watcher or a Webhook.
type Option func(*options)

type options struct {
	clock    admission.Clock
	log      *slog.Logger
	mp       metric.MeterProvider
	topK     int
	handlers []func(Warning)
	hook     *Webhook
}

// WithClock sets the clock that dates warnings and ends periods (default
// admission.SystemClock).
func WithClock(c admission.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets where warnings (and, for a Webhook, failed deliveries)
// are logged; default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithMeterProvider exports the Watcher's metrics (see Catalog) on mp;
// without it nothing is exported.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.mp = mp } }

// WithTopK sets how many tenants per policy admission_budget_used_ratio
// reports, the closest to their budget first (default 20).
func WithTopK(k int) Option { return func(o *options) { o.topK = k } }

// WithHandler calls f with every warning, on the goroutine that saw the
// crossing (the request's): f must be quick and must not block.
func WithHandler(f func(Warning)) Option {
	return func(o *options) { o.handlers = append(o.handlers, f) }
}

// WithWebhook sends every warning to h and exports its delivery counts.
func WithWebhook(h *Webhook) Option { return func(o *options) { o.hook = h } }

// A Watcher is an admission.Observer that warns when a tenant's usage of
// a quota crosses one of the quota's thresholds, once per tenant per
// period. It is safe for concurrent use; see the package documentation
// for what it costs on the request path.
type Watcher struct {
	admission.NopObserver
	opts options
	mu   sync.Mutex // serialises SetConfig
	tab  atomic.Pointer[table]
	reg  metric.Registration
}

var _ admission.Observer = (*Watcher)(nil)

// table is one configuration: the watched policies by name and the lowest
// threshold of all, which decides most decisions alone.
type table struct {
	min    int64 // percent; 101 when nothing is watched
	byName map[string]*watched
}

// watched is one policy of a configuration.
type watched struct {
	Policy
	st *tenants // kept across reloads that keep the period
}

// New returns a Watcher of cfg's policies.
func New(cfg Config, opts ...Option) (*Watcher, error) {
	w := &Watcher{opts: options{clock: admission.SystemClock{}, topK: 20}}
	for _, o := range opts {
		o(&w.opts)
	}
	if w.opts.log == nil {
		w.opts.log = slog.Default()
	}
	if w.opts.topK < 1 {
		return nil, fmt.Errorf("budget: top K must be >= 1, got %d", w.opts.topK)
	}
	if err := w.SetConfig(cfg); err != nil {
		return nil, err
	}
	if w.opts.mp != nil {
		if err := w.register(w.opts.mp); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// SetConfig installs cfg. A policy that keeps its name, period kind,
// location and key keeps the thresholds its tenants crossed this period;
// the others start afresh.
func (w *Watcher) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.tab.Load()
	t := &table{min: 101, byName: make(map[string]*watched, len(cfg.Policies))}
	for _, p := range cfg.Policies {
		p.Thresholds = append([]int(nil), p.Thresholds...)
		n := &watched{Policy: p}
		if old != nil {
			if o := old.byName[p.Name]; o != nil && o.samePeriods(&p) {
				n.st = o.st
			}
		}
		if n.st == nil {
			n.st = newTenants()
		}
		n.st.setCap(p.MaxTenants)
		t.byName[p.Name] = n
		t.min = min(t.min, int64(p.Thresholds[0]))
	}
	w.tab.Store(t)
	return nil
}

// samePeriods reports whether p counts periods and tenants as w does.
func (w *watched) samePeriods(p *Policy) bool {
	return w.Period == p.Period && w.Global == p.Global && w.Location.String() == p.Location.String()
}

// crossed returns the thresholds of w that usage used of limit has
// reached; refused adds 100% when w has it.
func (w *watched) crossed(used, limit int64, refused bool) bits {
	var b bits
	for _, t := range w.Thresholds {
		if used*100 >= int64(t)*limit || t == 100 && refused {
			b.set(t)
		}
	}
	return b
}

// Decision watches an admitted or quota-refused decision of a watched
// quota.
func (w *Watcher) Decision(d *admission.Decision) {
	if d.Algorithm != limits.Quota || d.Limit <= 0 {
		return
	}
	refused := false
	switch d.Outcome {
	case admission.Admitted:
	case admission.Rejected, admission.WouldReject:
		// A request larger than the whole limit says nothing of the
		// tenant's usage.
		if d.Reason != admission.ReasonQuota || d.RetryAfter == limits.Never {
			return
		}
		refused = true
	default:
		return
	}
	t := w.tab.Load()
	used := max(d.Limit-d.Remaining, 0)
	if !refused && used*100 < t.min*d.Limit {
		return
	}
	p := t.byName[d.Policy]
	if p == nil {
		return
	}
	w.observe(p, d.Tenant, used, d.Limit, d.Window, d.Unit, refused)
}

// Settled adds the overrun of a settlement (actual above the estimate) to
// the tenant's standing, which may cross the next threshold: to the use
// last seen, and at least to the use the settlement's figures show (see
// admission.Settlement), so an overrun warns at once even for a tenant
// below every threshold until then. A refund never warns.
func (w *Watcher) Settled(s admission.Settlement) {
	if s.Actual <= s.Estimated {
		return
	}
	p := w.tab.Load().byName[s.Policy]
	if p == nil {
		return
	}
	tenant := s.Tenant
	if p.Global {
		tenant = ""
	}
	var shown int64 // the use the figures show; 0 without figures
	if s.Algorithm == limits.Quota && s.Limit > 0 {
		shown = min(max(s.Limit-s.Remaining, 0), s.Limit)
	}
	now := w.opts.clock.Now()
	ns, admitted := now.UnixNano(), s.Admitted.UnixNano()
	sh := p.st.shard(tenant)
	sh.mu.Lock()
	e := sh.m[tenant]
	if e == nil || !p.current(e, s.Window, ns) {
		sh.mu.Unlock()
		// The figures are those of the admission's period: they say
		// nothing of a later one.
		if shown > 0 && !p.crossed(shown, s.Limit, false).empty() {
			if start, _ := p.period(s.Window, ns); admitted >= start {
				w.observe(p, tenant, shown, s.Limit, s.Window, s.Unit, false)
			}
		}
		return
	}
	if s.Limit != e.limit || admitted < e.start {
		shown = 0
	}
	e.used = max(min(e.used+(s.Actual-s.Estimated), limits.MaxAmount), shown)
	due := p.crossed(e.used, e.limit, false).andNot(e.fired)
	e.fired = e.fired.or(due)
	used, limit, start, end := e.used, e.limit, e.start, e.end
	sh.mu.Unlock()
	if !due.empty() {
		w.emit(p, tenant, due, used, limit, s.Unit, start, end, now)
	}
}

// observe records the figures of a tenant past the lowest threshold and
// emits the thresholds it crossed for the first time this period.
func (w *Watcher) observe(p *watched, tenant string, used, limit int64, window time.Duration, unit limits.Unit, refused bool) {
	if p.Global {
		tenant = ""
	}
	crossed := p.crossed(used, limit, refused)
	now := w.opts.clock.Now()
	ns := now.UnixNano()
	sh := p.st.shard(tenant)
	sh.mu.Lock()
	e := sh.m[tenant]
	if e != nil && !p.current(e, window, ns) {
		e.fired = bits{}
		e.start, e.end = p.period(window, ns)
	}
	if e == nil {
		if crossed.empty() || !sh.room(ns, p.st.perShard.Load()) {
			sh.mu.Unlock()
			if !crossed.empty() {
				p.st.untracked.Add(1)
			}
			return
		}
		e = &entry{}
		e.start, e.end = p.period(window, ns)
		sh.m[strings.Clone(tenant)] = e
	}
	e.used, e.limit = used, limit
	due := crossed.andNot(e.fired)
	e.fired = e.fired.or(due)
	start, end := e.start, e.end
	sh.mu.Unlock()
	if !due.empty() {
		w.emit(p, tenant, due, used, limit, unit, start, end, now)
	}
}

// current reports whether e's period is still the one a decision at ns
// whose window is window falls in: it has not ended, and a fixed period
// is as long as the window (a reload that changed the quota's per, or a
// first decision after an entry made without a window, starts the
// tenant's standing in the new period).
func (p *watched) current(e *entry, window time.Duration, ns int64) bool {
	return ns < e.end && (p.Period != limits.PeriodFixed || window <= 0 || e.end-e.start == int64(window))
}

// period returns the quota period holding ns, the window of a fixed
// period being the decision's.
func (p *watched) period(window time.Duration, ns int64) (start, end int64) {
	if p.Period == limits.PeriodFixed && window <= 0 {
		return ns, limits.MaxWait // no period known: remember until a decision tells one
	}
	l := limits.Limit{Period: p.Period, Per: window, Location: p.Location}
	return limits.QuotaPeriod(&l, ns)
}

// emit reports each threshold of due: counted, logged, handed to the
// handlers and the webhook.
func (w *Watcher) emit(p *watched, tenant string, due bits, used, limit int64, unit limits.Unit, start, end int64, now time.Time) {
	tenant = strings.Clone(tenant)
	for _, t := range p.Thresholds {
		if !due.has(t) {
			continue
		}
		p.st.warned[t].Add(1)
		wn := Warning{
			Tenant: tenant, Policy: p.Name, Threshold: t, Unit: unit, Used: used, Limit: limit, Soft: p.Soft,
			PeriodStart: time.Unix(0, start).UTC(), PeriodEnd: time.Unix(0, end).UTC(), Time: now.UTC(),
		}
		wn.ID = warningID(wn.Policy, wn.Tenant, t, wn.PeriodStart)
		w.opts.log.LogAttrs(context.Background(), slog.LevelWarn, "budget threshold crossed",
			slog.String("policy", wn.Policy), slog.String("tenant", wn.Tenant), slog.Int("threshold", t),
			slog.Int64("used", used), slog.Int64("limit", limit), slog.String("unit", string(unit)),
			slog.Bool("soft", wn.Soft), slog.Time("period_end", wn.PeriodEnd), slog.String("id", wn.ID))
		for _, h := range w.opts.handlers {
			h(wn)
		}
		if w.opts.hook != nil {
			w.opts.hook.Notify(wn)
		}
	}
}

// Close stops exporting the Watcher's metrics. It does not close the
// webhook, which its owner closes.
func (w *Watcher) Close() error {
	if w.reg != nil {
		return w.reg.Unregister()
	}
	return nil
}
