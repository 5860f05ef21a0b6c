// Package gateway is an OpenAI-compatible LLM gateway behind admission
// control, on echo v4: llmproxy is this package behind flags (each the
// Config field or option of the same meaning, as named below), and a
// team that wants it inside its own binary imports it and calls Register
// on its own echo server (see the example). It identifies callers with an
// httpadmit.Middleware, renders rejections with WriteRejection (the
// middleware's rejection handler), and takes reloads through Apply
// (reload.Subscriber), installing policies, keys and prices as one step.
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
//     tenant runs out is ended with a final error event. The controller
//     renews the request's concurrency leases while it runs, so a stream
//     longer than max_hold keeps its permits, a stalled one too until it is
//     cut.
//  6. A client that goes away cancels the upstream call; the ticket is
//     settled with what was produced. Upstream failures are answered in the
//     OpenAI error shape: 504 upstream_timeout, 502 upstream_unavailable or
//     bad_upstream_response, the upstream's own 4xx/5xx passed through.
//     Nothing generated means only the prompt is charged.
//  7. The provider's own 429s are passed through with their retry hints and
//     counted apart (llmproxy_upstream_throttled_total): they are the
//     provider throttling the proxy, not the proxy throttling a tenant.
//     With upstream stores in the policy file (WithProviders), every
//     response's limit headers feed them, and a provider 429 is first
//     absorbed: the request waits for the provider's pause, within its
//     deadline, and is retried once (see Providers).
//
// With Config.Anthropic, POST /v1/messages (Anthropic's Messages API)
// takes the same path, priced as weights.EndpointMessages (max_tokens is
// the output reservation), admitted on the token units input_tokens,
// output_tokens and cached_input_tokens too (internal/tokenunits), and
// settled, or charged as a stream goes, from its usage (message_start,
// message_delta); the upstream key goes in x-api-key, anthropic-version
// and anthropic-beta pass through. POST /v1/messages/count_tokens is
// limited by requests only and passed through. Errors on these routes,
// rejections included, are in Anthropic's shape, and answers carry
// anthropic-ratelimit-* headers (see Anthropic).
//
// With Config.Gemini, POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent?alt=sse (the Gemini API) take the same path,
// priced as weights.EndpointGenerateContent by the model of the path
// (validated first; the upstream path is rebuilt from it), settled from
// usageMetadata; :countTokens is limited by requests only and passed
// through. The client's key comes in x-goog-api-key or the key= query
// parameter, is taken out of the request, and never goes upstream, where
// the gateway's own key goes in x-goog-api-key. Errors on these routes,
// rejections included, are in Google's shape with a RetryInfo detail;
// a provider 429's RetryInfo and QuotaFailure feed the upstream stores
// (see Gemini and docs/gemini.md).
//
// With Config.Azure, Azure OpenAI's routes take the same path:
// /openai/deployments/{deployment}/{chat/completions,completions,
// embeddings,responses}?api-version=..., /openai/v1/... and
// /openai/responses (the deployment in the body's model). A deployment
// is served when the policy file's deployments section names it, and is
// priced and limited as the model the section gives it, whatever the
// body names; any other is a 404 DeploymentNotFound, never forwarded.
// The client's key comes in api-key (or Authorization: Bearer) and never
// goes upstream, where the gateway's own goes in api-key; the upstream
// path is rebuilt from the route, the deployment as the file spells it
// and the validated api-version. Errors on these routes, rejections
// included, are in Azure's shape (see Azure and docs/azure.md).
//
// With Config.Bedrock, POST /model/{modelId}/converse and
// /converse-stream (Amazon Bedrock's Converse API) take the same path,
// priced as weights.EndpointConverse by the model id of the path
// (validated first; the upstream path is rebuilt from it), settled from
// the response's usage or, for a stream (an AWS event stream, charged as
// it goes), its metadata event's. The client's gateway key comes as a
// Bedrock API key (Authorization: Bearer); upstream, each request is
// signed with the gateway's own AWS credentials (SigV4). Errors on these
// routes, rejections included, are in Bedrock's shape: x-amzn-ErrorType
// ThrottlingException on a 429 to retry, ServiceQuotaExceededException
// on one not to retry (see Bedrock and docs/bedrock.md).
//
// The Batch API is served too (see BatchAPI): POST /v1/files counts a
// batch input file line by line as it streams upstream, POST /v1/batches
// reserves the batch's tokens and cost on the tenant's quotas until the
// batch ends, and a tenant retrieves and cancels only its own batches and
// reads only its own files (GET /v1/batches/{id}, POST
// /v1/batches/{id}/cancel, GET /v1/files/{id} and its content).
//
// The Responses API is served whole (see ResponsesAPI): a call chained
// with previous_response_id is priced from the recorded size of its
// chain, never from zero; a tenant retrieves, deletes, lists the input
// items of and cancels only its own responses (GET and DELETE
// /v1/responses/{id}, GET /v1/responses/{id}/input_items, POST
// /v1/responses/{id}/cancel); a background response holds its
// reservation until it ends; built-in tool calls are charged their fees.
// Azure OpenAI's routes serve the same for the Azure resource (see
// Azure).
//
// GET /v1/models and GET /v1/models/{id} are passed through, limited by the
// policies that match them; a model id must be 1 to 256 ASCII letters,
// digits and - _ . : @ once decoded, neither "." nor "..", else 404. Every
// other path is a 404 from the gateway. Every write to a client must
// complete within --client-write-timeout: a client that stops reading,
// during a stream too, is cut and its permits released. See the security
// model (docs/security.md in the repository) for every bound.
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
// the proxy nor give up on a wait they could make. An exhausted budget (a
// quota marked budget: true, such as a session's steps, tokens or cost)
// is final: 403 with x-should-retry: false and no Retry-After, code
// session_budget_exceeded (see docs/sessions.md).
//
// # Sessions
//
// A request's agent session comes from the identity.session headers
// (X-Session-Id, then Mcp-Session-Id), else from its body
// (metadata.session_id, metadata.user_id), while a policy is keyed by
// session; an id that is not 1 to max_length printable ASCII is refused
// with 400 invalid_session. Each model call is one step of the unit
// steps while a policy counts them.
//
// Every response carries x-ratelimit-{limit,remaining,reset}-{requests,
// tokens} for the tightest policy of each unit (reset as a Go duration,
// "6m0s"), and the IETF RateLimit-Policy and RateLimit fields with
// X-RateLimit-Limit/Remaining/Reset for every policy the request passed.
//
// # Metrics
//
// The program's metrics (llmproxy's operator listener) are the admission metrics of
// package metrics (decisions by
// policy, mode, decision and reason; in-flight work; queue depth and wait;
// estimate accuracy; top tenants) and the proxy's own:
// llmproxy_upstream_responses_total by status class,
// llmproxy_upstream_throttled_total, llmproxy_upstream_failures_total by
// reason, llmproxy_rejections_total by code, llmproxy_client_errors_total,
// llmproxy_client_cancels_total, llmproxy_streams_active,
// llmproxy_streams_cut_total, llmproxy_stream_charges_total,
// llmproxy_batches_open, llmproxy_batches_ended_total by outcome,
// llmproxy_responses_background_open,
// llmproxy_responses_background_ended_total by outcome,
// llmproxy_auth_failures_total and llmproxy_auth_throttled_total; with
// upstream stores, llmproxy_provider_throttled_total by outcome and the
// gauges llmproxy_provider_budget_remaining, llmproxy_provider_budget_limit,
// llmproxy_provider_charge_ratio and llmproxy_provider_paused_seconds by
// store and group (with
// adaptive_concurrency, llmproxy_provider_concurrency_limit and
// llmproxy_provider_ttfb_seconds too). Shadow
// decisions (what a shadow policy would reject) are logged through package
// shadow, rate-limited. The token-priced routes also record the
// OpenTelemetry GenAI metrics (gen_ai.client.token.usage,
// gen_ai.server.request.duration, gen_ai.server.time_to_first_token,
// gen_ai.server.time_per_output_token) of the convention version
// GenAIConvention, with bounded attributes: the model as the prices name
// it or OtherModel, never the tenant.
//
// # Traces
//
// With WithTracerProvider, serve the echo server through Handler: each
// request gets a server span continuing the client's W3C traceparent,
// named by its route, on which the controller's decisions are events
// (give the controller oteltrace.Observer) and the settlement is
// SettledEvent; each upstream call is a client span whose trace context
// goes upstream (traceparent and tracestate only, never baggage nor a
// client credential). Log lines written in a request's context carry its
// trace with oteltrace.LogHandler.
//
// Optional collaborators are options: WithLogger, WithClock,
// WithMeterProvider, WithTracerProvider, WithTransport, WithRequestLog,
// WithProviders, WithResponseRecords; see docs/concepts.md#constructors.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/requestlog"
	"github.com/sluicehq/sluice/weights"
)

