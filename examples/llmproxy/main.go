package main

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/oteltrace"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/requestlog"
	"github.com/sluicehq/sluice/weights"
)

// defaultPolicy is the policy file used when --config is not given.
//
//go:embed default.yaml
var defaultPolicy []byte

// demoKeys are the API keys of the demo tenants of default.yaml, printed at
// start-up in this (sorted) order. The file stores only their hashes.
var demoKeys = []string{"sk-demo-acme", "sk-demo-globex", "sk-demo-initech"}

// UpstreamKeyEnv is the environment variable holding the upstream API key.
const UpstreamKeyEnv = "LLMPROXY_UPSTREAM_API_KEY"

// AnthropicKeyEnv is the environment variable holding the Anthropic API
// key, sent upstream in x-api-key on the Messages API routes.
const AnthropicKeyEnv = "LLMPROXY_ANTHROPIC_API_KEY"

// GeminiKeyEnv is the environment variable holding the Gemini API key,
// sent upstream in x-goog-api-key on the Gemini API routes.
const GeminiKeyEnv = "LLMPROXY_GEMINI_API_KEY"

// AzureKeyEnv is the default of --azure-api-key-env: the environment
// variable holding the Azure OpenAI resource's key, sent upstream in
// api-key on the Azure OpenAI routes.
const AzureKeyEnv = "LLMPROXY_AZURE_API_KEY"

// MaxHeaderBytes bounds the request headers a client may send on the API
// listener (431 past it): an OpenAI-style request needs a few hundred
// bytes, net/http's default allows a megabyte per connection.
const MaxHeaderBytes = 64 << 10

// DefaultMetricsAddr is the operator listener's address when neither
// --metrics-addr nor the policy file's metrics.listen names one: loopback
// only, the OpenTelemetry Prometheus exporter's usual port.
const DefaultMetricsAddr = "127.0.0.1:9464"

// CutGrace bounds how long a shutdown, once --shutdown-timeout has passed
// and the requests still in flight are cut, waits for them to give their
// permits back (a concurrency lease on Redis released, not left to expire
// after its max hold) before the stores are closed.
const CutGrace = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "llmproxy:", err)
		}
		os.Exit(1)
	}
}

