// Command llmproxy is an OpenAI-compatible gateway that puts Sluice's
// admission control in front of an LLM API (OpenAI, Azure OpenAI, vLLM,
// Ollama, any compatible server) for many tenants.
//
// # Quick start
//
//	go run ./examples/llmproxy
//
// starts on 127.0.0.1:8080 with an embedded policy file (default.yaml: two
// plans, three demo tenants, their keys printed at start-up) and a built-in
// simulated upstream, so nothing else is needed:
//
//	curl localhost:8080/v1/chat/completions \
//	  -H 'Authorization: Bearer sk-demo-globex' -H 'Content-Type: application/json' \
//	  -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}'
//
// The demo tenant initech may send five requests a minute: the sixth gets a
// 429 with Retry-After, retry-after-ms and the limit headers. /healthz and
// /readyz answer probes on the API listener. The operator listener
// (--metrics-addr, else the file's metrics.listen, else 127.0.0.1:9464)
// serves the Prometheus metrics at metrics.path (/metrics) and
// /debug/rollout, which says, per policy, what it rejected over the last
// 15 minutes, or for a shadow policy what it would reject if enforced now,
// and from which tenants (?format=json for the report as JSON). Both tell
// about every tenant, so they are never served on the API listener. None
// of these endpoints is ever limited.
//
// For real use, write a policy file (start from default.yaml; check it with
// `admitctl check FILE`), point the proxy at the upstream and give it the
// upstream key in the environment:
//
//	LLMPROXY_UPSTREAM_API_KEY=sk-... go run ./examples/llmproxy \
//	  --config policy.yaml --upstream https://api.openai.com/v1 --addr :8080
//
// The file is reloaded when it changes and on SIGHUP; a file that does not
// validate is refused and the old one keeps serving. Clients use keys the
// proxy issues (the file stores their SHA-256 hashes); the upstream key
// never reaches a client and a client's key never reaches the upstream.
// Policies marked store: redis keep their state on the Redis server given
// with --redis host:port, so that several replicas enforce one limit.
//
// # The path of a request
//
// For POST /v1/chat/completions, /v1/completions, /v1/embeddings and
// /v1/responses:
//
//  1. Identity: the Bearer key is looked up in the hashed key table (401
//     in the OpenAI error shape when missing or unknown; 429 for an
//     address that failed too often, see identity.failed_auth), before
//     any of the body is read. A request refused before its body was read
//     has its connection closed rather than drained; a body must arrive
//     within --body-read-timeout.
//  2. The policies that need nothing from the body (request rates,
//     request concurrency without a queue) are decided before the body is
//     read (admission.Controller.Begin): a throttled tenant's body is never
//     read or parsed.
//  3. The body is capped (http.max_body of the file; 413), read within the
//     parse budget shared by all requests (--parse-budget; 503 server_busy
//     after --parse-budget-wait), parsed strictly in one pass (400
//     invalid_json or invalid_type, naming the field; a repeated key or a
//     pricing field in another case is refused), then priced: prompt
//     tokens counted with the model's tokenizer plus the output reservation
//     (max_tokens, or the model's default, capped by --max-output-reserve),
//     saturating at limits.MaxAmount, and micro-dollars from the policy
//     file's prices (400 model_not_priced for a model without a price while
//     a cost policy is installed). The other policies follow
//     (Ticket.Continue): token rates, quotas, per-tenant concurrency with a
//     bounded queue, a shared upstream cap whose queue is served round
//     robin across tenants. Operations are named "METHOD route", as policy
//     files match them ("POST /v1/chat/completions").
//  4. Proxying to the path of the matched route (never the client's path
//     or query), with the headers an OpenAI-compatible API needs and never
//     one that can carry a client credential, over a transport tuned for
//     many concurrent calls to one host
//     and a timeout (--upstream-timeout; for a stream, until its first
//     byte, then --stream-idle-timeout between chunks). Streams pass through
//     chunk by chunk with a flush each; a stream that did not ask for
//     stream_options.include_usage gets it added upstream and the extra
//     usage chunk removed from what the client sees.
//  5. Settlement with the usage the upstream reported, checked against the
//     request (a missing, malformed or implausible figure is charged as
//     reserved, and counted), or, for a stream that ended without a report,
//     the prompt estimate plus the streamed output counted with the
//     tokenizer: the difference from the reservation is refunded or
//     charged. A running stream is charged every
//     --charge-interval for what it has produced, so parallel streams cannot
//     overshoot a tokens-per-minute limit by more than about one interval's
//     output each; with --cut-streams=all (the default) a stream whose
//     tenant runs out is ended with a final error event. Every chunk that
//     reaches the client renews the request's concurrency leases, so a
//     stream longer than max_hold keeps its permits.
//  6. A client that goes away cancels the upstream call; the ticket is
//     settled with what was produced. Upstream failures are answered in the
//     OpenAI error shape: 504 upstream_timeout, 502 upstream_unavailable or
//     bad_upstream_response, the upstream's own 4xx/5xx passed through.
//     Nothing generated means only the prompt is charged.
//  7. The provider's own 429s are passed through with their retry hints and
//     counted apart (llmproxy_upstream_throttled_total): they are the
//     provider throttling the proxy, not the proxy throttling a tenant.
//
// GET /v1/models and GET /v1/models/{id} are passed through, limited by the
// policies that match them; a model id must be 1 to 256 ASCII letters,
// digits and - _ . : @ once decoded, neither "." nor "..", else 404. Every
// other path is a 404 from the gateway. Every write to a client must
// complete within --client-write-timeout: a client that stops reading,
// during a stream too, is cut and its permits released. See the README's
// security model for every bound.
//
// # Rejections
//
// A rejection is an OpenAI-shaped error whose code names the reason:
// rate_limit_exceeded, tokens_limit_exceeded, quota_exceeded,
// concurrency_limit_exceeded, queue_timeout. It is a 429, except an
// exhausted quota (http.quota_status of the file: 429 like OpenAI's
// insufficient_quota, or 403) and an overloaded shared upstream cap (503).
// Retry-After (whole seconds, rounded up) and retry-after-ms say when to
// retry; x-should-retry: false says that waiting cannot help before a
// client would give up (the request is larger than the limit, or a quota
// is exhausted until its period ends), so the official SDKs neither hammer
// the proxy nor give up on a wait they could make.
//
// Every response carries x-ratelimit-{limit,remaining,reset}-{requests,
// tokens} for the tightest policy of each unit (reset as a Go duration,
// "6m0s"), and the IETF RateLimit-Policy and RateLimit fields with
// X-RateLimit-Limit/Remaining/Reset for every policy the request passed.
//
// # Shutdown
//
// On SIGINT or SIGTERM the proxy stops accepting, /readyz answers 503, and
// in-flight requests and streams run to completion for up to
// --shutdown-timeout.
//
// # Metrics
//
// The operator listener's metrics.path serves the admission metrics of
// package metrics (decisions by
// policy, mode, decision and reason; in-flight work; queue depth and wait;
// estimate accuracy; top tenants) and the proxy's own:
// llmproxy_upstream_responses_total by status class,
// llmproxy_upstream_throttled_total, llmproxy_upstream_failures_total by
// reason, llmproxy_rejections_total by code, llmproxy_client_errors_total,
// llmproxy_client_cancels_total, llmproxy_streams_active,
// llmproxy_streams_cut_total, llmproxy_stream_charges_total,
// llmproxy_auth_failures_total and llmproxy_auth_throttled_total. Shadow
// decisions (what a shadow policy would reject) are logged through package
// shadow, rate-limited.
//
// # Performance
//
// The benchmarks next to this file compare the proxy with
// httputil.ReverseProxy alone and with a tiktoken-go count of the prompt:
//
//	go test -run '^$' -bench . -benchmem ./examples/llmproxy
//
// and ./loadtest measures the latency it adds under an open-loop load of
// 2,000 requests a second:
//
//	go run ./examples/llmproxy/loadtest
package main