// Defaults of Config fields left zero.
const (
	DefaultTimeout          = 10 * time.Minute
	DefaultHeaderTimeout    = 2 * time.Minute
	DefaultStreamIdle       = 2 * time.Minute
	DefaultChargeInterval   = 500 * time.Millisecond
	DefaultGiveUpAfter      = 60 * time.Second
	DefaultMaxResponseBytes = 64 << 20
	// DefaultClientWriteTimeout bounds each write to a client: a client
	// that reads nothing for this long is cut and its permits released.
	DefaultClientWriteTimeout = 30 * time.Second
	// DefaultBodyReadTimeout bounds the time a client takes to send its
	// request body, from the end of its headers: the HTTP middleware's
	// default.
	DefaultBodyReadTimeout = config.DefaultBodyTimeout
	// DefaultParseBudget is the request-body bytes read and priced at
	// once: eight bodies of 8 MiB.
	DefaultParseBudget = 64 << 20
	// DefaultParseBudgetWait is how long a request waits for room in the
	// parse budget.
	DefaultParseBudgetWait = 2 * time.Second
)

// CutMode says when a running stream is cut off because its tenant has
// nothing left.
type CutMode uint8

const (
	// CutRateAndQuota cuts a stream when charging it finds an enforcing
	// rate policy (tokens per minute) or quota of its tenant exhausted, so
	// parallel streams overshoot a limit by at most one charging interval.
	CutRateAndQuota CutMode = iota
	// CutQuota cuts only on an exhausted quota; a rate limit is charged and
	// left in debt.
	CutQuota
	// CutNever never cuts a stream; usage is still charged as it goes.
	CutNever
)

// ParseCutMode parses "all", "quota" or "never".
func ParseCutMode(s string) (CutMode, error) {
	switch s {
	case "all", "":
		return CutRateAndQuota, nil
	case "quota":
		return CutQuota, nil
	case "never":
		return CutNever, nil
	}
	return 0, fmt.Errorf("unknown stream cut mode %q (want all, quota or never)", s)
}

