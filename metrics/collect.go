package metrics

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

// Histogram bucket boundaries.
var (
	// QueueWaitBuckets are the boundaries of admission.queue.wait, in seconds.
	QueueWaitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// StoreCallBuckets are the boundaries of admission.store.duration, in
	// seconds: a healthy Redis answers in a fraction of a millisecond, and
	// the store's default deadline for an answer is 500 ms.
	StoreCallBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	// LeaseBuckets are the boundaries of admission.lease.duration, in seconds.
	LeaseBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// AccuracyBuckets are the boundaries of admission.estimate.accuracy
	// (actual ÷ estimated).
	AccuracyBuckets = []float64{0.1, 0.25, 0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2, 4, 10}
	// RetryAfterBuckets are the boundaries of admission.refusal.retry_after,
	// in seconds: from a token bucket's next token to a day's quota.
	RetryAfterBuckets = []float64{0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 86400}
)

// observables are the instruments exported from the cells at collection.
type observables struct {
	decisions, cost, rollbacks, expirations, evictions, storeErrors, reloads metric.Int64ObservableCounter
	releaseRetries                                                           metric.Int64ObservableCounter
	tenantDecisions, tenantCost                                              metric.Int64ObservableCounter
	partitions, nearLimit, queueDepth, queueHeld, inflight                   metric.Int64ObservableUpDownCounter
	partitionsLimit, limit                                                   metric.Int64ObservableGauge
	tenantUtil                                                               metric.Float64ObservableGauge
}