// options are the command-line settings, and a few test hooks. The
// gateway's own settings go straight to gw; start adds the controller,
// the estimator, the policy file and the rest.
type options struct {
	gw              gateway.Config
	addr            string
	configPath      string
	simLatency      time.Duration
	simRate         float64
	simTokens       int
	simLimits       upstream.Limits
	shutdownTimeout time.Duration
	cut             string
	logLevel        string
	tokenizer       string
	redis           string
	requestLog      string
	metricsAddr     string
	otlp            otlpSettings
	traces          string // --otlp-traces
	azureKeyEnv     string // --azure-api-key-env
	forwardHeaders  string

	// Test hooks (the clock also goes to the gateway and the simulator).
	clock     admission.Clock
	logOutput io.Writer
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("llmproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&o.configPath, "config", "", "policy file (reloaded on change and on SIGHUP); empty uses the embedded default with its demo tenants")
	fs.StringVar(&o.gw.Upstream, "upstream", "", "base URL of the OpenAI-compatible upstream API with its version prefix, e.g. https://api.openai.com/v1; empty starts the built-in simulator. The key is read from $"+UpstreamKeyEnv)
	fs.StringVar(&o.gw.UpstreamKeyHeader, "upstream-key-header", "Authorization", "header carrying the upstream key: Authorization (as a Bearer token) or another header holding the key itself, e.g. api-key for Azure OpenAI")
	fs.StringVar(&o.gw.Gemini.Upstream, "gemini-upstream", "", "base URL of the Gemini API with its version prefix, e.g. https://generativelanguage.googleapis.com/v1beta, serving /v1beta/models/{model}:generateContent, :streamGenerateContent and :countTokens; empty serves them only with the built-in simulator. The key is read from $"+GeminiKeyEnv)
	fs.StringVar(&o.gw.Bedrock.Upstream, "bedrock-upstream", "", "base URL of the Amazon Bedrock runtime API, e.g. https://bedrock-runtime.us-east-1.amazonaws.com, serving /model/{modelId}/converse and /converse-stream; empty serves them only with the built-in simulator. Upstream requests are signed (SigV4) with the credentials of $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY and $AWS_SESSION_TOKEN")
	fs.StringVar(&o.gw.Bedrock.Region, "bedrock-region", "", "region the Bedrock upstream requests are signed for; empty uses $AWS_REGION, else "+gateway.DefaultBedrockRegion)
	fs.StringVar(&o.gw.Anthropic.Upstream, "anthropic-upstream", "", "base URL of the Anthropic API with its version prefix, e.g. https://api.anthropic.com/v1, serving /v1/messages and /v1/messages/count_tokens; empty serves them only with the built-in simulator. The key is read from $"+AnthropicKeyEnv)
	fs.StringVar(&o.gw.Azure.Upstream, "azure-upstream", "", "base URL of the Azure OpenAI resource, without /openai, e.g. https://myres.openai.azure.com, serving /openai/deployments/{deployment}/{chat/completions,completions,embeddings,responses}?api-version=..., /openai/v1/... and /openai/responses for the deployments of the policy file's deployments section; empty serves them only with the built-in simulator. The key is read from the variable --azure-api-key-env names")
	fs.StringVar(&o.azureKeyEnv, "azure-api-key-env", AzureKeyEnv, "environment variable holding the Azure OpenAI resource's key, sent upstream in api-key")
	fs.StringVar(&o.gw.MCP.Upstream, "mcp-upstream", "", "URL of the unnamed upstream MCP server's streamable HTTP endpoint, proxied at /mcp, e.g. http://tools.internal:8080/mcp; empty serves /mcp only with the built-in simulator (a search tool and a write_file tool). The policy file's mcp_servers are served at /mcp/{name} besides")
	fs.DurationVar(&o.simLatency, "sim-latency", 150*time.Millisecond, "simulated upstream: time to the first byte")
	fs.Float64Var(&o.simRate, "sim-tokens-per-second", 100, "simulated upstream: output tokens per second (0: instant)")
	fs.IntVar(&o.simTokens, "sim-output-tokens", 48, "simulated upstream: output tokens of a completion without a smaller max_tokens")
	fs.Int64Var(&o.simLimits.Requests, "sim-rpm", 10_000, "simulated upstream: requests per --sim-window per model it accepts before answering 429 (0: unlimited)")
	fs.Int64Var(&o.simLimits.Tokens, "sim-tpm", 2_000_000, "simulated upstream: tokens (prompt and output) per --sim-window per model it accepts before answering 429 (0: unlimited)")
	fs.DurationVar(&o.simLimits.Window, "sim-window", upstream.DefaultWindow, "simulated upstream: the rolling window of --sim-rpm and --sim-tpm")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a shutdown waits for in-flight requests and streams; then they are cut, and their permits given back")
	fs.DurationVar(&o.gw.Timeout, "upstream-timeout", gateway.DefaultTimeout, "limit on a non-streaming upstream call")
	fs.DurationVar(&o.gw.StreamIdleTimeout, "stream-idle-timeout", gateway.DefaultStreamIdle, "limit on the silence between two chunks of a stream")
	fs.DurationVar(&o.gw.ChargeInterval, "charge-interval", gateway.DefaultChargeInterval, "how often a running stream is charged for its output")
	fs.StringVar(&o.cut, "cut-streams", "all", "cut a stream when its tenant runs out: all (rate or quota), quota, never")
	fs.Int64Var(&o.gw.ParseBudget, "parse-budget", gateway.DefaultParseBudget, "request-body bytes read and priced at once, over all requests; a body that finds no room waits --parse-budget-wait, then gets 503")
	fs.DurationVar(&o.gw.ParseBudgetWait, "parse-budget-wait", gateway.DefaultParseBudgetWait, "how long a request body waits for room in the parse budget")
	fs.Int64Var(&o.gw.MaxOutputReserve, "max-output-reserve", 0, "cap on the output tokens reserved at admission (0: the request's full max_tokens); the rest is charged as it streams")
	fs.Int64Var(&o.gw.DefaultMaxTokens, "default-max-tokens", 0, "output tokens reserved for a request without max_tokens, for models the policy file's models section does not name (0: 4096); set it to what the provider's limiter charges such a request")
	fs.DurationVar(&o.gw.GiveUpAfter, "max-retry-wait", gateway.DefaultGiveUpAfter, "longest retry-after a client is expected to wait; a rejection advising longer carries x-should-retry: false")
	fs.StringVar(&o.logLevel, "log-level", "", "debug, info, warn or error; empty uses the policy file's logging.level")
	fs.StringVar(&o.tokenizer, "tokenizer", "bpe", "token counter: bpe (exact, allocation-free, package weights/bpe) or tiktoken (github.com/pkoukk/tiktoken-go)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "operator listener serving metrics and /debug/rollout (never the API listener); empty uses the policy file's metrics.listen, else "+DefaultMetricsAddr)
	fs.StringVar(&o.otlp.endpoint, "otlp-endpoint", "", "also push the metrics over OTLP/HTTP to this receiver, e.g. http://127.0.0.1:4318 (/v1/metrics when the URL has no path); overrides $"+otlpMetricsEndpointEnv+" and $"+otlpEndpointEnv+", either of which turns the push on without the flag; the other OTEL_EXPORTER_OTLP_* variables apply")
	fs.StringVar(&o.traces, "otlp-traces", "", "export traces (a server span per request with its admission decisions, a client span per upstream call) over OTLP/HTTP to this receiver, e.g. http://127.0.0.1:4318 (/v1/traces when the URL has no path); overrides $"+oteltrace.TracesEndpointEnv+" and $"+oteltrace.EndpointEnv+", either of which turns the export on without the flag; OTEL_TRACES_SAMPLER and the other OTEL_* variables apply")
	fs.DurationVar(&o.otlp.interval, "otlp-interval", 0, "how often the metrics are pushed over OTLP (and once more at shutdown); 0 uses $OTEL_METRIC_EXPORT_INTERVAL, else 1m")
	fs.DurationVar(&o.gw.ClientWriteTimeout, "client-write-timeout", gateway.DefaultClientWriteTimeout, "limit on each write to a client: a client that stops reading is cut and its permits released")
	fs.DurationVar(&o.gw.BodyReadTimeout, "body-read-timeout", 0, "limit on the time a client takes to send its request body; 0 uses the policy file's http.body_timeout (default 1m)")
	fs.StringVar(&o.forwardHeaders, "forward-headers", "", "comma-separated client headers forwarded upstream besides the built-in set (a trailing * matches a prefix); credential headers are never forwarded")
	fs.StringVar(&o.requestLog, "request-log", "", "write every decided request to this file in the request-log format admitctl replay reads (JSON Lines, rotated at 64 MiB, 5 files kept); never keys, prompts or completions")
	fs.Int64Var(&o.gw.Batches.MaxFileBytes, "batch-max-file-bytes", gateway.DefaultMaxFileBytes, "largest batch input file uploaded through POST /v1/files (counted line by line as it streams upstream)")
	fs.DurationVar(&o.gw.Batches.MaxHold, "batch-max-hold", gateway.DefaultMaxHold, "longest a batch's reservation stays open; then it is settled at its estimate")
	fs.StringVar(&o.redis, "redis", "", "Redis server (host:port or a redis:// URL) holding the state of the policies whose store is not memory (store: redis in the policy file), so that every replica enforces one limit")
	fs.IntVar(&o.gw.Responses.MaxRecords, "responses-max-records", gateway.DefaultMaxResponseRecords, "Responses API: responses whose size and owner are recorded, over all tenants, the oldest forgotten first (in memory; on Redis per tenant only)")
	fs.IntVar(&o.gw.Responses.MaxRecordsPerTenant, "responses-max-records-per-tenant", gateway.DefaultMaxResponseRecordsPerTenant, "Responses API: responses recorded per tenant; a call chained on a forgotten one is refused unless --responses-allow-unknown-chains")
	fs.BoolVar(&o.gw.Responses.AllowUnknownChains, "responses-allow-unknown-chains", false, "Responses API: admit a call chained on a response its tenant has no record of, naming a conversation or referring to a stored item (item_reference, a reasoning item by id) or to the audio of an earlier chat completion, priced at --responses-unknown-chain-tokens; only where tenants may continue each other's responses (they share the upstream account)")
	fs.Int64Var(&o.gw.Responses.UnknownChainTokens, "responses-unknown-chain-tokens", gateway.DefaultUnknownChainTokens, "Responses API: the prompt tokens a chained call without a record is priced at, under --responses-allow-unknown-chains")
	fs.BoolVar(&o.gw.AllowUnknownFiles, "allow-unknown-files", false, "pass on a request body naming a file id that is not its tenant's own (uploaded through the gateway, or a result of its batches); only where tenants may read each other's files (they share the upstream account)")
	fs.BoolVar(&o.gw.AllowVectorStores, "allow-vector-stores", false, "pass on a file_search tool's vector_store_ids, which the gateway cannot tell the owner of; only where tenants may search each other's vector stores")
	fs.BoolVar(&o.gw.AllowStoredPrompts, "allow-stored-prompts", false, "pass on a Responses prompt.id (a stored prompt template) and a Messages container's custom skills, which the gateway cannot tell the owner of; only where the operator creates them for every tenant")
	fs.BoolVar(&o.gw.AllowContainers, "allow-containers", false, "pass on a code execution container named by id (a code_interpreter tool's container, a Messages container), which the gateway cannot tell the owner of; only where tenants may read each other's containers")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"responses-max-records", int64(o.gw.Responses.MaxRecords)},
		{"responses-max-records-per-tenant", int64(o.gw.Responses.MaxRecordsPerTenant)},
		{"responses-unknown-chain-tokens", o.gw.Responses.UnknownChainTokens},
	} {
		if f.v <= 0 {
			return o, fmt.Errorf("--%s: %d is not positive", f.name, f.v)
		}
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.gw.UpstreamKey = os.Getenv(UpstreamKeyEnv)
	o.gw.Anthropic.Key = os.Getenv(AnthropicKeyEnv)
	o.gw.Gemini.Key = os.Getenv(GeminiKeyEnv)
	if o.azureKeyEnv != "" {
		o.gw.Azure.Key = os.Getenv(o.azureKeyEnv)
	}
	if o.gw.Bedrock.Region == "" {
		o.gw.Bedrock.Region = os.Getenv("AWS_REGION")
	}
	o.gw.Bedrock.Credentials = awsEnvCredentials()
	return o, nil
}

// awsEnvCredentials returns the AWS credentials of the standard
// environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN), or nil when they are not set. They sign the
// Bedrock upstream requests and are never logged.
func awsEnvCredentials() aws.CredentialsProvider {
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" || secret == "" {
		return nil
	}
	c := aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: os.Getenv("AWS_SESSION_TOKEN"), Source: "environment"}
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return c, nil })
}