// Config configures a Gateway. Upstream is required; every other field
// documents its default.
type Config struct {
	// Upstream is the base URL of the OpenAI-compatible API, with its
	// version prefix: "https://api.openai.com/v1". A request for
	// /v1/chat/completions goes to Upstream + "/chat/completions".
	Upstream string
	// UpstreamKey is sent upstream as "Authorization: Bearer <key>" in place
	// of the client's proxy key. It never reaches a client. Empty sends no
	// Authorization header.
	UpstreamKey string
	// UpstreamKeyHeader is the header carrying UpstreamKey. Empty means
	// Authorization with the Bearer scheme; any other header carries the
	// key itself (Azure OpenAI's "api-key").
	UpstreamKeyHeader string
	// Anthropic configures the Messages API routes (see Anthropic); the
	// zero value leaves them out.
	Anthropic Anthropic
	// Gemini configures the Gemini API routes (see Gemini); the zero
	// value leaves them out.
	Gemini Gemini
	// Azure configures the Azure OpenAI routes (see Azure); the zero
	// value leaves them out.
	Azure Azure
	// Bedrock configures the Converse API routes of Amazon Bedrock (see
	// Bedrock); the zero value leaves them out.
	Bedrock Bedrock
	// Batches configures the Batch API routes (see BatchAPI); the zero
	// value serves them with its defaults.
	Batches BatchAPI
	// MCP configures the MCP route (see MCP); the zero value leaves it
	// out.
	MCP MCP
	// AllowUnknownFiles passes on a request body naming a file by id (a
	// Chat Completions file part's file.file_id, a Responses API
	// input_file or input_image, a Messages API source: see
	// weights.RefFile) that is not its tenant's own, where by default
	// it is a 400 naming the field that never reaches the upstream. A
	// tenant's own files are the batch input files it uploaded through
	// the gateway and the output and error files of its batches, on
	// Config.Upstream only (the gateway records no file of Azure
	// OpenAI's or Anthropic's). Every tenant's files live in the one
	// provider account, which reads any of them for whoever names it:
	// set it only when the tenants may read each other's files, or
	// upload them to the provider directly. Such a file is priced by its
	// reference alone; one whose size the gateway knows, by its size too
	// (one token per 4 bytes), whether or not this is set: an input
	// file's, counted at upload, and a batch result's, once its tenant
	// read its content or its object through the gateway.
	AllowUnknownFiles bool
	// AllowVectorStores passes on a file_search tool's vector_store_ids
	// (weights.RefVectorStore), where by default it is a 400: the
	// gateway serves no vector stores, so it cannot tell whose a vector
	// store is, and the provider searches any for whoever names it. Set
	// it only when the tenants may search each other's.
	AllowVectorStores bool
	// AllowStoredPrompts passes on a Responses API prompt.id (a prompt
	// template stored in the provider account, weights.RefPrompt) and a
	// Messages API container's custom skills (weights.RefSkill), where
	// by default they are a 400: the gateway does not proxy their
	// creation, so it cannot tell whose one is, and the provider runs
	// any for whoever names it. Set it when the operator creates them
	// for every tenant to use, and no tenant may create its own.
	AllowStoredPrompts bool
	// AllowContainers passes on a code execution container named by id
	// (a Responses API code_interpreter tool's container, a Messages API
	// container: weights.RefContainer), where by default it is a 400: a
	// container keeps the files and state of the calls that ran in it,
	// the gateway does not record whose calls those were, and the
	// provider runs code in any for whoever names it. A tool that
	// creates its own container ({"type":"auto"}, or no container) is
	// served either way. Set it only when the tenants may read each
	// other's containers.
	AllowContainers bool
	// Responses configures the Responses API's chained calls, the routes
	// of one response and background responses (see ResponsesAPI); the
	// zero value serves them with its defaults.
	Responses ResponsesAPI
	// ParseBudget bounds the request-body bytes being read and priced at
	// once, over all requests: a request reserves its Content-Length (or
	// the body cap when it sends none) before reading. Zero means
	// DefaultParseBudget.
	ParseBudget int64
	// ParseBudgetWait is how long a request waits for room in the parse
	// budget before it is refused with 503; zero means
	// DefaultParseBudgetWait.
	ParseBudgetWait time.Duration
	// Timeout bounds a non-streaming upstream call; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// StreamIdleTimeout bounds the silence between two reads of a stream;
	// zero means DefaultStreamIdle.
	StreamIdleTimeout time.Duration
	// ChargeInterval is how often a running stream is charged for what it
	// has produced; zero means DefaultChargeInterval.
	ChargeInterval time.Duration
	// Cut says when a stream is cut off by an exhausted limit.
	Cut CutMode
	// GiveUpAfter is the longest retry-after a client is expected to wait:
	// a rejection advising longer carries x-should-retry: false. Zero
	// means DefaultGiveUpAfter.
	GiveUpAfter time.Duration
	// MaxOutputReserve, when positive, caps the output part of a request's
	// token reservation; the rest is charged as the stream goes. Zero
	// reserves the full output limit.
	MaxOutputReserve int64
	// DefaultMaxTokens, when positive, is the output reserved for a
	// request that sets no output limit of its own (no max_tokens), per
	// completion asked for, for the models the policy file's models
	// section does not name (see config.Model); zero keeps the
	// estimator's default (weights.DefaultMaxOutputTokens unless it is
	// configured otherwise). Set it to what the provider's limiter
	// charges such a request. At most 10,000,000.
	DefaultMaxTokens int64
	// MaxResponseBytes caps a non-streaming upstream response; zero means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// SharedPolicies names the policies whose rejections mean the shared
	// upstream capacity is overloaded (503 instead of 429). Nil means every
	// concurrency policy keyed globally.
	SharedPolicies map[string]bool
	// ForwardHeaders names client request headers forwarded upstream
	// besides the built-in set (Content-Type, Accept, User-Agent,
	// OpenAI-Beta, Idempotency-Key, trace context, X-Stainless-*): exact
	// names, or prefixes ending in '*'. A header that can carry a client
	// credential (httpadmit.IdentityConfig.CredentialHeader: every
	// Identity.KeyHeaders entry, Authorization, Cookie...) is never
	// forwarded.
	ForwardHeaders []string
	// ClientWriteTimeout bounds every write and flush to a client, on
	// streams and plain answers alike: a client that stops reading is cut
	// once its connection's buffers are full and a write waits this long,
	// and the request's permits are released. Zero means
	// DefaultClientWriteTimeout.
	ClientWriteTimeout time.Duration
	// BodyReadTimeout bounds the time a client takes to send its request
	// body, counted from the end of its headers (which the server bounds
	// with its ReadHeaderTimeout): a slower body is cut and the connection
	// closed. Zero means the policy file's http.body_timeout, else
	// DefaultBodyReadTimeout; a reload does not change it.
	BodyReadTimeout time.Duration
	// GenAIProvider is the gen_ai.provider.name of Upstream on the GenAI
	// metrics (a value of the convention: openai, azure.ai.openai,
	// groq...); empty means openai. The Messages API routes are anthropic.
	GenAIProvider string
}