func (o *Observer) instruments(m metric.Meter) error {
	var errs []error
	hist := func(name, unit, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	updown := func(name, unit, desc string) metric.Int64ObservableUpDownCounter {
		g, err := m.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	o.queueWait = hist("admission.queue.wait", "s",
		"Time requests spent in a policy's queue, by how the wait ended.", QueueWaitBuckets)
	o.lease = hist("admission.lease.duration", "s",
		"How long concurrency permits were held, from admission to settlement.", LeaseBuckets)
	o.accuracy = hist("admission.estimate.accuracy", "1",
		"Actual tokens divided by estimated tokens per settled request, by policy and model family.", AccuracyBuckets)
	o.retryAfter = hist("admission.refusal.retry_after", "s",
		"Retry hints of refused requests, by policy and decision (rejected, would_reject, timeout, fail_closed); recorded in the request's context, so that a sampled refusal's trace is its bucket's exemplar.", RetryAfterBuckets)
	o.storeCall = hist("admission.store.duration", "s",
		"Latency of calls to a shared store (such as Redis), by store, operation and outcome (ok, error).", StoreCallBuckets)

	var ob observables
	ob.decisions = counter("admission.decisions", "{decision}",
		"Decisions by policy, mode, decision (admitted, rejected, would_reject, queued, canceled, timeout, fail_open, fail_closed) and reason.")
	ob.cost = counter("admission.cost", "{cost}",
		"Cost of decided requests in the policy's unit (label unit: requests, tokens, cost in micro-dollars).")
	ob.rollbacks = counter("admission.rollbacks", "{decision}",
		"Admissions given back because another policy refused the same request.")
	ob.expirations = counter("admission.lease.expirations", "{permit}",
		"Concurrency permits reclaimed because their ticket was not settled in time.")
	ob.releaseRetries = counter("admission.release.retries", "{release}",
		"Concurrency releases the store failed, by outcome: retrying, landed (a retry reached the store) or abandoned (the lease expired first).")
	ob.evictions = counter("admission.partitions.evictions", "{partition}",
		"Idle partitions evicted from a policy's table.")
	ob.storeErrors = counter("admission.store.errors", "{error}",
		"Failed or timed-out store calls by policy, store and the action taken (open, closed, local).")
	ob.reloads = counter("admission.reloads", "{reload}",
		"Configuration reloads by result (ok, partial, rejected).")
	ob.tenantDecisions = counter("admission.tenant.decisions", "{decision}",
		"Decisions of the top K tenants per policy (others as __other__), by decision: admitted (counted when settled), rejected, would_reject.")
	ob.tenantCost = counter("admission.tenant.cost", "{cost}",
		"Cost of the top K tenants' decisions per policy (others as __other__), in the policy's unit; admitted work at its actual cost.")
	ob.partitions = updown("admission.partitions", "{partition}",
		"Partitions per policy: held in memory, or found in Redis for a policy on the Redis store (a count bounded by its StatsKeys, made at most every StatsEvery).")
	ob.partitionsLimit = gauge("admission.partitions.limit", "{partition}",
		"Maximum partitions a policy keeps before overflowing.")
	ob.nearLimit = updown("admission.partitions.near_limit", "{partition}",
		"Partitions using 80% or more of the policy's limit.")
	ob.queueDepth = updown("admission.queue.depth", "{request}",
		"Requests waiting in a policy's queue.")
	ob.queueHeld = updown("admission.queue.held", "{request}",
		"Places a policy's queues hold for the retries of requests they refused.")
	ob.inflight = updown("admission.inflight", "{cost}",
		"Cost held by concurrency permits, in the policy's unit.")
	ob.limit = gauge("admission.limit", "{cost}",
		"A policy's own limit (plans may differ per tenant), with its mode, algorithm and unit.")
	var err error
	ob.tenantUtil, err = m.Float64ObservableGauge("admission.tenant.utilization", metric.WithUnit("1"),
		metric.WithDescription("Highest share of its limit a top-K tenant's partition reached in the current or the previous minute when at least 0.8, else 0."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	o.reg, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		o.collect(obs, &ob)
		return nil
	}, ob.decisions, ob.cost, ob.rollbacks, ob.expirations, ob.releaseRetries, ob.evictions, ob.storeErrors, ob.reloads,
		ob.tenantDecisions, ob.tenantCost, ob.partitions, ob.partitionsLimit, ob.nearLimit,
		ob.queueDepth, ob.queueHeld, ob.inflight, ob.limit, ob.tenantUtil)
	return err
}

// Attribute keys.
var (
	keyMode     = attribute.Key("mode")
	keyDecision = attribute.Key("decision")
	keyReason   = attribute.Key("reason")
	keyUnit     = attribute.Key("unit")
	keyTenant   = attribute.Key("tenant")
)

func modeName(m int) string {
	if m == 1 {
		return limits.Shadow.String()
	}
	return limits.Enforce.String()
}

// collect exports the cells, sketches and the watched controller's state.
func (o *Observer) collect(obs metric.Observer, ob *observables) {
	o.collectMu.Lock()
	defer o.collectMu.Unlock()
	var list []*policyMetrics
	if l := o.list.Load(); l != nil {
		list = *l
	}
	for _, pm := range list {
		o.collectPolicy(obs, ob, pm)
	}

	o.mu.Lock()
	for _, sm := range o.stores {
		obs.ObserveInt64(ob.storeErrors, int64(sm.n.Load()), metric.WithAttributeSet(sm.attrs))
	}
	o.mu.Unlock()
	for i, r := range [3]string{"ok", "rejected", "partial"} {
		obs.ObserveInt64(ob.reloads, int64(o.reloads[i].Load()), metric.WithAttributes(attribute.String("result", r)))
	}

	src := o.source.Load()
	if src == nil {
		return
	}
	policies := (*src).Policies()
	maxParts := make(map[string]int, len(policies))
	for _, p := range policies {
		maxParts[p.Name] = p.MaxPartitions
		if maxParts[p.Name] == 0 {
			maxParts[p.Name] = limits.DefaultMaxPartitions
		}
	}
	for _, s := range (*src).Stats() {
		pa := metric.WithAttributes(attribute.String("policy", s.Name))
		obs.ObserveInt64(ob.partitions, int64(s.Partitions), pa)
		obs.ObserveInt64(ob.partitionsLimit, int64(maxParts[s.Name]), pa)
		obs.ObserveInt64(ob.nearLimit, int64(s.NearLimit), pa)
		obs.ObserveInt64(ob.queueDepth, int64(s.Queued), pa)
		obs.ObserveInt64(ob.queueHeld, int64(s.Held), pa)
		unit := keyUnit.String(string(s.Unit))
		obs.ObserveInt64(ob.inflight, s.InFlight, metric.WithAttributes(attribute.String("policy", s.Name), unit))
		obs.ObserveInt64(ob.limit, s.Limit, metric.WithAttributes(attribute.String("policy", s.Name), unit,
			keyMode.String(s.Mode.String()), attribute.String("algorithm", s.Algorithm.String())))
	}
}

func (o *Observer) collectPolicy(obs metric.Observer, ob *observables, pm *policyMetrics) {
	unit := keyUnit.String(string(limits.UnitRequests))
	if m := pm.meta.Load(); m != nil {
		unit = keyUnit.String(string(m.unit))
	}
	for m := range numModes {
		for out := range admission.NumOutcomes {
			for r := range admission.NumReasons {
				n, cost := pm.cells[m][out][r].load()
				if n == 0 {
					continue
				}
				sets := pm.cellAttrs[m][out][r]
				if sets == nil {
					kv := []attribute.KeyValue{pm.policyAttr, keyMode.String(modeName(m)),
						keyDecision.String(admission.Outcome(out).String()), keyReason.String(admission.Reason(r).String())}
					sets = &[2]attribute.Set{attribute.NewSet(kv...), attribute.NewSet(append(kv, unit)...)}
					pm.cellAttrs[m][out][r] = sets
				}
				obs.ObserveInt64(ob.decisions, int64(n), metric.WithAttributeSet(sets[0]))
				obs.ObserveInt64(ob.cost, int64(cost), metric.WithAttributeSet(sets[1]))
			}
		}
		if n := pm.rollbacks[m].Load(); n > 0 {
			obs.ObserveInt64(ob.rollbacks, int64(n), metric.WithAttributes(pm.policyAttr, keyMode.String(modeName(m))))
		}
	}
	pa := metric.WithAttributes(pm.policyAttr)
	obs.ObserveInt64(ob.expirations, int64(pm.expired.Load()), pa)
	obs.ObserveInt64(ob.evictions, int64(pm.evicted.Load()), pa)
	for i, outcome := range releaseOutcomes {
		obs.ObserveInt64(ob.releaseRetries, int64(pm.releases[i].Load()), metric.WithAttributes(pm.policyAttr, attribute.String("outcome", outcome)))
	}

	var top []tenantCount
	var tot sketchTotals
	top, tot = pm.tenants.top(o.cfg.topK, o.epoch(), o.scratch)
	o.scratch = top[:0]
	var sumW, sumN [numClasses]uint64
	for _, t := range top {
		ta := keyTenant.String(t.tenant)
		for c := range numClasses {
			sumW[c] += t.weight[c]
			sumN[c] += t.events[c]
			if t.events[c] == 0 {
				continue
			}
			da := keyDecision.String(classNames[c])
			obs.ObserveInt64(ob.tenantDecisions, int64(t.events[c]), metric.WithAttributes(pm.policyAttr, da, ta))
			obs.ObserveInt64(ob.tenantCost, int64(t.weight[c]), metric.WithAttributes(pm.policyAttr, da, unit, ta))
		}
		obs.ObserveFloat64(ob.tenantUtil, t.util, metric.WithAttributes(pm.policyAttr, ta))
	}
	ta := keyTenant.String(Other)
	for c := range numClasses {
		// Other is everything not exported by name. A tenant entering the
		// top K takes its share out of it; Other holds its value then
		// rather than go backwards, which Prometheus would read as a reset.
		ot := &pm.other[c]
		ot.weight = max(ot.weight, tot.weight[c]-min(sumW[c], tot.weight[c]))
		ot.events = max(ot.events, tot.events[c]-min(sumN[c], tot.events[c]))
		if ot.events == 0 {
			continue
		}
		da := keyDecision.String(classNames[c])
		obs.ObserveInt64(ob.tenantDecisions, int64(ot.events), metric.WithAttributes(pm.policyAttr, da, ta))
		obs.ObserveInt64(ob.tenantCost, int64(ot.weight), metric.WithAttributes(pm.policyAttr, da, unit, ta))
	}
}
