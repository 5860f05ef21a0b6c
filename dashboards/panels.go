package dashboards

import "strconv"

// Selectors shared by the queries.
const (
	refused  = `decision=~"rejected|timeout|fail_closed"`
	terminal = `decision!="queued"`
	// pol selects the chosen services' series of the chosen policies.
	pol = svc + `,policy=~"$policy"`
)

// policyVar is the policy variable over the chosen services' policies.
func policyVar() Variable {
	return labelVar("policy", "Policy", "Policies to show.", `admission_decisions_total{`+svc+`}`, "policy", true)
}

// Overview is the on-call dashboard of any service using the library: who
// is being rejected now, and is the admission layer itself healthy.
func Overview() *Dashboard {
	b := newDashboard("sluice-overview", "Sluice / Overview",
		"Admission decisions, rejections and who gets them, queues, in-flight work, partitions, leases and store health, for any service using Sluice. Token, spend and budget panels are on Sluice / LLM, the external provider's on Sluice / Provider.",
		"admission_decisions_total", traces, policyVar())
	b.add(12, 8, timeseries("Decisions by outcome",
		"Decisions per second by outcome, over the selected policies. A request is counted once per policy it meets; queued is counted when a request starts waiting and again when it leaves the queue.",
		"reqps",
		series(`sum by (job, decision) (rate(admission_decisions_total{`+pol+`}[$__rate_interval]))`, "{{job}} {{decision}}")))
	b.add(12, 8, ratio(timeseries("Rejection ratio per policy",
		"Share of each enforcing policy's decided requests it refused (rejected, timed out in its queue, or refused because its store failed). Queue entries are not decisions and are left out.",
		"percentunit",
		series(`sum by (job, policy) (rate(admission_decisions_total{`+pol+`,mode="enforce",`+refused+`}[$__rate_interval]))
/ sum by (job, policy) (rate(admission_decisions_total{`+pol+`,mode="enforce",`+terminal+`}[$__rate_interval]))`, "{{job}} {{policy}}"))))
	b.add(24, 9, table("Top 10 rejected tenants",
		"Tenants with the most rejected requests over the dashboard's time range, by service and policy. Tenants come from the per-policy heavy-hitter sketch (top K by refused cost); everyone else is counted as __other__, which is left out here.",
		"short",
		instant(`topk(10, sum by (job, policy, tenant) (increase(admission_tenant_decisions_total{`+pol+`,decision="rejected",tenant!="__other__"}[$__range])))`, "")))
	b.add(8, 8, timeseries("In flight vs cap",
		"Cost held by concurrency permits now, against each concurrency policy's own cap (per partition; plans may give tenants another).",
		"short",
		series(`sum by (job, policy) (admission_inflight{`+pol+`})`, "{{job}} {{policy}} in flight"),
		series(`max by (job, policy) (admission_limit{`+pol+`,algorithm="concurrency"})`, "{{job}} {{policy}} cap")))
	b.add(8, 8, timeseries("Queue depth",
		"Requests waiting in each policy's queue now.",
		"short",
		series(`sum by (job, policy) (admission_queue_depth{`+pol+`})`, "{{job}} {{policy}}")))
	b.add(8, 8, traceLinks(timeseries("Queue wait p50 / p99",
		"Time requests spent in a queue before being admitted, timing out or giving up: median and 99th percentile per policy. The dots are exemplars: a request that fell in a bucket, linked to its trace in the traces datasource.",
		"s",
		exemplars(series(`histogram_quantile(0.5, sum by (job, policy, le) (rate(admission_queue_wait_seconds_bucket{`+pol+`}[$__rate_interval])))`, "{{job}} {{policy}} p50")),
		series(`histogram_quantile(0.99, sum by (job, policy, le) (rate(admission_queue_wait_seconds_bucket{`+pol+`}[$__rate_interval])))`, "{{job}} {{policy}} p99"))))
	b.add(8, 8, ratio(timeseries("Partitions near their limit",
		"Share of each policy's partitions using 80% or more of the policy's limit: how many tenants are close to being throttled.",
		"percentunit",
		series(`sum by (job, policy) (admission_partitions_near_limit{`+pol+`}) / sum by (job, policy) (admission_partitions{`+pol+`})`, "{{job}} {{policy}}"))))
	b.add(8, 8, ratio(timeseries("Partition table use",
		"Partitions held against each policy's maximum, per replica (each holds its own table); at the maximum new tenants share an overflow partition or are rejected.",
		"percentunit",
		series(`max by (job, instance, policy) (admission_partitions{`+pol+`} / admission_partitions_limit{`+pol+`})`, "{{job}} {{instance}} {{policy}}"))))
	b.add(8, 8, timeseries("Concurrency permits held p50 / p99",
		"How long concurrency permits were held, from admission to release: the work's own duration. Rising, it is what fills the caps and the queues.",
		"s",
		series(`histogram_quantile(0.5, sum by (job, policy, le) (rate(admission_lease_duration_seconds_bucket{`+pol+`}[$__rate_interval])))`, "{{job}} {{policy}} p50"),
		series(`histogram_quantile(0.99, sum by (job, policy, le) (rate(admission_lease_duration_seconds_bucket{`+pol+`}[$__rate_interval])))`, "{{job}} {{policy}} p99")))
	b.add(8, 8, timeseries("Store errors",
		"Failed or timed-out store calls per second, by policy, store and what the policy did instead (open, closed, local).",
		"cps",
		series(`sum by (job, policy, store, action) (rate(admission_store_errors_total{`+pol+`}[$__rate_interval]))`, "{{job}} {{policy}} {{store}} {{action}}")))
	b.add(8, 8, timeseries("Fail-open and fail-closed decisions",
		"Decisions made without the store: fail_open admitted with no limit applied, fail_closed rejected everything. Either means the store is sick.",
		"reqps",
		series(`sum by (job, policy, decision) (rate(admission_decisions_total{`+pol+`,decision=~"fail_open|fail_closed"}[$__rate_interval]))`, "{{job}} {{policy}} {{decision}}")))
	b.add(8, 8, timeseries("Releases retried",
		"Concurrency releases the store failed, per second by outcome: retrying (queued to be tried again), landed (a retry reached the store), abandoned (the lease expired first: the permit stayed held until then, see AdmissionReleaseLost).",
		"cps",
		series(`sum by (job, policy, outcome) (rate(admission_release_retries_total{`+pol+`}[$__rate_interval]))`, "{{job}} {{policy}} {{outcome}}")))
	return b.d
}