// run starts the proxy and serves until ctx ends, then shuts down
// gracefully.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	o.logOutput = stderr
	s, err := start(o)
	if err != nil {
		return err
	}
	// Failed pushes and other exporter errors go to the gateway's log.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { s.log.Warn("llmproxy: opentelemetry", "err", err) }))
	s.setGlobalTracing()
	s.banner(stdout)
	select {
	case <-ctx.Done():
	case err := <-s.serveErr:
		return err
	}
	fmt.Fprintln(stdout, "llmproxy: shutting down, draining in-flight requests and streams")
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	return s.shutdown(sctx)
}

// server is a running proxy: the API listener, the echo server, the
// gateway, its controller, the operator listener and, without --upstream,
// the simulated upstream.
type server struct {
	opts     options
	URL      string // http://host:port of the proxy
	OpsURL   string // http://host:port of the operator listener; empty when metrics are disabled
	ops      *metrics.Listener
	e        *echo.Echo
	ln       net.Listener
	gw       *gateway.Gateway
	ctl      *admission.Controller
	file     *config.File
	watcher  *reload.Watcher
	metrics  *telemetry
	budgets  *budgets      // quota warnings
	redis    *redis.Client // for --redis
	sim      *upstream.Server
	simSrv   *http.Server
	simURL   string
	serveErr chan error
	active   handlers // the API listener's requests
	log      *slog.Logger
	traces   *sdktrace.TracerProvider // with --otlp-traces or the OTEL_* variables
	tracesTo string                   // where the spans go, for the banner
	reqLog   *requestlog.Writer       // for --request-log
	dir      *tenantDirectory         // with directory.source postgres
}

