// Command llmproxy is an OpenAI-compatible gateway that puts Sluice's
// admission control in front of an LLM API (OpenAI, Azure OpenAI, vLLM,
// Ollama, any compatible server) for many tenants: package gateway behind
// flags, a policy file reloaded when it changes and on SIGHUP, an
// operator listener and, without --upstream, a simulated upstream.
//
//	go run ./examples/llmproxy
//
// starts on 127.0.0.1:8080 with an embedded policy file (default.yaml: two
// plans, three demo tenants, their keys printed at start-up, and limits on
// every route the gateway serves). README.md is
// the user's guide (quick start, flags, security model, benchmarks);
// package gateway documents the path of a request, the rejections and the
// metrics. The operator listener (--metrics-addr, else the file's
// metrics.listen, else 127.0.0.1:9464) serves the Prometheus metrics at
// metrics.path (/metrics) and /debug/rollout, which says, per policy, what
// it rejected over the last 15 minutes, or for a shadow policy what it
// would reject if enforced now, and from which tenants (?format=json for
// JSON); both tell about every tenant, so they are never served on the
// API listener. Policies marked store: redis keep their state on the
// Redis server given with --redis host:port, so that several replicas
// enforce one limit.
//
// # Shutdown
//
// On SIGINT or SIGTERM the proxy stops accepting, /readyz answers 503, and
// in-flight requests and streams run to completion for up to
// --shutdown-timeout. Those still running then are cut (their connections
// closed), and the proxy waits up to 5s more for them to give their
// permits back, so that a lease kept on Redis is released rather than
// held by the other replicas' count until its max hold.
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