// An Option sets an optional collaborator of a Gateway.
type Option func(*options)

// options are the optional collaborators of a Gateway.
type options struct {
	transport  http.RoundTripper
	clock      admission.Clock
	mp         metric.MeterProvider
	tp         trace.TracerProvider
	log        *slog.Logger
	requestLog *requestlog.Writer
	providers  *Providers
	// responseRedis holds the Responses API's records (WithResponseRecords).
	responseRedis redis.UniversalClient
}

// scope is the instrumentation scope of the gateway's instruments: the
// program's (llmproxy), whose metrics they are.
const scope = "github.com/sluicehq/sluice/examples/llmproxy"

// WithTransport sets the transport of upstream requests; nil means
// NewTransport(), the default.
func WithTransport(t http.RoundTripper) Option { return func(o *options) { o.transport = t } }

// WithClock sets the clock of the failed-authentication limiter, of the
// providers' reports, of batches and of the request log's times; nil
// means the system clock (admission.SystemClock), the default.
func WithClock(c admission.Clock) Option { return func(o *options) { o.clock = c } }

// WithMeterProvider creates the gateway's own instruments, the GenAI
// metrics among them (see GenAIConvention), on mp; nil, the default,
// creates none.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.mp = mp } }

// WithTracerProvider traces requests on tp: Handler serves them under a
// server span, every upstream call is a client span whose trace context
// (traceparent and tracestate, nothing else) goes upstream, and a
// settlement adds SettledEvent to the server span. Nil, the default,
// traces nothing, at no cost.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tp = tp } }

// WithLogger sets the logger of upstream failures; nil means
// slog.Default(), the default.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRequestLog sends to w every request the policies decided, on every
// route: a refused one with its estimates, an admitted one when it ends
// with its actual usage (a batch when its reservation ends) and how long
// it held its permits, one whose body was refused (400, 413, 503
// server_busy) after the request-level policies admitted it as a
// begin_only record (requestlog.Record.BeginOnly: it spent those
// policies and replays through them alone), in the format admitctl
// replay reads (see requestlog.Writer), so that replaying the log
// through the same file gives the live decisions back. It never holds a
// key, a prompt or a completion. Nil, the default, logs none.
func WithRequestLog(w *requestlog.Writer) Option { return func(o *options) { o.requestLog = w } }

// WithProviders sets the upstream stores of the policy file's stores
// section, built by NewProviders and registered with the controller
// (Providers.Options): every upstream response feeds them, and a
// provider 429 is absorbed once (see Providers). Nil, the default, or
// none declared, passes the provider's 429s through; a file that
// declares upstream stores then fails to install.
func WithProviders(p *Providers) Option { return func(o *options) { o.providers = p } }

// Gateway proxies OpenAI-compatible requests through admission control.
type Gateway struct {
	cfg     Config
	ctl     *admission.Controller
	est     *weights.Estimator
	file    *config.File // the file given to New
	opt     options
	meter   metric.Meter // the instruments' meter; a no-op one without WithMeterProvider
	base    *url.URL
	mw      *httpadmit.Middleware // identity and operation names
	mu      sync.Mutex            // serialises installs of state
	state   atomic.Pointer[state]
	budget  *budget
	ready   atomic.Bool
	forward headerSet
	log     *slog.Logger
	m       instruments
	genai   genAI

	anthropic *url.URL // Config.Anthropic.Upstream; nil without one
	gemini    *url.URL // Config.Gemini.Upstream; nil without one
	azure     *url.URL // Config.Azure.Upstream; nil without one
	bedrock   *url.URL // Config.Bedrock.Upstream; nil without one
	batches   *batches // the Batch API's files and reservations
	responses *responses
	streams   streamWatch
	mcp       *mcpProxy // Config.MCP's routes
}

// state is the gateway's snapshot: everything it derives from one
// policy file (and the tenant directory's version), built and checked
// whole, then installed by one atomic swap (Apply, SetTenant, SetKey).
// A request loads it once, when it arrives, and is identified, priced,
// admitted (the policy set of mw, which its ticket settles against) and
// answered by it alone: never by the policies of one file and the key
// table, prices or quota status of another.
type state struct {
	mw     *httpadmit.Snapshot // the policy set, the identity settings and keys
	file   *config.File        // the file installed
	prices *weights.Prices
	// cost is set while a policy counts cost: unpriced models are then
	// refused.
	cost   bool
	shared map[string]bool // the policies guarding the shared upstream
	quota  int             // the status of a quota rejection
	shadow bool            // the Sluice-Would-Reject header
	auth   *authLimiter
	store  map[string]string // policy → its store, for the policies on a store
	// sessions: where sessions come from, which policies are budgets.
	sessions sessions
	models   map[string]bool      // the values of gen_ai.request.model besides OtherModel
	mcp      map[string]mcpServer // the file's named MCP servers
	// outputs are the models section's output reservations of a request
	// without max_tokens, as rules (MaxOutputTokens) by lower-cased prefix.
	outputs []weights.ModelRule
}