// start builds everything and starts serving; it returns once the
// listener is open.
func start(o options) (_ *server, err error) {
	s := &server{opts: o, serveErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	// The policy file: the one given, or the embedded default.
	if o.configPath != "" {
		s.file, err = config.Load(o.configPath)
	} else {
		s.file, err = config.Parse("default.yaml (embedded)", defaultPolicy)
	}
	if err != nil {
		return nil, err
	}
	// The log: the file's logging section, the level overridden by the flag.
	logging := s.file.Logging
	if o.logLevel != "" {
		if err := logging.Level.UnmarshalText([]byte(o.logLevel)); err != nil {
			return nil, fmt.Errorf("--log-level: %w", err)
		}
	}
	s.log = shadow.FileLogger(cmp.Or[io.Writer](o.logOutput, io.Discard), &logging)
	if err := s.startTracing(o.traces); err != nil {
		return nil, err
	}
	gc := o.gw
	if gc.Cut, err = gateway.ParseCutMode(o.cut); err != nil {
		return nil, fmt.Errorf("--cut-streams: %w", err)
	}

	s.metrics, err = newTelemetry(s.file, s.log, o.otlp)
	if err != nil {
		return nil, err
	}
	if s.budgets, err = newBudgets(s.file, s.log, s.metrics.prom.Provider, o.clock); err != nil {
		return nil, err
	}
	copts := []admission.Option{admission.WithObserver(shadow.Join(s.metrics.observer, s.budgets.watcher, s.traceObserver()))}
	stores, err := s.openStores(o.redis)
	if err != nil {
		return nil, err
	}
	// The stores section's upstream stores keep their static budgets (the
	// provider's published limits) on Redis with --redis, shared by every
	// replica, else in memory; each replica learns its provider's figures
	// itself.
	static, err := s.upstreamStatic()
	if err != nil {
		return nil, err
	}
	providers, err := gateway.NewProviders(s.file, static)
	if err != nil {
		return nil, err
	}
	copts = append(append(copts, stores...), providers.Options()...)
	if o.clock != nil {
		copts = append(copts, admission.WithClock(o.clock))
	}
	s.ctl, err = admission.New(s.file.Config, copts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.file.Source, err)
	}
	s.metrics.metrics.Watch(s.ctl) // the gauges: in flight, queue depth, partitions
	s.metrics.ctl.Store(s.ctl)     // the status page's figures

	// The upstream: the one given, or the simulator on a loopback port.
	if gc.Upstream == "" {
		s.sim = upstream.New(upstream.Config{Latency: o.simLatency, TokensPerSecond: o.simRate, OutputTokens: o.simTokens, Limits: o.simLimits}, upstream.WithClock(o.clock))
		simLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("simulated upstream: %w", err)
		}
		sim := http.NewServeMux()
		sim.Handle("/mcp", upstream.NewMCP()) // the simulated MCP server
		sim.Handle("/", s.sim)
		s.simSrv = &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = s.simSrv.Serve(simLn) }()
		s.simURL = "http://" + simLn.Addr().String() + "/v1"
		gc.Upstream = s.simURL
		if gc.Anthropic.Upstream == "" {
			gc.Anthropic.Upstream = s.simURL // the simulator speaks the Messages API too
		}
		if gc.MCP.Upstream == "" {
			gc.MCP.Upstream = "http://" + simLn.Addr().String() + "/mcp"
		}
		if gc.Gemini.Upstream == "" {
			gc.Gemini.Upstream = strings.TrimSuffix(s.simURL, "/v1") + "/v1beta" // and the Gemini API
		}
		if gc.Azure.Upstream == "" {
			gc.Azure.Upstream = strings.TrimSuffix(s.simURL, "/v1") // and Azure OpenAI's paths
		}
		if gc.Bedrock.Upstream == "" {
			gc.Bedrock.Upstream = strings.TrimSuffix(s.simURL, "/v1") // and Bedrock's Converse API
			if gc.Bedrock.Credentials == nil {
				// The simulator checks that requests are signed, not
				// with what.
				sim := aws.Credentials{AccessKeyID: "SIMULATED", SecretAccessKey: "simulated"}
				gc.Bedrock.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return sim, nil })
			}
		}
	}

	maxBody := s.file.HTTP.MaxBody
	if maxBody <= 0 {
		maxBody = weights.DefaultMaxBodyBytes
	}
	counters := weights.BPECounter
	if o.tokenizer == "tiktoken" {
		counters = weights.TiktokenCounter
	} else if o.tokenizer != "bpe" && o.tokenizer != "" {
		return nil, fmt.Errorf("--tokenizer: %q is not bpe or tiktoken", o.tokenizer)
	}
	// The gateway prices requests itself, from the prices of the policy
	// file in force: the estimator only counts tokens.
	est, err := weights.NewEstimator(weights.Config{MaxBodyBytes: maxBody, Counters: counters})
	if err != nil {
		return nil, err
	}
	gc.ForwardHeaders = splitList(o.forwardHeaders)
	if s.sim != nil {
		// The simulator's steering headers (X-Sim-Fault...) reach it.
		gc.ForwardHeaders = append(gc.ForwardHeaders, "X-Sim-*")
	}
	gopts := []gateway.Option{gateway.WithProviders(providers), gateway.WithClock(o.clock),
		gateway.WithMeterProvider(s.metrics.prom.Provider), gateway.WithLogger(s.log)}
	if s.traces != nil {
		gopts = append(gopts, gateway.WithTracerProvider(s.traces))
	}
	if s.redis != nil {
		// The Responses API's records (a chain's size, a response's
		// owner) are shared with every replica on the same server.
		gopts = append(gopts, gateway.WithResponseRecords(s.redis))
	}
	if o.requestLog != "" {
		if s.reqLog, err = requestlog.NewWriter(requestlog.WriterConfig{Path: o.requestLog, HashSessions: s.file.Logging.HashSessions}); err != nil {
			return nil, fmt.Errorf("--request-log: %w", err)
		}
		gopts = append(gopts, gateway.WithRequestLog(s.reqLog))
		if err := s.metrics.countRequestLog(s.reqLog); err != nil {
			return nil, err
		}
	}
	s.gw, err = gateway.New(s.ctl, est, s.file, gc, gopts...)
	if err != nil {
		return nil, err
	}
	// A reload reaches the gateway, which installs it whole, or the tenant
	// directory, which installs it with its tenants and keys (and each
	// change of one of them) into the gateway's state.
	var sub reload.Subscriber = s.gw
	if s.file.Directory.Source == config.DirectoryPostgres {
		if s.dir, err = openDirectory(s, s.metrics.prom.Provider); err != nil {
			return nil, err
		}
		sub = s.dir.dir
	}

	if o.configPath != "" {
		s.watcher, err = reload.Watch(o.configPath, s.budgets.subscriber(sub), reload.WithLogger(s.log), reload.OnReload(func(r reload.Event) {
			s.metrics.metrics.CountReload(r.Err)
			s.metrics.status.Reloaded(r.Source, r.Err)
		}))
		if err != nil {
			return nil, err
		}
	}

	s.e = echo.New()
	s.e.HideBanner, s.e.HidePort = true, true
	s.e.Server.ReadHeaderTimeout = 30 * time.Second
	s.e.Server.IdleTimeout = 2 * time.Minute
	s.e.Server.MaxHeaderBytes = MaxHeaderBytes
	s.gw.Register(s.e)
	s.e.Server.Handler = s.active.wrap(s.gw.Handler(s.e))
	if err := s.startOperator(); err != nil {
		return nil, err
	}
	s.ln, err = net.Listen("tcp", o.addr)
	if err != nil {
		return nil, err
	}
	s.URL = "http://" + s.ln.Addr().String()
	s.e.Listener = s.ln
	go func() {
		if err := s.e.Server.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serveErr <- err
		}
	}()
	return s, nil
}

