package metrics

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/admission"
)

// A Metric describes one exported metric family as Prometheus sees it
// through NewPrometheus: its final name (with _total and _seconds), type
// and labels. Histograms also expose _bucket, _sum and _count series.
type Metric struct {
	// Name is the Prometheus name, suffixes included.
	Name string
	// Type is counter, gauge or histogram.
	Type string
	// Labels are the label names (histograms add le).
	Labels []string
	// Help says what the metric counts.
	Help string
}

// Catalog lists every metric family the Observer exports, sorted by name.
// A test checks it against the exporter's real output.
func Catalog() []Metric {
	return []Metric{
		{"admission_cost_total", "counter", []string{"policy", "mode", "decision", "reason", "unit"},
			"Cost of decided requests in the policy's unit (requests, tokens, cost = micro-dollars). Rolled-back admissions add no cost."},
		{"admission_decisions_total", "counter", []string{"policy", "mode", "decision", "reason"},
			"Decisions: admitted, rejected, would_reject, queued, canceled, timeout, fail_open, fail_closed. queued is an intermediate event: leave it out of ratios."},
		{"admission_estimate_accuracy", "histogram", []string{"policy", "model_family"},
			"Actual ÷ estimated tokens per settled request."},
		{"admission_inflight", "gauge", []string{"policy", "unit"},
			"Cost held by concurrency permits."},
		{"admission_lease_duration_seconds", "histogram", []string{"policy"},
			"How long concurrency permits were held."},
		{"admission_lease_expirations_total", "counter", []string{"policy"},
			"Permits reclaimed from tickets never settled."},
		{"admission_limit", "gauge", []string{"policy", "mode", "algorithm", "unit"},
			"The policy's own limit; its labels say the mode (enforce, shadow)."},
		{"admission_partitions", "gauge", []string{"policy"},
			"Partitions held in memory, or found in Redis for a policy on the Redis store (at most StatsKeys of them, counted at most every StatsEvery)."},
		{"admission_partitions_evictions_total", "counter", []string{"policy"},
			"Idle partitions evicted."},
		{"admission_partitions_limit", "gauge", []string{"policy"},
			"Maximum partitions before overflow."},
		{"admission_partitions_near_limit", "gauge", []string{"policy"},
			"Partitions at 80% or more of the policy's limit."},
		{"admission_queue_depth", "gauge", []string{"policy"},
			"Requests waiting in the policy's queue."},
		{"admission_queue_held", "gauge", []string{"policy"},
			"Places the policy's queues hold for the retries of requests they refused (clients that number their retries)."},
		{"admission_queue_wait_seconds", "histogram", []string{"policy", "decision"},
			"Time spent queued, by how the wait ended (admitted, timeout, canceled)."},
		{"admission_refusal_retry_after_seconds", "histogram", []string{"policy", "decision"},
			"Retry hints of refused requests (rejected, would_reject, timeout, fail_closed); each bucket's exemplar is a refused request's trace."},
		{"admission_release_retries_total", "counter", []string{"policy", "outcome"},
			"Concurrency releases the store failed, by outcome: retrying (queued to be tried again), landed (a retry reached the store), abandoned (the lease expired first)."},
		{"admission_reloads_total", "counter", []string{"result"},
			"Configuration reloads: ok, partial (applied without a part of the file) or rejected."},
		{"admission_rollbacks_total", "counter", []string{"policy", "mode"},
			"Admissions given back because another policy refused the request."},
		{"admission_store_duration_seconds", "histogram", []string{"store", "op", "outcome"},
			"Latency of calls to a shared store (Redis), by operation (acquire, batch, settle) and outcome (ok, error)."},
		{"admission_store_errors_total", "counter", []string{"policy", "store", "action"},
			"Failed store calls and the action taken (open, closed, local)."},
		{"admission_tenant_cost_total", "counter", []string{"policy", "decision", "unit", "tenant"},
			"Cost per tenant (admitted: actual cost at settlement): top K by refused cost, the rest as `__other__`."},
		{"admission_tenant_decisions_total", "counter", []string{"policy", "decision", "tenant"},
			"Decisions per tenant: admitted (counted when settled), rejected, would_reject; top K, the rest as `__other__`."},
		{"admission_tenant_utilization_ratio", "gauge", []string{"policy", "tenant"},
			"Highest share of its limit a top-K tenant's partition reached in the current or the previous minute (windows aligned on the clock; a scrape resets nothing), when 0.8 or more; 0 otherwise."},
	}
}

// MarkdownTable renders the catalog as the metrics table of docs/metrics.md.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, m := range Catalog() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, "`"+strings.Join(m.Labels, "`, `")+"`", m.Help)
	}
	return b.String()
}

// SeriesBound is the most series the Observer can export (target_info
// included) for the given number of policies, top K, model families seen
// in token settlements (at most 32) and stores per policy. Per policy:
// 2 × 144 decision and cost cells (2 modes × 8 outcomes × 9 reasons; in
// practice about 20 are ever used), 7K+6 tenant series (K+1 tenant values
// × 3 decisions × 2 counters, plus K utilisation gauges), 6 gauges, 7
// counters, 3 × stores store-error counters and the histograms' buckets;
// plus, per store, the latency histograms of 3 operations × 2 outcomes.
// With 10 policies, K = 20, 3 families and 1 store that is 6,500, and no
// number of tenants changes it.
func SeriesBound(policies, topK, families, stores int) int {
	hist := func(buckets []float64) int { return len(buckets) + 3 }      // +Inf, _sum, _count
	perPolicy := 2*numModes*admission.NumOutcomes*admission.NumReasons + // decisions and cost cells
		3*(topK+1)*2 + topK + // tenant decisions, tenant cost, utilisation
		6 + // partitions, partitions limit, near limit, queue depth, inflight, limit
		numModes + 2 + 3 + // rollbacks, lease expirations, evictions, release retries (3 outcomes)
		3*stores +
		4*hist(QueueWaitBuckets) + 4*hist(RetryAfterBuckets) + hist(LeaseBuckets) + min(families, maxFamilies)*hist(AccuracyBuckets)
	// Store call latency: per store, 3 operations × 2 outcomes.
	return policies*perPolicy + stores*6*hist(StoreCallBuckets) + 3 + 1 // reloads (ok, partial, rejected), target_info
}
