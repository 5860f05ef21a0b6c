package metrics

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/tenantname"
)

// Defaults of the options.
const (
	// DefaultTopK is how many tenants per policy are exported by name.
	DefaultTopK = 20
	// DefaultSketchFactor sizes each policy's heavy-hitter sketch: it
	// monitors DefaultSketchFactor × K tenants to rank the top K well.
	DefaultSketchFactor = 10
	// NearLimit is the utilisation from which an admitted decision
	// reports its tenant's utilisation (admission.tenant.utilization).
	NearLimit = 0.8
	// UtilizationWindow is the window of admission.tenant.utilization:
	// the gauge is the highest utilisation noted in the current window
	// or the previous one (windows aligned on the clock), so every
	// scraper reads the same peak and a scrape resets nothing.
	UtilizationWindow = time.Minute
	// DefaultMaxPolicies bounds the policies counted by name; decisions of
	// further policies are counted under the policy name Other.
	DefaultMaxPolicies = 64
	// ScopeName is the instrumentation scope of every instrument.
	ScopeName = "github.com/sluicehq/sluice/metrics"
)

// A Source reports the state of a controller's policies at collection
// time. *admission.Controller is one.
type Source interface {
	Stats() []admission.PolicyStats
	Policies() []admission.Policy
}

var _ Source = (*admission.Controller)(nil)

// An Option configures an Observer.
type Option func(*config)

type config struct {
	provider    metric.MeterProvider
	topK        int
	sketchCap   int
	maxPolicies int
	clock       admission.Clock
	family      func(model string) string
	source      Source
}

// WithMeterProvider sets where the instruments live; the default is the
// global provider (otel.GetMeterProvider). Use NewPrometheus for a
// Prometheus endpoint, or your own sdkmetric.MeterProvider with an OTLP
// reader to push to a collector.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.provider = mp }
}

// WithTopK sets how many tenants per policy are exported by name (default
// DefaultTopK); every other tenant is counted as Other.
func WithTopK(k int) Option { return func(c *config) { c.topK = k } }

// WithSketchCapacity sets how many tenants each policy's sketch monitors
// (default DefaultSketchFactor × K). More is more accurate and costs memory
// and collection time, not request time.
func WithSketchCapacity(n int) Option { return func(c *config) { c.sketchCap = n } }

// WithMaxPolicies bounds the number of policy label values (default
// DefaultMaxPolicies).
func WithMaxPolicies(n int) Option { return func(c *config) { c.maxPolicies = n } }

// WithClock sets the clock used to measure lease durations; use the
// controller's clock. The default is admission.SystemClock.
func WithClock(clk admission.Clock) Option { return func(c *config) { c.clock = clk } }

// WithModelFamily replaces ModelFamily, the function that maps a model name
// to the model_family label. At most 32 distinct families are kept; the
// rest are labelled "other".
func WithModelFamily(f func(model string) string) Option {
	return func(c *config) { c.family = f }
}

// WithSource sets the controller whose state the gauges report. It can
// also be set later with Watch, since the controller is usually built with
// the observer.
func WithSource(s Source) Option { return func(c *config) { c.source = s } }

// An Observer records a controller's decisions as OpenTelemetry metrics in
// the "admission." namespace. Use it with admission.WithObserver and call
// Watch with the controller for the gauges.
//
// Decisions are counted in precomputed cells, one per policy, mode,
// outcome and reason, each one atomic addition that carries both the
// count and the cost; the cells are exported through observable counters
// when the metrics are collected. Recording an admitted decision therefore
// costs a few nanoseconds and allocates nothing. Queue waits, lease
// durations, estimate accuracy and store call latencies go to synchronous
// histograms with prebuilt attribute sets, each recorded in the context
// of the request it is about when the event carries one
// (Decision.Context, Settlement.Context, backend.Call.Context), so that
// a sampled request's trace becomes a bucket's exemplar.
//
// Tenants appear as a label only through a heavy-hitter sketch per policy:
// the K tenants with the most refused cost (rejected or would-reject) are
// exported by name and everyone else as Other, so 100,000 tenants make at
// most K+1 tenant label values per policy.
type Observer struct {
	cfg    config
	source atomic.Pointer[Source]

	fast     atomic.Pointer[fastTable] // lock-free lookup by name pointer
	mu       sync.Mutex                // guards byName, list growth, stores, families
	byName   map[string]*policyMetrics
	list     atomic.Pointer[[]*policyMetrics]
	stores   map[storeKey]*storeMetrics
	families map[string]struct{}

	reloads [3]atomic.Uint64 // ok, rejected, partial

	queueWait  metric.Float64Histogram
	retryAfter metric.Float64Histogram
	lease      metric.Float64Histogram
	accuracy   metric.Float64Histogram
	storeCall  metric.Float64Histogram
	callOpts   sync.Map // callKey → []metric.RecordOption
	callKeys   atomic.Int64

	collectMu sync.Mutex // serialises collections
	reg       metric.Registration
	scratch   []tenantCount
}