// banner prints where the proxy listens and, with the embedded policy,
// the demo keys.
func (s *server) banner(w io.Writer) {
	fmt.Fprintf(w, "llmproxy: listening on %s (OpenAI-compatible API under %s/v1)\n", s.URL, s.URL)
	if s.sim != nil || s.opts.gw.Anthropic.Upstream != "" {
		fmt.Fprintf(w, "llmproxy: Anthropic Messages API under %s/v1/messages: give the Anthropic SDKs the base URL %s, without /v1\n", s.URL, s.URL)
	}
	if s.sim != nil || s.opts.gw.Azure.Upstream != "" {
		fmt.Fprintf(w, "llmproxy: Azure OpenAI under %s/openai/ for the policy file's deployments (%d): give the SDKs' Azure option the endpoint %s\n", s.URL, len(s.file.Deployments), s.URL)
	}
	if s.sim != nil || s.opts.gw.Bedrock.Upstream != "" {
		fmt.Fprintf(w, "llmproxy: Bedrock Converse API under %s/model/: give the AWS SDKs this endpoint behind TLS, the key as a Bedrock API key (AWS_BEARER_TOKEN_BEDROCK)\n", s.URL)
	}
	if s.sim != nil {
		fmt.Fprintf(w, "llmproxy: upstream: built-in simulator at %s\n", s.simURL)
	} else {
		fmt.Fprintf(w, "llmproxy: upstream: %s\n", config.RedactURL(s.opts.gw.Upstream))
	}
	if s.opts.configPath == "" {
		fmt.Fprintln(w, "llmproxy: policy: embedded default.yaml; demo keys:")
		for _, k := range demoKeys {
			if id, ok := s.file.Identity.Keys[apikey.Sum(k)]; ok {
				fmt.Fprintf(w, "  %-18s tenant %-8s plan %s\n", k, id.Tenant, s.file.Config.Plans.Tenants[id.Tenant].Plan)
			}
		}
	} else {
		fmt.Fprintf(w, "llmproxy: policy: %s (reloaded on change and on SIGHUP)\n", s.opts.configPath)
	}
	if s.dir != nil {
		s.dir.banner(w, s.file)
	}
	fmt.Fprintf(w, "llmproxy: try: curl %s/v1/chat/completions -H 'Authorization: Bearer sk-demo-globex' -H 'Content-Type: application/json' -d '{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n", s.URL)
	if s.redis != nil {
		names := s.redisStores()
		for _, up := range slices.Sorted(maps.Keys(s.file.Upstreams)) {
			names = append(names, up+" (its static budget)")
		}
		fmt.Fprintf(w, "llmproxy: stores %s on Redis at %s, shared with every replica started with the same --redis\n", strings.Join(names, ", "), s.redis.Options().Addr)
	}
	fmt.Fprintf(w, "llmproxy: health at %s/healthz and %s/readyz\n", s.URL, s.URL)
	if s.OpsURL != "" {
		fmt.Fprintf(w, "llmproxy: operator listener (keep it private): metrics at %s%s, status page at %s/status, rollout report at %s/debug/rollout\n", s.OpsURL, s.file.Metrics.Path, s.OpsURL, s.OpsURL)
	}
	if s.metrics.otlp != "" {
		fmt.Fprintf(w, "llmproxy: metrics pushed over OTLP/HTTP to %s\n", s.metrics.otlp)
	}
	if s.tracesTo != "" {
		fmt.Fprintf(w, "llmproxy: traces exported over OTLP/HTTP to %s\n", s.tracesTo)
	}
}