// Rollout is the shadow-to-enforce dashboard: what a shadow policy would
// reject if enforced, and from whom.
func Rollout() *Dashboard {
	b := newDashboard("sluice-rollout", "Sluice / Rollout",
		"Shadow policies: what they would reject if enforced, from which tenants, next to the enforced policy they would replace. Enforce a policy once its would-reject ratio stays under the threshold.",
		"admission_decisions_total",
		labelVar("shadow_policy", "Shadow policy", "The shadow policies under evaluation.", `admission_limit{`+svc+`,mode="shadow"}`, "policy", true),
		labelVar("enforced_policy", "Enforced policy", "The enforced policy a shadow policy would replace.", `admission_limit{`+svc+`,mode="enforce"}`, "policy", true))
	shadowPol := svc + `,policy=~"$shadow_policy"`
	wouldReject := `sum by (job, policy) (rate(admission_decisions_total{` + shadowPol + `,mode="shadow",decision="would_reject"}[$__rate_interval]))
/ sum by (job, policy) (rate(admission_decisions_total{` + shadowPol + `,mode="shadow",` + terminal + `}[$__rate_interval]))`
	b.add(16, 9, ratio(thresholdLine(timeseries("Would-reject ratio",
		"Share of each shadow policy's requests it would have rejected, over time. The dashed line is the rollout threshold ("+strconv.FormatFloat(100*Threshold, 'f', -1, 64)+"%), the same as the AdmissionShadowWouldRejectAboveThreshold alert: stay under it before enforcing.",
		"percentunit",
		series(wouldReject, "{{job}} {{policy}} would reject")), Threshold)))
	b.add(8, 9, ratio(stat("Would-reject ratio over the range",
		"Share of each shadow policy's requests it would have rejected over the whole dashboard time range.",
		"percentunit",
		instant(`sum by (job, policy) (increase(admission_decisions_total{`+shadowPol+`,mode="shadow",decision="would_reject"}[$__range]))
/ sum by (job, policy) (increase(admission_decisions_total{`+shadowPol+`,mode="shadow",`+terminal+`}[$__range]))`, "{{job}} {{policy}}"))))
	b.add(12, 9, table("Top would-reject tenants",
		"Tenants whose requests the shadow policies would have rejected most over the dashboard's time range (heavy-hitter top K; others as __other__, left out here). These tenants would see 429s if the policy were enforced.",
		"short",
		instant(`topk(10, sum by (job, policy, tenant) (increase(admission_tenant_decisions_total{`+shadowPol+`,decision="would_reject",tenant!="__other__"}[$__range])))`, "")))
	b.add(12, 9, ratio(thresholdLine(timeseries("Shadow vs enforced",
		"The shadow policy's would-reject ratio next to the enforced policy's rejection ratio on the same traffic: the change enforcing the shadow policy would make.",
		"percentunit",
		series(wouldReject, "{{job}} {{policy}} (shadow) would reject"),
		series(`sum by (job, policy) (rate(admission_decisions_total{`+svc+`,policy=~"$enforced_policy",mode="enforce",`+refused+`}[$__rate_interval]))
/ sum by (job, policy) (rate(admission_decisions_total{`+svc+`,policy=~"$enforced_policy",mode="enforce",`+terminal+`}[$__rate_interval]))`, "{{job}} {{policy}} (enforced) rejects")), Threshold)))
	b.add(12, 8, timeseries("Would-reject by reason",
		"Would-reject decisions per second by policy and reason (rate, quota, concurrency, ...).",
		"reqps",
		series(`sum by (job, policy, reason) (rate(admission_decisions_total{`+shadowPol+`,decision="would_reject"}[$__rate_interval]))`, "{{job}} {{policy}} {{reason}}")))
	b.add(12, 8, timeseries("Would-reject cost",
		"Cost per second the shadow policies would have refused, in each policy's unit (requests, tokens, micro-dollars).",
		"short",
		series(`sum by (job, policy, unit) (rate(admission_cost_total{`+shadowPol+`,decision="would_reject"}[$__rate_interval]))`, "{{job}} {{policy}} {{unit}}")))
	return b.d
}

