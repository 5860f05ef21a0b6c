package gateway

import "github.com/sluicehq/sluice/metrics"

// Catalog lists every metric family the gateway exports besides the
// admission metrics (metrics.Catalog), as Prometheus sees them through
// metrics.NewPrometheus, sorted by name. A test checks it against the
// instruments New creates; dashboards and alerts are linted against it.
func Catalog() []metrics.Metric {
	return []metrics.Metric{
		{Name: "gen_ai_client_token_usage", Type: "histogram", Labels: []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_response_model", "gen_ai_token_type"},
			Help: "Number of input and output tokens used."},
		{Name: "gen_ai_server_request_duration_seconds", Type: "histogram", Labels: []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_response_model", "error_type"},
			Help: "Generative AI server request duration such as time-to-last byte or last output token."},
		{Name: "gen_ai_server_time_per_output_token_seconds", Type: "histogram", Labels: []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_response_model"},
			Help: "Time per output token generated after the first token for successful responses."},
		{Name: "gen_ai_server_time_to_first_token_seconds", Type: "histogram", Labels: []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_response_model"},
			Help: "Time to generate first token for successful responses."},
		{Name: "llmproxy_auth_failures_total", Type: "counter", Labels: []string{"reason"},
			Help: "Requests with a missing or unknown API key, by reason (missing_api_key, invalid_api_key)."},
		{Name: "llmproxy_auth_throttled_total", Type: "counter",
			Help: "Requests refused before their key was looked at: their address failed authentication too often."},
		{Name: "llmproxy_batches_ended_total", Type: "counter", Labels: []string{"outcome"},
			Help: "Batch reservations ended, by outcome (completed, failed, expired, cancelled, held_too_long, unwatchable)."},
		{Name: "llmproxy_batches_open", Type: "gauge",
			Help: "Batches whose reservation is open, watched until they end."},
		{Name: "llmproxy_client_cancels_total", Type: "counter", Labels: []string{"reason"},
			Help: "Requests the client abandoned, by phase (before_response, during_stream)."},
		{Name: "llmproxy_client_errors_total", Type: "counter", Labels: []string{"reason"},
			Help: "Requests refused before admission (bad key, bad body), by code."},
		{Name: "llmproxy_prices_fallbacks_total", Type: "counter", Labels: []string{"reason"},
			Help: "Requests for a model without a price of its own, charged the fallback price."},
		{Name: "llmproxy_provider_budget_limit", Type: "gauge", Labels: []string{"store", "group", "dimension"},
			Help: "The provider's limit as its headers report it."},
		{Name: "llmproxy_provider_budget_remaining", Type: "gauge", Labels: []string{"store", "group", "dimension"},
			Help: "The provider's remaining budget as learned from its headers, less what was admitted since."},
		{Name: "llmproxy_provider_concurrency_limit", Type: "gauge", Labels: []string{"store", "group"},
			Help: "The adaptive cap of the concurrency policies on an upstream store with adaptive_concurrency."},
		{Name: "llmproxy_provider_paused_seconds", Type: "gauge", Labels: []string{"store", "group"},
			Help: "How long the group stays paused after a provider refusal."},
		{Name: "llmproxy_provider_throttled_total", Type: "counter", Labels: []string{"outcome"},
			Help: "The provider's 429s by outcome: absorbed (admitted again and retried), refused, passed_through."},
		{Name: "llmproxy_provider_ttfb_seconds", Type: "gauge", Labels: []string{"store", "group", "average"},
			Help: "The provider's time to first byte the adaptive cap follows (average: short, baseline)."},
		{Name: "llmproxy_queue_wait_seconds", Type: "histogram", Labels: []string{"class"},
			Help: "Time the admitted token-priced requests spent in admission queues, by priority class."},
		{Name: "llmproxy_rejections_total", Type: "counter", Labels: []string{"code"},
			Help: "Requests the gateway rejected, by OpenAI error code."},
		{Name: "llmproxy_stream_charges_total", Type: "counter", Labels: []string{"reason"},
			Help: "Intermediate charges of running streams."},
		{Name: "llmproxy_streams_active", Type: "gauge",
			Help: "Streams being passed through now."},
		{Name: "llmproxy_streams_cut_total", Type: "counter", Labels: []string{"reason"},
			Help: "Streams cut off because the tenant's limit ran out, by code."},
		{Name: "llmproxy_upstream_failures_total", Type: "counter", Labels: []string{"reason"},
			Help: "Upstream calls that failed without a usable response, by reason."},
		{Name: "llmproxy_upstream_responses_total", Type: "counter", Labels: []string{"status_class"},
			Help: "Responses received from the upstream API, by status class."},
		{Name: "llmproxy_upstream_throttled_total", Type: "counter",
			Help: "429 responses from the upstream API (the provider throttling the gateway)."},
		{Name: "llmproxy_usage_fallbacks_total", Type: "counter", Labels: []string{"reason"},
			Help: "Settlements that charged the reservation because the usage report was unusable, by reason."},
	}
}