// startOperator opens the operator listener: the metrics at metrics.path
// and the rollout report at /debug/rollout, apart from the API listener
// since both tell about every tenant. With metrics.enabled false there is
// none. Its address is --metrics-addr, else metrics.listen, else
// DefaultMetricsAddr; a reload does not move it.
func (s *server) startOperator() (err error) {
	m := s.file.Metrics
	if !m.Enabled {
		return nil
	}
	// Exact paths, not ServeMux patterns: metrics.path is the file's text.
	rollout := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		case r.URL.Path == "/debug/rollout":
			s.metrics.rolloutHandler(w, r)
		case r.URL.Path == "/status", r.URL.Path == "/status.json":
			s.metrics.status.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
	if s.ops, err = metrics.Serve(cmp.Or(s.opts.metricsAddr, m.Listen, DefaultMetricsAddr), m.Path, s.metrics.handler, rollout); err != nil {
		return fmt.Errorf("operator listener: %w", err)
	}
	s.OpsURL = "http://" + s.ops.Addr()
	return nil
}

// handlers counts the requests in the API listener's handler, so that a
// shutdown can wait for the ones it cut to end.
type handlers struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0, made by a waiter
}

// wrap counts next's requests.
func (f *handlers) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.n++
		f.mu.Unlock()
		defer f.done()
		next.ServeHTTP(w, r)
	})
}