// Tenant follows one tenant across policies.
func Tenant() *Dashboard {
	b := newDashboard("sluice-tenant", "Sluice / Tenant",
		"One tenant across policies: admitted, rejected and would-reject, how close to its limits, and queue wait. Only the top K tenants per policy (by refused cost) are tracked by name.",
		"admission_decisions_total",
		labelVar("tenant", "Tenant", "A tenant tracked by name (the top K per policy).", `admission_tenant_decisions_total{`+svc+`,tenant!="__other__"}`, "tenant", false),
		policyVar())
	ten := pol + `,tenant="$tenant"`
	b.add(12, 8, timeseries("Admitted",
		"The tenant's admitted requests per second by policy, counted when the work settles.",
		"reqps",
		series(`sum by (job, policy) (rate(admission_tenant_decisions_total{`+ten+`,decision="admitted"}[$__rate_interval]))`, "{{job}} {{policy}}")))
	b.add(12, 8, timeseries("Rejected and would-reject",
		"The tenant's rejected (enforced) and would-reject (shadow) requests per second by policy.",
		"reqps",
		series(`sum by (job, policy, decision) (rate(admission_tenant_decisions_total{`+ten+`,decision=~"rejected|would_reject"}[$__rate_interval]))`, "{{job}} {{policy}} {{decision}}")))
	b.add(8, 8, ratio(timeseries("Near its limit",
		"Highest share of each policy's limit the tenant's partition reached between scrapes, when 80% or more (0 below): at 1 requests are refused.",
		"percentunit",
		series(`max by (job, policy) (admission_tenant_utilization_ratio{`+ten+`})`, "{{job}} {{policy}}"))))
	b.add(8, 8, ratio(timeseries("Rejection ratio",
		"Share of the tenant's decided requests each policy refused or would refuse.",
		"percentunit",
		series(`sum by (job, policy) (rate(admission_tenant_decisions_total{`+ten+`,decision=~"rejected|would_reject"}[$__rate_interval]))
/ sum by (job, policy) (rate(admission_tenant_decisions_total{`+ten+`}[$__rate_interval]))`, "{{job}} {{policy}}"))))
	b.add(8, 8, timeseries("Queue wait p99 (policy)",
		"99th percentile of the time in queue of the selected policies. Queue wait is not broken down by tenant (that label would be unbounded); this is what the tenant's requests wait on.",
		"s",
		series(`histogram_quantile(0.99, sum by (job, policy, le) (rate(admission_queue_wait_seconds_bucket{`+pol+`}[$__rate_interval])))`, "{{job}} {{policy}}")))
	b.add(24, 8, timeseries("Refused cost",
		"Cost per second of the tenant's refused and would-reject requests, in each policy's unit.",
		"short",
		series(`sum by (job, policy, decision, unit) (rate(admission_tenant_cost_total{`+ten+`,decision=~"rejected|would_reject"}[$__rate_interval]))`, "{{job}} {{policy}} {{decision}} ({{unit}})")))
	return b.d
}