// policyMeta describes a policy, as its decisions report it.
type policyMeta struct {
	unit      limits.Unit
	algorithm limits.Algorithm
}

// fastTable is an immutable table from policy name pointers to cells,
// replaced whole when a policy is added; a table of its own (not a slice)
// saves a pointer hop on every decision.
type fastTable struct {
	n int
	e [maxFast]fastEntry
}

type fastEntry struct {
	ptr *byte
	n   int
	pm  *policyMetrics
}

type storeKey struct {
	policy, store string
	action        limits.FailMode
}

type storeMetrics struct {
	n     atomic.Uint64
	attrs attribute.Set
}

// numModes counts the modes a decision can carry: Enforce and Shadow.
const numModes = 2

// policyMetrics holds the cells of one policy.
type policyMetrics struct {
	name string
	// meta is set by the policy's first decision: store errors and
	// evictions may name a policy before any decision carried its figures.
	meta      atomic.Pointer[policyMeta]
	cells     [numModes][admission.NumOutcomes][admission.NumReasons]pair
	rollbacks [numModes]atomic.Uint64
	expired   atomic.Uint64
	evicted   atomic.Uint64
	releases  [len(releaseOutcomes)]atomic.Uint64 // by admission.ReleaseObserver outcome
	tenants   *sketch

	policyAttr attribute.KeyValue
	waitOpts   [admission.NumOutcomes][]metric.RecordOption
	leaseOpts  []metric.RecordOption
	accMu      sync.RWMutex
	accOpts    map[string][]metric.RecordOption

	// Guarded by the observer's collectMu.
	cellAttrs [numModes][admission.NumOutcomes][admission.NumReasons]*[2]attribute.Set
	other     [numClasses]struct{ weight, events uint64 }
}