func (f *handlers) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n--; f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
}

// wait waits until no request is in the handler, and reports whether
// that came before ctx ended.
func (f *handlers) wait(ctx context.Context) bool {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return true
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// shutdown stops accepting, waits for in-flight requests and streams up to
// ctx's deadline, then cuts those still running and waits up to CutGrace
// for them to settle their permits, then stops the rest.
func (s *server) shutdown(ctx context.Context) error {
	s.gw.SetReady(false)
	err := s.e.Shutdown(ctx)
	if err != nil {
		// Their connections closed, the requests' contexts end: each
		// settles its ticket while the stores are still open.
		_ = s.e.Close()
		gctx, cancel := context.WithTimeout(context.Background(), CutGrace)
		if !s.active.wait(gctx) {
			s.log.Warn("llmproxy: requests cut at shutdown still running; their permits expire after max_hold", "after", CutGrace)
		}
		cancel()
	}
	s.budgets.drain(ctx) // the warnings of the drained requests
	// The drained requests' figures are pushed before the exporters stop.
	if merr := s.metrics.shutdown(ctx); merr != nil {
		s.log.Warn("llmproxy: last metrics push failed", "err", merr)
	}
	if terr := s.shutdownTracing(ctx); terr != nil {
		s.log.Warn("llmproxy: last trace export failed", "err", terr)
	}
	s.close()
	return err
}

// close releases everything start built, without draining.
func (s *server) close() {
	if s.dir != nil {
		defer s.dir.close()
	}
	if s.redis != nil {
		defer s.redis.Close()
	}
	if s.e != nil {
		_ = s.e.Close()
	} else if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.ops != nil {
		_ = s.ops.Close()
	}
	if s.watcher != nil {
		_ = s.watcher.Close()
	}
	if s.gw != nil {
		_ = s.gw.Close() // the batches' background polls
	}
	if s.ctl != nil {
		_ = s.ctl.Close() // the lease keeper: what is still held expires after max_hold
	}
	if s.simSrv != nil {
		_ = s.simSrv.Close()
	}
	if s.budgets != nil {
		s.budgets.close()
	}
	if s.metrics != nil {
		s.metrics.close()
	}
	if s.reqLog != nil {
		_ = s.reqLog.Close() // after the server: the drained requests are written
	}
	_ = s.shutdownTracing(context.Background())
}

// openStores connects to the Redis server at addr and returns it as every
// store the policy file names (other than memory and the upstream stores
// of its stores section); with no such store it connects to nothing.
func (s *server) openStores(addr string) ([]admission.Option, error) {
	// A store of kind redis says where its server is; the gateway holds
	// every shared store on the server of --redis, so a file that says
	// otherwise is refused rather than silently pointed elsewhere.
	for _, name := range slices.Sorted(maps.Keys(s.file.Redis)) {
		return nil, fmt.Errorf("%s: stores.%s: the gateway keeps every shared store on the Redis server of --redis; remove this entry (policies name the store %q without it) and start with --redis", s.file.Source, name, name)
	}
	names := s.redisStores()
	if len(names) == 0 && (addr == "" || len(s.file.Upstreams) == 0) {
		return nil, nil
	}
	if addr == "" {
		return nil, fmt.Errorf("%s: policies use the store %q: start with --redis host:port", s.file.Source, names[0])
	}
	opts := &redis.Options{Addr: addr}
	switch {
	case strings.Contains(addr, "://"):
		var err error
		if opts, err = redis.ParseURL(addr); err != nil {
			// url.Parse's error holds the URL, or a part of its password.
			if ue := (*url.Error)(nil); errors.As(err, &ue) {
				return nil, fmt.Errorf("--redis: %q is not a URL (redis://user:password@host:port/db)", config.RedactURL(addr))
			}
			return nil, fmt.Errorf("--redis: %q: %v", config.RedactURL(addr), err)
		}
	case strings.Contains(addr, "@"):
		return nil, fmt.Errorf("--redis: %q: credentials need the URL form redis://user:password@host:port", config.RedactURL(addr))
	}
	opts.ContextTimeoutEnabled = true
	s.redis = redis.NewClient(opts)
	var out []admission.Option
	for _, name := range names {
		st, err := redisstore.New(s.redis, redisstore.Config{Name: name}, redisstore.WithObserver(s.metrics.observer))
		if err != nil {
			return nil, fmt.Errorf("--redis: %w", err)
		}
		out = append(out, admission.WithStore(name, st))
	}
	return out, nil
}

// upstreamStatic returns the store of the upstream stores' static
// budgets: on Redis with --redis, else nil (in memory).
func (s *server) upstreamStatic() (backend.Store, error) {
	if s.redis == nil || len(s.file.Upstreams) == 0 {
		return nil, nil
	}
	return redisstore.New(s.redis, redisstore.Config{Name: "upstream"}, redisstore.WithObserver(s.metrics.observer))
}

// redisStores returns the stores the policy file names other than memory
// and its upstream stores: those --redis holds.
func (s *server) redisStores() []string {
	return slices.DeleteFunc(s.file.Stores(), func(n string) bool { _, up := s.file.Upstreams[n]; return up })
}