// New checks cfg, installs file and returns a Gateway admitting requests
// with ctl, whose bodies est counts the tokens of and caps the size of.
//
// The file is the policy file in force; Apply installs the next one. The
// gateway reads its policies and plans (into ctl), its identity section
// (API keys, trusted proxies, failed_auth), its http section's
// quota_status, shadow_header, body_timeout (see
// Config.BodyReadTimeout) and upload settings (see BatchAPI; like
// body_timeout, read once by New), and its prices: while a cost policy
// is installed, a request for a model the prices cannot price (no entry,
// no base model, no fallback price) is refused with 400
// model_not_priced: an unpriced model is never free.
func New(ctl *admission.Controller, est *weights.Estimator, file *config.File, cfg Config, opts ...Option) (*Gateway, error) {
	if ctl == nil || est == nil || file == nil {
		return nil, errors.New("gateway: a controller, an estimator and a policy file are required")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.DefaultMaxTokens < 0 || cfg.DefaultMaxTokens > maxDefaultOutput {
		return nil, fmt.Errorf("gateway: DefaultMaxTokens %d is outside [0, %d]", cfg.DefaultMaxTokens, maxDefaultOutput)
	}
	base, err := parseUpstream(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	var anthropic *url.URL
	if cfg.Anthropic.Upstream != "" {
		if anthropic, err = parseUpstream(cfg.Anthropic.Upstream); err != nil {
			return nil, err
		}
	}
	var gemini *url.URL
	if cfg.Gemini.Upstream != "" {
		if gemini, err = parseUpstream(cfg.Gemini.Upstream); err != nil {
			return nil, err
		}
	}
	var azure *url.URL
	if cfg.Azure.Upstream != "" {
		if azure, err = parseUpstream(cfg.Azure.Upstream); err != nil {
			return nil, err
		}
	}
	var bedrock *url.URL
	if cfg.Bedrock.Upstream != "" {
		if bedrock, err = parseUpstream(cfg.Bedrock.Upstream); err != nil {
			return nil, err
		}
	}
	if o.transport == nil {
		o.transport = NewTransport()
	}
	if o.tp != nil {
		o.transport = tracedTransport(o.transport, o.tp)
	}
	if cfg.GenAIProvider == "" {
		cfg.GenAIProvider = string(genaiconv.ProviderNameOpenAI)
	}
	cfg.Timeout, cfg.StreamIdleTimeout = positive(cfg.Timeout, DefaultTimeout), positive(cfg.StreamIdleTimeout, DefaultStreamIdle)
	cfg.ChargeInterval, cfg.GiveUpAfter = positive(cfg.ChargeInterval, DefaultChargeInterval), positive(cfg.GiveUpAfter, DefaultGiveUpAfter)
	cfg.MaxResponseBytes, cfg.ClientWriteTimeout = positive(cfg.MaxResponseBytes, DefaultMaxResponseBytes), positive(cfg.ClientWriteTimeout, DefaultClientWriteTimeout)
	cfg.BodyReadTimeout = positive(cfg.BodyReadTimeout, positive(file.HTTP.BodyTimeout, DefaultBodyReadTimeout))
	cfg.ParseBudget, cfg.ParseBudgetWait = positive(cfg.ParseBudget, DefaultParseBudget), positive(cfg.ParseBudgetWait, DefaultParseBudgetWait)
	if o.mp == nil {
		o.mp = noop.NewMeterProvider()
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	g := &Gateway{cfg: cfg, ctl: ctl, est: est, file: file, opt: o, meter: o.mp.Meter(scope),
		base: base, anthropic: anthropic, gemini: gemini, azure: azure, bedrock: bedrock, log: o.log, forward: newHeaderSet(cfg.ForwardHeaders)}
	mwOpts := []httpadmit.Option{httpadmit.WithRejectionHandler(g.WriteRejection), httpadmit.WithLogger(g.log)}
	g.mw, err = httpadmit.New(ctl, mwOpts...)
	if err != nil {
		return nil, err
	}
	if err := g.Apply(file); err != nil {
		return nil, err
	}
	g.budget = newBudget(cfg.ParseBudget, cfg.ParseBudgetWait)
	if g.batches, err = newBatches(g, cfg.Batches, o.clock); err != nil {
		return nil, err
	}
	if g.responses, err = newResponses(g, cfg.Responses, o.clock); err != nil {
		return nil, err
	}
	if err := errors.Join(g.m.init(g.meter), g.genai.init(g.meter), g.initProviders(g.meter)); err != nil {
		return nil, err
	}
	if g.mcp, err = newMCP(cfg.MCP, g.meter); err != nil {
		return nil, err
	}
	g.ready.Store(true)
	return g, nil
}

// positive returns v, or d when v is zero or negative.
func positive[T int64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// NewTransport returns the transport used for upstream calls: many idle
// connections kept per host (Go's default of 2 makes a busy proxy redial
// constantly), a bounded wait for response headers, and no transparent
// compression so streamed bytes pass through as they come.
func NewTransport() *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: DefaultHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		// Over HTTP/1.1 every open stream holds its connection's buffers:
		// the request is written once (a body larger than the buffer
		// goes straight to the socket), and a stream's reads go straight
		// to the gateway's own buffer.
		WriteBufferSize: 1 << 10,
		ReadBufferSize:  2 << 10,
	}
}

// Apply installs a policy file, as a reload.Subscriber: the policy set
// (policies and plans), the key table, the quota status, the shadow
// header, the prices, the MCP servers (mcp_servers: a server added is
// served at /mcp/{name} from this state on, one removed answers 404)
// and the failed-authentication throttle's figures
// (each address keeping what is left of its allowance), built into one
// state and installed by one swap (see state). A file that does not
// build changes nothing.
func (g *Gateway) Apply(f *config.File) error {
	if err := g.opt.providers.check(f); err != nil {
		return err
	}
	prices, err := pricing.Table(f.Prices)
	if err != nil {
		return fmt.Errorf("prices: %w", err)
	}
	servers, err := mcpServers(f)
	if err != nil {
		return err
	}
	st := &state{file: f, prices: prices, shared: map[string]bool{}, quota: f.HTTP.QuotaStatus, shadow: f.HTTP.ShadowHeader, store: map[string]string{}, models: configuredModels(f), sessions: newSessions(f), mcp: servers}
	for name, m := range f.Models {
		st.outputs = append(st.outputs, weights.ModelRule{Prefix: strings.ToLower(name), MaxOutputTokens: m.DefaultMaxTokens})
	}
	for _, p := range f.Config.Policies {
		if p.Store != "" {
			st.store[p.Name] = p.Store
		}
		global := len(p.Key) == 0 || (len(p.Key) == 1 && p.Key[0] == limits.KeyGlobal)
		st.shared[p.Name] = global && p.Algorithm == limits.Concurrency
		st.cost = st.cost || p.Unit == limits.UnitCost
	}
	if g.cfg.SharedPolicies != nil {
		st.shared = g.cfg.SharedPolicies
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var oldAuth *authLimiter
	if old := g.state.Load(); old != nil {
		oldAuth = old.auth
	}
	if st.mw, err = g.mw.Compile(f.Config, httpadmitfile.Options(f)...); err != nil {
		return err
	}
	if st.auth, err = nextAuthLimiter(oldAuth, f.Identity.FailedAuth, g.opt.clock); err != nil {
		return err
	}
	return g.install(st)
}

// install makes st the state requests read (its policy set the
// controller's too); g.mu is held.
func (g *Gateway) install(st *state) error {
	if err := g.mw.Install(st.mw); err != nil {
		return err
	}
	g.state.Store(st)
	return nil
}

// SetTenant installs the state in force with one tenant's plan and
// overrides changed (tp nil removes the tenant), as a tenant directory's
// target (directory.Target): one new state, sharing the other tenants'
// limits and every partition.
func (g *Gateway) SetTenant(tenant string, tp *limits.TenantPlan) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := *g.state.Load()
	var err error
	if next.mw, err = next.mw.WithTenant(g.ctl, tenant, tp); err != nil {
		return err
	}
	return g.install(&next)
}

// SetKey installs the state in force with one API key added, replaced or
// (k nil) revoked, as a tenant directory's target (directory.Target).
func (g *Gateway) SetKey(h apikey.Hash, k *apikey.Identity) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := *g.state.Load()
	var err error
	if next.mw, err = next.mw.WithKey(h, k); err != nil {
		return err
	}
	return g.install(&next)
}

// admitted writes the headers of an admitted request.
func (g *Gateway) admitted(w http.ResponseWriter, st *state, tk admission.Ticket) {
	var buf [8]admission.Status
	h := w.Header()
	g.setLimitHeaders(w, tk.Statuses(buf[:0]))
	if st.shadow {
		var names [4]string
		if wr := tk.WouldReject(names[:0]); len(wr) > 0 {
			limitheaders.SetWouldReject(h, wr)
		}
	}
}

// SetReady sets what /readyz answers; a shutting-down server sets false so
// load balancers stop sending traffic while streams drain.
func (g *Gateway) SetReady(ok bool) { g.ready.Store(ok) }

// The routes of the gateway. A policy file matches them by route and
// method: the admission operation of a request is "METHOD route", as the
// HTTP middleware names it ("POST /v1/chat/completions").
const (
	OpChatCompletions = "/v1/chat/completions"
	OpCompletions     = "/v1/completions"
	OpEmbeddings      = "/v1/embeddings"
	OpResponses       = "/v1/responses"
	OpModels          = "/v1/models"
	// OpModel is the route of one model, GET /v1/models/{id}; the id
	// must pass ModelIDFromPath.
	OpModel = "/v1/models/:id"
)

// A route is one forwarded route: its echo path, its pattern (the
// operation name the middleware reads from Request.Pattern) and its path
// under Config.Upstream. The upstream path of a request is rebuilt from
// the route, never from the path the client sent.
type route struct {
	path, pattern, upstream string
	endpoint                weights.Endpoint // what the body is priced as
	// az is an Azure OpenAI request's deployment and api-version, set
	// per request (see handleAzure); nil on other routes.
	az *azureCall
}

var (
	llmRoutes = []route{
		{OpChatCompletions, "POST " + OpChatCompletions, "/chat/completions", weights.EndpointChatCompletions, nil},
		{OpCompletions, "POST " + OpCompletions, "/completions", weights.EndpointCompletions, nil},
		{OpEmbeddings, "POST " + OpEmbeddings, "/embeddings", weights.EndpointEmbeddings, nil},
		{OpResponses, "POST " + OpResponses, "/responses", weights.EndpointResponses, nil},
	}
	modelsRoute = route{OpModels, "GET " + OpModels, "/models", weights.EndpointUnknown, nil}
	modelRoute  = route{OpModel, "GET " + OpModels + "/{id}", "/models/", weights.EndpointUnknown, nil}
)

// on returns h for rt, the request's pattern set for the middleware.
func on(rt route, h func(echo.Context, route) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Request().Pattern = rt.pattern
		return h(c, rt)
	}
}