// New returns an Observer whose instruments are created at once on the
// configured meter provider.
func New(opts ...Option) (*Observer, error) {
	o := &Observer{
		cfg: config{
			topK:        DefaultTopK,
			maxPolicies: DefaultMaxPolicies,
			clock:       admission.SystemClock{},
			family:      ModelFamily,
		},
		byName:   map[string]*policyMetrics{},
		stores:   map[storeKey]*storeMetrics{},
		families: map[string]struct{}{},
	}
	o.fast.Store(&fastTable{})
	for _, opt := range opts {
		opt(&o.cfg)
	}
	c := &o.cfg
	var errs []error
	if c.topK < 1 {
		errs = append(errs, errors.New("metrics: top K must be >= 1"))
	}
	if c.sketchCap == 0 {
		c.sketchCap = DefaultSketchFactor * c.topK
	}
	if c.sketchCap < c.topK {
		errs = append(errs, errors.New("metrics: sketch capacity must be >= top K"))
	}
	if c.maxPolicies < 1 {
		errs = append(errs, errors.New("metrics: max policies must be >= 1"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if c.provider == nil {
		c.provider = otel.GetMeterProvider()
	}
	if c.source != nil {
		o.Watch(c.source)
	}
	if err := o.instruments(c.provider.Meter(ScopeName)); err != nil {
		return nil, err
	}
	return o, nil
}

// Watch sets the controller whose policies the gauges (partitions, queue
// depth, in-flight work, limits, near-limit partitions) report.
func (o *Observer) Watch(s Source) { o.source.Store(&s) }

// Close unregisters the observable instruments' callback.
func (o *Observer) Close() error {
	if o.reg == nil {
		return nil
	}
	return o.reg.Unregister()
}

// policy returns the cells of the named policy. The controller passes the
// same string for a policy every time, so the common case is a comparison
// of pointers in a short, immutable list.
func (o *Observer) policy(name string, st *admission.Status) *policyMetrics {
	ft := o.fast.Load()
	p := unsafe.StringData(name)
	for i := range ft.e[:ft.n] {
		if e := &ft.e[i]; e.ptr == p && e.n == len(name) {
			return e.pm
		}
	}
	return o.policySlow(name, st)
}

// maxFast bounds the pointer list; names beyond it (configuration reloads
// make new strings) are found through the map.
const maxFast = 32

func (o *Observer) policySlow(name string, st *admission.Status) *policyMetrics {
	o.mu.Lock()
	defer o.mu.Unlock()
	pm, ok := o.byName[name]
	if !ok {
		var list []*policyMetrics
		if l := o.list.Load(); l != nil {
			list = *l
		}
		if len(list) >= o.cfg.maxPolicies {
			if pm = o.byName[Other]; pm == nil {
				pm = o.newPolicy(Other, st)
				o.byName[Other] = pm
				list = append(slices.Clip(list), pm)
				o.list.Store(&list)
			}
			return pm
		}
		pm = o.newPolicy(name, st)
		o.byName[pm.name] = pm
		list = append(slices.Clip(list), pm)
		o.list.Store(&list)
	}
	if st != nil && pm.meta.Load() == nil {
		pm.meta.Store(&policyMeta{unit: st.Unit, algorithm: st.Algorithm})
	}
	if pm.meta.Load() == nil {
		return pm // stays off the fast list until a decision describes it
	}
	if ft := *o.fast.Load(); ft.n < maxFast {
		ft.e[ft.n] = fastEntry{ptr: unsafe.StringData(name), n: len(name), pm: pm}
		ft.n++
		o.fast.Store(&ft)
	}
	return pm
}

func (o *Observer) newPolicy(name string, st *admission.Status) *policyMetrics {
	pm := &policyMetrics{name: name, tenants: newSketch(o.cfg.sketchCap)}
	pm.policyAttr = attribute.String("policy", name)
	for out := range admission.NumOutcomes {
		set := attribute.NewSet(pm.policyAttr, attribute.String("decision", admission.Outcome(out).String()))
		pm.waitOpts[out] = []metric.RecordOption{metric.WithAttributeSet(set)}
	}
	pm.leaseOpts = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(pm.policyAttr))}
	pm.accOpts = map[string][]metric.RecordOption{}
	return pm
}

// Decision counts one policy's decision. It allocates nothing; a plain
// admission costs a pointer comparison per policy and one atomic addition.
func (o *Observer) Decision(d *admission.Decision) {
	// o.policy, by hand: the lookup is a good part of a decision's cost.
	var pm *policyMetrics
	ft := o.fast.Load()
	p, n := unsafe.StringData(d.Policy), len(d.Policy)
	for i := range ft.e[:ft.n] {
		if e := &ft.e[i]; e.ptr == p && e.n == n {
			pm = e.pm
			break
		}
	}
	// Remaining ≤ Limit/5: the partition is at NearLimit (80%) or more.
	if pm == nil || d.Outcome != admission.Admitted || d.Mode != limits.Enforce ||
		d.Reason != admission.ReasonNone || d.QueueWait != 0 || d.RolledBack ||
		5*d.Remaining <= d.Limit { // Remaining ≤ Limit/5 without a division
		o.decision(pm, d)
		return
	}
	cell := &pm.cells[0][admission.Admitted][admission.ReasonNone]
	if v, ok := cell.tryAdd(d.Cost); !ok {
		cell.finish(d.Cost, v)
	}
}

// decision counts every decision but a plain enforced admission of a
// known policy that leaves its partition below NearLimit.
func (o *Observer) decision(pm *policyMetrics, d *admission.Decision) {
	if pm == nil {
		pm = o.policySlow(d.Policy, &d.Status)
	}
	mode := 0
	if d.Mode == limits.Shadow {
		mode = 1
	}
	out, reason := int(d.Outcome), int(d.Reason)
	if out >= admission.NumOutcomes || reason >= admission.NumReasons {
		return
	}
	cost := d.Cost
	if d.RolledBack {
		// Another policy refused the request: this policy's permits were
		// given back, so the decision counts but its cost does not.
		cost = 0
		pm.rollbacks[mode].Add(1)
	}
	cell := &pm.cells[mode][out][reason]
	if v, ok := cell.tryAdd(cost); !ok {
		cell.finish(cost, v)
	}
	switch d.Outcome {
	case admission.Admitted, admission.FailOpen:
		if d.QueueWait > 0 {
			pm.recordWait(o, out, d)
		}
		// Admitted work is counted per tenant when it settles, at its
		// actual cost; here only a partition near its limit is noted.
		if u := utilisation(&d.Status); u >= NearLimit && !d.RolledBack {
			pm.tenants.touch(tenantLabel(d.Tenant), u, o.epoch())
		}
	case admission.Rejected, admission.FailClosed:
		pm.recordRetry(o, out, d)
		o.refused(pm, d, classRejected, cost)
	case admission.Timeout:
		pm.recordWait(o, out, d)
		pm.recordRetry(o, out, d)
		o.refused(pm, d, classRejected, cost)
	case admission.WouldReject:
		pm.recordRetry(o, out, d)
		o.refused(pm, d, classWouldReject, cost)
	case admission.Canceled:
		pm.recordWait(o, out, d)
	}
}

// refused counts the refusal d, of class c and the given cost, for its
// tenant.
func (o *Observer) refused(pm *policyMetrics, d *admission.Decision, c int, cost int64) {
	var ep int64
	u := utilisation(&d.Status)
	if u > 0 {
		ep = o.epoch()
	}
	pm.tenants.add(tenantLabel(d.Tenant), c, uint64(max(cost, 0)), u, ep)
}

// epoch returns the number of the current UtilizationWindow.
func (o *Observer) epoch() int64 {
	return o.cfg.clock.Now().UnixNano() / int64(UtilizationWindow)
}

// recordWait records d's queue wait in the context of d's request, so
// that a sampled request's trace becomes the bucket's exemplar.
func (pm *policyMetrics) recordWait(o *Observer, out int, d *admission.Decision) {
	o.queueWait.Record(orBackground(d.Context), d.QueueWait.Seconds(), pm.waitOpts[out]...)
}

// orBackground returns ctx, or the background context when an event
// carries none.
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// recordRetry records the retry hint of d, a refusal, in the context of
// d's request, so that every refusal, queued or not, can be followed from
// its bucket's exemplar to its trace.
func (pm *policyMetrics) recordRetry(o *Observer, out int, d *admission.Decision) {
	o.retryAfter.Record(orBackground(d.Context), max(d.RetryAfter, 0).Seconds(), pm.waitOpts[out]...)
}

// MaxTenantLabel bounds the length in bytes of a tenant label value. A
// tenant name that is longer, is not valid UTF-8, holds a control
// character or is one of the reserved values Other and NoTenant is
// exported as a printable prefix of it, "~" and 16 hex digits of a hash of
// the whole name (FNV-1a, the same in every process), so that one hostile
// name can neither break the scrape, nor fill memory or the exposition,
// nor pass for another tenant or the overflow bucket.
const MaxTenantLabel = tenantname.Max

// tenantLabel returns the tenant label value of tenant t: t itself in the
// common case, without allocating.
func tenantLabel(t string) string {
	if t == "" {
		return NoTenant
	}
	return tenantname.Safe(t, Other, NoTenant)
}

// utilisation is the share of the partition's limit in use after a
// decision.
func utilisation(s *admission.Status) float64 {
	if s.Limit <= 0 {
		return 0
	}
	return 1 - float64(max(s.Remaining, 0))/float64(s.Limit)
}

// Settled counts the settled work of the tenant at its actual cost,
// records how long a concurrency permit was held and, for token policies,
// the ratio of actual to estimated tokens, both in the settlement's
// context when it has one (Ticket.SettleContext), so that a sampled
// request's trace becomes the bucket's exemplar.
func (o *Observer) Settled(s admission.Settlement) {
	pm := o.policy(s.Policy, nil)
	pm.tenants.add(tenantLabel(s.Tenant), classAdmitted, uint64(max(s.Actual, 0)), 0, 0)
	if m := pm.meta.Load(); m != nil && m.algorithm == limits.Concurrency && !s.Admitted.IsZero() {
		held := o.cfg.clock.Now().Sub(s.Admitted)
		o.lease.Record(orBackground(s.Context), max(held, 0).Seconds(), pm.leaseOpts...)
	}
	if s.Unit == limits.UnitTokens && s.Estimated > 0 {
		opts := o.accuracyOpts(pm, s.Model)
		o.accuracy.Record(orBackground(s.Context), float64(s.Actual)/float64(s.Estimated), opts...)
	}
}

// maxFamilies bounds the model_family label values.
const maxFamilies = 32

func (o *Observer) accuracyOpts(pm *policyMetrics, model string) []metric.RecordOption {
	fam := o.cfg.family(model)
	pm.accMu.RLock()
	opts, ok := pm.accOpts[fam]
	pm.accMu.RUnlock()
	if ok {
		return opts
	}
	o.mu.Lock()
	if _, known := o.families[fam]; !known {
		if len(o.families) >= maxFamilies {
			fam = "other"
		}
		o.families[fam] = struct{}{}
	}
	o.mu.Unlock()
	pm.accMu.Lock()
	defer pm.accMu.Unlock()
	if opts, ok := pm.accOpts[fam]; ok {
		return opts
	}
	set := attribute.NewSet(pm.policyAttr, attribute.String("model_family", fam))
	opts = []metric.RecordOption{metric.WithAttributeSet(set)}
	pm.accOpts[fam] = opts
	return opts
}

// LeaseExpired counts concurrency permits reclaimed from unsettled tickets.
func (o *Observer) LeaseExpired(policy string, n int) {
	o.policy(policy, nil).expired.Add(uint64(max(n, 0)))
}

// releaseOutcomes are the outcomes of admission.ReleaseObserver.
var releaseOutcomes = [...]string{"retrying", "landed", "abandoned"}

// ReleaseRetry counts a concurrency release the store failed, by outcome
// (admission.ReleaseObserver).
func (o *Observer) ReleaseRetry(policy, outcome string) {
	for i, name := range releaseOutcomes {
		if name == outcome {
			o.policy(policy, nil).releases[i].Add(1)
			return
		}
	}
}

// PartitionsEvicted counts idle partitions dropped.
func (o *Observer) PartitionsEvicted(policy string, n int) {
	o.policy(policy, nil).evicted.Add(uint64(max(n, 0)))
}

// StoreError counts a failed store call by policy, store and what the
// policy did instead (open, closed, local). The error text is never a label.
func (o *Observer) StoreError(e admission.StoreEvent) {
	pm := o.policy(e.Policy, nil)
	store := e.Store
	if store == "" {
		store = "memory"
	}
	k := storeKey{policy: pm.name, store: store, action: e.Action}
	o.mu.Lock()
	sm := o.stores[k]
	if sm == nil {
		if len(o.stores) >= 4*o.cfg.maxPolicies {
			k.store = Other
		}
		if sm = o.stores[k]; sm == nil {
			sm = &storeMetrics{attrs: attribute.NewSet(pm.policyAttr,
				attribute.String("store", k.store), attribute.String("action", e.Action.String()))}
			o.stores[k] = sm
		}
	}
	o.mu.Unlock()
	sm.n.Add(1)
}

type callKey struct {
	store, op string
	failed    bool
}

// StoreCall records a store call's latency (backend.CallObserver):
// the Redis store reports every script call through it. Calls refused
// without reaching the backend (an open breaker) have no latency and are
// counted by StoreError only. The latency is recorded in the call's
// context, so that a sampled request's trace becomes the bucket's
// exemplar.
func (o *Observer) StoreCall(c backend.Call) {
	if c.Duration <= 0 {
		return
	}
	k := callKey{store: c.Store, op: c.Op, failed: c.Err != nil}
	opts, ok := o.callOpts.Load(k)
	if !ok {
		outcome := "ok"
		if k.failed {
			outcome = "error"
		}
		store := k.store
		if store == "" {
			store = "memory"
		}
		// Bound the store label: past the limit new stores share Other
		// (the key stays the caller's, so its next call finds its options).
		if o.callKeys.Add(1) > int64(4*o.cfg.maxPolicies) {
			store = Other
		}
		set := attribute.NewSet(attribute.String("store", store), attribute.String("op", k.op), attribute.String("outcome", outcome))
		opts, _ = o.callOpts.LoadOrStore(k, []metric.RecordOption{metric.WithAttributeSet(set)})
	}
	o.storeCall.Record(orBackground(c.Context), c.Duration.Seconds(), opts.([]metric.RecordOption)...)
}

var _ backend.CallObserver = (*Observer)(nil)

// CountReload counts a policy file reload by result, as
// admission_reloads_total: ok when err is nil, partial when err has an
// Applied method that reports true (a reload.PartialError: the file is in
// force without a part of it), rejected otherwise (call it from
// reload.OnReload with the reload's Err). A nil Observer (metrics
// disabled) counts nothing.
func (o *Observer) CountReload(err error) {
	if o == nil {
		return
	}
	var applied interface{ Applied() bool }
	switch {
	case err == nil:
		o.reloads[0].Add(1)
	case errors.As(err, &applied) && applied.Applied():
		o.reloads[2].Add(1)
	default:
		o.reloads[1].Add(1)
	}
}

var (
	_ admission.Observer        = (*Observer)(nil)
	_ admission.ReleaseObserver = (*Observer)(nil)
)
