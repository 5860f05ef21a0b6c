package dashboards

// Provider is the dashboard of the external provider's limits, which the
// llmproxy gateway guards with upstream stores: the budget it learned
// per store and group, how long groups stay paused after a provider
// 429, what became of the provider's 429s, queue wait by priority
// class, and the adaptive concurrency cap with the time to first byte it
// follows.
func Provider() *Dashboard {
	b := newDashboard("sluice-provider", "Sluice / Provider",
		"The external provider's limits as the llmproxy gateway learned them from its headers, and how the gateway keeps inside them (upstream stores).",
		"llmproxy_provider_budget_limit")
	b.add(12, 8, timeseries("Provider budget remaining vs limit",
		"The provider's remaining budget per upstream store, group (model, or the whole upstream) and dimension (requests, tokens), as its headers report it less what was admitted since, against the limit it reports. Near zero, requests wait in the upstream policy's queue.",
		"short",
		series(`min by (job, store, group, dimension) (llmproxy_provider_budget_remaining{`+svc+`})`, "{{job}} {{store}} {{group}} {{dimension}} remaining"),
		series(`max by (job, store, group, dimension) (llmproxy_provider_budget_limit{`+svc+`})`, "{{job}} {{store}} {{group}} {{dimension}} limit")))
	b.add(12, 8, timeseries("Provider paused",
		"How long each group stays paused after a provider refusal (its retry-after or reset): while above zero the gateway sends the group nothing and queued requests wait.",
		"s",
		series(`max by (job, store, group) (llmproxy_provider_paused_seconds{`+svc+`})`, "{{job}} {{store}} {{group}}")))
	b.add(6, 8, timeseries("Provider 429s: absorbed vs passed through",
		"The provider's 429s per second by outcome: absorbed (the request waited for the pause and was retried; the client never saw it), refused (not admitted again within the caller's deadline: the client got the gateway's answer), passed_through (the client got the provider's 429).",
		"reqps",
		series(`sum by (job, outcome) (rate(llmproxy_provider_throttled_total{`+svc+`}[$__rate_interval]))`, "{{job}} {{outcome}}")))
	b.add(6, 8, timeseries("Queue wait by class p50 / p99",
		"Time the admitted token-priced requests spent in admission queues, by priority class (the policy file's classes; none without them): the interactive class's p99 should stay low while batch saturates.",
		"s",
		series(`histogram_quantile(0.5, sum by (job, class, le) (rate(llmproxy_queue_wait_seconds_bucket{`+svc+`}[$__rate_interval])))`, "{{job}} {{class}} p50"),
		series(`histogram_quantile(0.99, sum by (job, class, le) (rate(llmproxy_queue_wait_seconds_bucket{`+svc+`}[$__rate_interval])))`, "{{job}} {{class}} p99")))
	b.add(6, 8, timeseries("Adaptive concurrency cap",
		"The adaptive cap of the concurrency policies on upstream stores with adaptive_concurrency, per group: it falls while the provider answers slower than usual, and grows back to the policy's limit.",
		"short",
		series(`max by (job, store, group) (llmproxy_provider_concurrency_limit{`+svc+`})`, "{{job}} {{store}} {{group}}")))
	b.add(6, 8, timeseries("Provider time to first byte",
		"The provider's time to first byte the adaptive cap follows, per group: short (the last answers) and baseline (the long-term average). The cap falls when short rises above baseline times the store's tolerance.",
		"s",
		series(`max by (job, store, group, average) (llmproxy_provider_ttfb_seconds{`+svc+`})`, "{{job}} {{store}} {{group}} {{average}}")))
	return b.d
}