// Register adds the gateway's routes to e: the four LLM endpoints, the
// models listing and one model, and the probes /healthz and /readyz
// (never limited). Every other path is a 404 from the gateway, never
// forwarded. Operator endpoints (metrics, rollout reports) do not belong
// on a tenants' listener: the program serves them on another one.
// Register also puts the client deadlines (Config.ClientWriteTimeout,
// Config.BodyReadTimeout) on every request and installs an error handler
// that answers in the OpenAI error shape.
func (g *Gateway) Register(e *echo.Echo) {
	e.HTTPErrorHandler = g.errorHandler
	e.Pre(g.deadlines)
	for _, rt := range llmRoutes {
		e.POST(rt.path, on(rt, g.handleLLM))
	}
	g.registerMessages(e)
	g.registerGemini(e)
	g.registerAzure(e)
	g.registerBedrock(e)
	g.registerBatches(e)
	g.registerResponses(e)
	g.registerMCP(e)
	e.GET(OpModels, on(modelsRoute, g.handleModels))
	e.GET(OpModel, on(modelRoute, g.handleModels))
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/readyz", func(c echo.Context) error {
		if !g.ready.Load() {
			return c.String(http.StatusServiceUnavailable, "shutting down\n")
		}
		return c.String(http.StatusOK, "ready\n")
	})
}

