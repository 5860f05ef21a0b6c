package dashboards

// LLM is the dashboard of services that price requests in tokens and
// money (the llmproxy gateway, or a service estimating tokens itself):
// tokens admitted, spend, estimate accuracy and tenants near their
// budget. A service whose policies count requests only leaves it empty,
// and needs only the generic dashboards.
func LLM() *Dashboard {
	b := newDashboard("sluice-llm", "Sluice / LLM",
		"Tokens and spend admitted, how well token estimates match actual usage, and tenants near their budget, for services whose policies count tokens or cost.",
		`admission_limit{unit=~"tokens|cost"}`,
		labelVar("policy", "Policy", "Policies counting tokens or cost.", `admission_limit{`+svc+`,unit=~"tokens|cost"}`, "policy", true))
	b.add(12, 8, timeseries("Tokens admitted",
		"Estimated tokens admitted per second by policies counting tokens (rolled-back admissions excluded).",
		"suffix: tokens/s",
		series(`sum by (job, policy) (rate(admission_cost_total{`+pol+`,unit="tokens",decision="admitted"}[$__rate_interval]))`, "{{job}} {{policy}}")))
	b.add(12, 8, timeseries("Spend admitted",
		"Estimated spend admitted per second, in dollars, by policies counting cost (micro-dollars, from the model prices; rolled-back admissions excluded).",
		"currencyUSD",
		series(`sum by (job, policy) (rate(admission_cost_total{`+pol+`,unit="cost",decision="admitted"}[$__rate_interval])) / 1e6`, "{{job}} {{policy}}")))
	b.add(24, 8, timeseries("Estimate accuracy (actual ÷ estimated tokens)",
		"Mean of actual tokens divided by the tokens estimated at admission, per policy and model family. Above 1 the estimator under-reserves (limits overshoot), below 1 it over-reserves (requests are refused too early).",
		"none",
		series(`sum by (job, policy, model_family) (rate(admission_estimate_accuracy_sum{`+pol+`}[$__rate_interval]))
/ sum by (job, policy, model_family) (rate(admission_estimate_accuracy_count{`+pol+`}[$__rate_interval]))`, "{{job}} {{policy}} {{model_family}}")))
	// The quotas that declare warning thresholds (package admission/budget)
	// report, per policy, the top K tenants past a threshold this period.
	b.add(24, 9, table("Tenants near their budget",
		"Share of its quota each tenant past one of the quota's warning thresholds has used this period (the last figure seen; top K per policy, closest first). Only quotas with warn (or soft) report; the period's end clears the list. A soft quota can go past 100% through settlements above their estimate.",
		"percentunit",
		instant(`topk(20, max by (job, policy, tenant) (admission_budget_used_ratio{`+pol+`}))`, "")))
	return b.d
}