// errorHandler answers echo's own errors (unknown route, wrong method) in
// the OpenAI error shape, or Anthropic's under the Messages API's paths.
func (g *Gateway) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	r := c.Request()
	if g.anthropic != nil && anthropicPath(r.URL.Path) {
		anthropicAnswer(c)
	}
	status, msg := http.StatusInternalServerError, "The server had an error while processing your request."
	var he *echo.HTTPError
	if errors.As(err, &he) {
		status = he.Code
		// The path is the client's: quoted back bounded and cleaned.
		switch {
		case status == http.StatusNotFound && strings.HasPrefix(r.URL.Path, "/v1/v1/"):
			msg = "Unknown request URL: " + shadow.Clip(r.Method) + " " + shadow.Clip(r.URL.Path) +
				". The base URL has /v1 twice: give the Anthropic SDKs the gateway's URL without /v1 (the OpenAI SDKs take it with /v1)."
		case status == http.StatusNotFound:
			msg = "Unknown request URL: " + shadow.Clip(r.Method) + " " + shadow.Clip(r.URL.Path) + "."
		case status == http.StatusMethodNotAllowed:
			msg = "Method " + shadow.Clip(r.Method) + " is not allowed on " + shadow.Clip(r.URL.Path) + "."
		default:
			msg = http.StatusText(status)
		}
	}
	g.unroutedShape(c)
	typ, code := "invalid_request_error", "unknown_url"
	if status >= 500 {
		typ, code = "server_error", "internal_error"
		g.log.ErrorContext(r.Context(), "llmproxy: handler error", "err", shadow.Clip(err.Error()))
	} else if status == http.StatusMethodNotAllowed {
		code = "method_not_allowed"
	}
	writeError(c.Response(), status, typ, code, "", msg)
}

// identify resolves the caller with the middleware or answers: 401 for a
// missing or unknown key, 429 when the client address has failed too
// often lately (see config.FailedAuth), whatever its key. It returns the
// admission request of the caller: identity, address and operation.
func (g *Gateway) identify(c echo.Context, st *state) (admission.Request, bool) {
	r := c.Request()
	ctx := r.Context()
	req, err := g.mw.Request(st.mw, r)
	addr := req.Addr
	if err != nil {
		addr = st.mw.Identity().ClientAddr(r)
	}
	if wait, ok := st.auth.allow(ctx, addr); !ok {
		g.m.authThrottled.Add(ctx, 1)
		limitheaders.SetRetryAfter(c.Response().Header(), wait)
		writeError(c.Response(), http.StatusTooManyRequests, "invalid_request_error", "too_many_authentication_failures", "",
			"Too many requests with a missing or incorrect API key came from your address. Please retry later.")
		return admission.Request{}, false
	}
	if err == nil {
		st.classify(r, &req)
		return req, true
	}
	if errors.Is(err, apikey.ErrInvalidSession) {
		// Identified, with a session header it refuses: not an
		// authentication failure.
		g.invalidSession(c)
		return admission.Request{}, false
	}
	st.auth.failed(ctx, addr)
	g.unauthorized(c, err)
	return admission.Request{}, false
}

// unauthorized answers 401 for a missing or unknown key.
func (g *Gateway) unauthorized(c echo.Context, err error) {
	ctx := c.Request().Context()
	if errors.Is(err, httpadmit.ErrNoCredentials) {
		g.m.count(ctx, g.m.authFailures, "missing_api_key")
		how := "\"Authorization: Bearer YOUR_KEY\""
		if anthropicShaped(c.Response()) {
			how = "\"x-api-key: YOUR_KEY\""
		} else if geminiShaped(c.Response()) {
			how = "\"x-goog-api-key: YOUR_KEY\""
		} else if azureShaped(c.Response()) {
			how = "\"api-key: YOUR_KEY\""
		} else if bedrockShaped(c.Response()) {
			how = "a Bedrock API key, \"Authorization: Bearer YOUR_KEY\" (the AWS SDKs send it over HTTPS with AWS_BEARER_TOKEN_BEDROCK set; a SigV4 signature is not accepted)"
		}
		writeError(c.Response(), http.StatusUnauthorized, "invalid_request_error", "missing_api_key", "",
			"You didn't provide an API key. Send it as "+how+".")
	} else {
		g.m.count(ctx, g.m.authFailures, "invalid_api_key")
		writeError(c.Response(), http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "",
			"Incorrect API key provided.")
	}
	g.m.count(ctx, g.m.clientErrors, "unauthorized")
}

// checkModel answers 400 and returns false when the model name of a
// request body is over MaxModelBytes or holds control characters (see
// ValidModelName), before the request is priced or admitted.
func (g *Gateway) checkModel(c echo.Context, model string) bool {
	if ValidModelName(model) {
		return true
	}
	g.m.count(c.Request().Context(), g.m.clientErrors, "invalid_model")
	writeError(c.Response(), http.StatusBadRequest, "invalid_request_error", "invalid_model", "model",
		"The model name must be at most "+strconv.Itoa(MaxModelBytes)+" bytes of text without control characters.")
	return false
}

// admissionContext bounds the wait in admission queues by the timeout the
// official SDKs send: a request whose queue wait would outlast it is
// refused at once rather than queued to time out.
func (g *Gateway) admissionContext(c echo.Context) (context.Context, context.CancelFunc) {
	ctx := c.Request().Context()
	if v := c.Request().Header.Get("X-Stainless-Timeout"); v != "" {
		if secs, err := strconv.ParseFloat(v, 64); err == nil && secs > 0 && secs < 86400 {
			return context.WithTimeout(ctx, time.Duration(secs*float64(time.Second)))
		}
	}
	return ctx, func() {}
}

// refused answers a request that admission did not let through, by the
// state st it was decided with: the rejection, 400 for an amount out of
// range, nothing when the client gave up while queued, 503 when
// admission itself failed.
func (g *Gateway) refused(c echo.Context, st *state, err error) {
	var rej *admission.Rejection
	ctx := c.Request().Context()
	switch {
	case errors.As(err, &rej):
		g.writeRejection(st, c.Response(), c.Request(), rej)
	case errors.Is(err, errNotPriced):
		g.m.count(ctx, g.m.clientErrors, "model_not_priced")
		writeError(c.Response(), http.StatusBadRequest, "invalid_request_error", "model_not_priced", "model",
			"The model has no price, and this gateway does not serve unpriced models.")
	case errors.Is(err, httpadmit.ErrUnknownKey), errors.Is(err, httpadmit.ErrNoCredentials):
		// A reload removed the key while the request was admitted.
		g.unauthorized(c, err)
	case errors.Is(err, admission.ErrInvalidCost):
		g.m.count(ctx, g.m.clientErrors, "invalid_cost")
		writeError(c.Response(), http.StatusBadRequest, "invalid_request_error", "invalid_cost", "",
			"The request's token or cost reservation is out of range.")
	case ctx.Err() != nil:
		// The client gave up while queued: nobody is left to answer.
		c.Response().Status = 499
	default:
		g.log.ErrorContext(ctx, "llmproxy: admission failed", "err", err)
		writeError(c.Response(), http.StatusServiceUnavailable, "server_error", "service_unavailable", "",
			"The gateway cannot admit requests right now. Please retry.")
	}
}

// handleModels proxies the models listing, the retrieval of one model
// and Anthropic's count_tokens, limited by requests only: a POST's body
// is read (capped, within the parse budget) once admitted and passed
// through as is. A model id that ModelIDFromPath refuses is a 404 from
// the gateway, before anything else.
func (g *Gateway) handleModels(c echo.Context, rt route) error {
	id := ""
	if rt.path == OpModel {
		var ok bool
		if id, ok = ModelIDFromPath(c.Param("id"), c.Request().URL.RawPath != ""); !ok {
			g.m.count(c.Request().Context(), g.m.clientErrors, "invalid_model_id")
			writeError(c.Response(), http.StatusNotFound, "invalid_request_error", "model_not_found", "model",
				"The model does not exist: a model id is 1 to "+strconv.Itoa(MaxModelBytes)+" letters, digits and - _ . : @.")
			return nil
		}
	}
	st := g.state.Load()
	req, ok := g.identify(c, st)
	if !ok {
		return nil
	}
	r := c.Request()
	if limit := g.est.MaxBodyBytes(); r.ContentLength > limit {
		g.tooLarge(c, limit) // before it takes a request from the caller's limits
		return nil
	}
	tk, finish, ok := g.admitRequest(c, st, req)
	if !ok {
		return nil
	}
	defer finish()
	var body []byte
	if r.Method == http.MethodPost {
		var release func()
		if body, release, ok = g.readBody(c); !ok {
			return nil
		}
		release()
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.Timeout)
	defer cancel()
	resp, err := g.roundTrip(ctx, st, r, rt, id, body)
	if err != nil {
		g.upstreamFailed(c, r.Context(), err)
		return nil
	}
	defer resp.Body.Close()
	g.observe(resp, st, tk, "", 0, 0)
	g.m.upstreamStatus(ctx, resp.StatusCode)
	data, err := readLimited(resp.Body, g.cfg.MaxResponseBytes)
	if err != nil {
		g.upstreamFailed(c, r.Context(), err)
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		g.upstreamError(c, resp, data)
		return nil
	}
	g.writeUpstream(c, resp, data)
	return nil
}
