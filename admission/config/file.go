// Package config reads Sluice policy files: one strict YAML schema, shared
// by every binary, that declares the policies, the plans that override
// their limits per tenant, the tenants with their hashed API keys, how
// callers are identified at the HTTP edge, and the metrics and logging
// settings.
//
// Decoding is strict. An unknown key, a duplicate key or policy name, a
// plan naming a missing policy, a zero or negative limit and impossible
// combinations (a queue timeout without a queue, a quota shorter than the
// window of the rate policy it bounds, a burst smaller than max_cost) are
// all reported at once, each naming the file, line, column and path:
//
//	policies.yaml:14:12: policies[1].burst: 5 is smaller than max_cost 8: the largest request could never be admitted
//
// A file loads whole or is refused: one of more than MaxFileSize bytes
// (or that never ends), or of more than MaxNodes YAML nodes, counted with
// its aliases expanded (room for the export of several hundred thousand
// tenants), or with an alias that contains itself, is refused before any
// of it is decoded, with an error naming the bound.
// Errors show a configured URL without its password (see RedactURL).
//
// Durations are Go durations or days (90s, 1m, 24h, 7d); amounts may use
// underscores and k/M/G suffixes (100_000, 100k); sizes take KiB/MiB or
// KB/MB suffixes. API keys are stored only as SHA-256 hashes in the form
// "sha256:<64 hex digits>" that `admitctl hash-key` prints.
//
// The prices section (see [Prices]) prices models for cost policies: the
// built-in list prices by default, with the file's own entries over them,
// fine-tuned "ft:" models priced as their base, and a model without a
// price either charged a fallback price or refused, never free:
//
//	prices:
//	  unpriced: fallback
//	  fallback: {input: 10, output: 30}
//	  models:
//	    llama-3.3-70b: {input: 0.59, output: 0.79}
//
// The models section (see [Model]) says what to reserve for the answer
// of a request that sets no max_tokens, per model:
//
//	models:
//	  gpt-4o-mini: {default_max_tokens: 256}
//
// The stores section declares the stores the policies name: those that
// guard an external provider's limits (see [Upstream]), and those kept
// on a Redis server (see [Redis]):
//
//	stores:
//	  openai: {kind: upstream, group_by: model}
//	  redis: {kind: redis, address_env: SLUICE_REDIS_URL}
//
// The classes section (see [Classes]) names the priority classes whose
// shares a policy's queue reserves (queue.shares), and where a request's
// class comes from: the key's entry, the route, the tenant's plan, a
// client header only for the keys the operator lists ([File.Priority]).
//
// The package is the schema and its decoder: it yields plain data and
// strict errors, imports only the core (and apikey, whose Hash and
// Identity the identity section's key table holds), and neither watches
// files nor serves anything. The packages that act on a section read it
// from a File (httpadmitfile.Options, shadow.FileLogger,
// shadow.FileObserver, metrics.Expose with the metrics section); package
// reload follows the file on disk. In a service using the library, one
// call does it all, Redis stores included (httpadmitfile.FromFile,
// grpcadmitfile.FromFile); piece by piece, a few calls:
//
//	log := shadow.FileLogger(os.Stderr, &f.Logging)
//	prom, _ := metrics.NewPrometheus(f.Metrics.CardinalityLimit)
//	mo, _ := metrics.New(metrics.WithMeterProvider(prom.Provider), metrics.WithTopK(f.Metrics.TopTenants))
//	obs, _ := shadow.FileObserver(&f.Logging, log, mo)
//	ctl, _ := admission.New(f.Config, admission.WithObserver(obs))
//	mo.Watch(ctl)
//	mw, _ := httpadmit.New(ctl, httpadmitfile.Options(f)...)
//	e := metrics.Exposure{Enabled: f.Metrics.Enabled, Path: f.Metrics.Path, Listen: f.Metrics.Listen}
//	h, ml, _ := metrics.Expose(e, prom.Handler, mw.Handler(mux))
//	w, _ := reload.Watch(path, httpadmitfile.Middleware{Middleware: mw}, reload.OnReload(func(r reload.Event) { mo.CountReload(r.Err) }))
//
// A reload.Watcher reloads the file when it changes and on SIGHUP: a
// file that does not validate is refused and reported, and the old
// configuration keeps serving. A reload reaches the program through one
// reload.Subscriber, whose Apply installs the whole file as one
// snapshot, by one swap.
package config

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/limits"
)

// File is a decoded, validated policy file.
type File struct {
	// Source is the file name used in error messages.
	Source string
	// Config holds the policies and plans, ready for admission.New or
	// Controller.SetConfig.
	Config admission.Config
	// Policies holds what the file says about each policy beyond the
	// admission.Policy, indexed like Config.Policies.
	Policies []PolicyInfo
	// Identity says how HTTP callers are identified.
	Identity Identity
	// HTTP holds the middleware settings.
	HTTP HTTP
	// Metrics holds the metrics settings.
	Metrics Metrics
	// Logging holds the logging settings.
	Logging Logging
	// Prices holds the model prices of cost policies.
	Prices Prices
	// Models holds the models section: the output reserved for a request
	// that sets no output limit, by model name prefix as written (see
	// Model); nil when the file has none.
	Models map[string]Model
	// Upstreams holds the stores section's entries (all of kind
	// upstream), by store name; nil when the file declares none.
	Upstreams map[string]Upstream
	// Redis holds the stores section's entries of kind redis, by store
	// name; nil when the file declares none.
	Redis map[string]Redis
	// Classes holds the classes section: the priority classes and where
	// a request's class comes from (see Priority).
	Classes Classes
	// Budgets holds the budgets section: where quota warnings go.
	Budgets Budgets
	// Directory says where tenants, plans and API keys live.
	Directory Directory
	// Tools holds the tools section: the MCP tools of the unnamed MCP
	// server, their costs and which of them write (see
	// limits.MCPOperation).
	Tools Tools
	// MCPServers holds the mcp_servers section, by server name; nil
	// when the file declares none.
	MCPServers map[string]MCPServer
	// Deployments holds the deployments section: the Azure OpenAI
	// deployments served and the model each runs (see Deployments).
	Deployments Deployments
}

// PolicyInfo is the part of a policy's entry that is not an admission
// field.
type PolicyInfo struct {
	// Description is the entry's free text.
	Description string
	// Routes and Methods are the HTTP match of the policy, expanded into
	// Match.Operations as "METHOD route".
	Routes  []string
	Methods []string // empty: every method
	// Servers, Tools and MCPMethods are the MCP match of the policy
	// (match.servers, match.tools, match.mcp_methods), expanded into
	// Match.Operations (see limits.MCPOperation).
	Servers    []string
	Tools      []string
	MCPMethods []string
	// Bounds names the rate policy a quota is meant to bound.
	Bounds string
	// Warn lists a quota's warning thresholds in percent of its limit,
	// ascending (see Budgets); Soft marks a quota that never refuses: it
	// runs in shadow mode and Warn holds 100.
	Warn []int
	Soft bool
	// Budget marks a quota whose refusal is final for its partition (a
	// session's budget of steps, tokens or cost): a program answers it
	// as a refusal not to retry, naming the budget (llmproxy: 403 with
	// x-should-retry: false and no Retry-After) rather than as a limit
	// to wait for.
	Budget bool
}

// Identity is the identity section.
type Identity struct {
	// KeyHeaders are the headers carrying API keys (default Authorization
	// with the Bearer scheme, then X-API-Key).
	KeyHeaders []string
	// TrustedProxies are the proxies whose forwarding header is believed.
	TrustedProxies []netip.Prefix
	// ClientIPHeader is X-Forwarded-For (default) or Forwarded.
	ClientIPHeader string
	// AnonymousTenant is the tenant of callers without credentials.
	AnonymousTenant string
	// RequireKey refuses callers without credentials with 401.
	RequireKey bool
	// Keys maps the tenants' hashed API keys to what they stand for.
	Keys map[apikey.Hash]apikey.Identity
	// FailedAuth throttles failed authentication per client address, for
	// a gateway that applies it (llmproxy does).
	FailedAuth FailedAuth
	// Session says where a request's agent session id comes from.
	Session Session
}

// FailedAuth is the identity.failed_auth section: each client address
// (through trusted proxies, IPv6 grouped by /64) may present a missing or
// unknown key Limit times per Per; past that its requests get 429 before
// their key is looked at, until the allowance refills. MaxAddresses
// bounds the addresses tracked; while they all still have failures to
// forgive, a new address is not tracked, so no address is ever refused
// for the failures of others.
type FailedAuth struct {
	// Enabled turns the throttle on (default true).
	Enabled bool
	// Limit is the failed attempts allowed per Per (default 20).
	Limit int64
	// Per is the refill period (default 1m).
	Per time.Duration
	// MaxAddresses bounds the addresses tracked (default 65536).
	MaxAddresses int
}

// HTTP is the http section: middleware settings.
type HTTP struct {
	// Exempt lists paths never limited: exact paths, or prefixes ending in
	// "/*". Default /healthz, /readyz, /livez, /metrics.
	Exempt []string
	// MaxBody is the largest request body accepted, in bytes; 0 means no
	// limit. Default 1 MiB.
	MaxBody int64
	// BodyTimeout bounds the time a client takes to send its request
	// body (default 1m); 0 means no limit.
	BodyTimeout time.Duration
	// QuotaStatus is the status of an exhausted quota: 403 (default) or 429.
	QuotaStatus int
	// UploadMinRate is the slowest a long upload (llmproxy's batch input
	// files) may arrive, in bytes a second, measured over each
	// UploadGrace from the upload's start: a span that brings less than
	// UploadMinRate × UploadGrace cuts it. 0 leaves the program's
	// default (llmproxy: 1 MiB/s over 10s).
	UploadMinRate int64
	// UploadGrace is the span UploadMinRate is measured over; 0 leaves
	// the program's default.
	UploadGrace time.Duration
	// MaxUploads bounds the long uploads read at once, and
	// MaxUploadsPerTenant those of one tenant, so that no tenant holds
	// another's; 0 leaves the program's defaults (llmproxy: 4 and 1).
	MaxUploads, MaxUploadsPerTenant int
	// ShadowHeader adds the Sluice-Would-Reject header naming the shadow
	// policies that would have rejected an admitted request.
	ShadowHeader bool
}

// Metrics is the metrics section. A service using the library applies it
// with metrics.Expose; llmproxy applies it itself.
type Metrics struct {
	// Enabled turns the exporter on (default true).
	Enabled bool
	// Listen is the address of a separate metrics listener. Empty
	// leaves the choice to the program: metrics.Expose serves Path on the
	// application's own listener; llmproxy never does, and listens on its
	// own operator default.
	Listen string
	// Path is where Prometheus scrapes (default /metrics).
	Path string
	// TopTenants is how many heavy-hitter tenants get their own label
	// value; the rest are "__other__" (default 20).
	TopTenants int
	// CardinalityLimit is the SDK's hard cap of series per instrument
	// (default 2000).
	CardinalityLimit int
}

// Logging is the logging section, which shadow.FileLogger and
// shadow.FileObserver apply.
type Logging struct {
	// Level is the minimum level logged (default info).
	Level slog.Level
	// Format is "json" (default) or "text".
	Format string
	// DecisionSample is the fraction of admitted decisions to log
	// (default 0; else from 1e-9 to 1): one in round(1/DecisionSample),
	// within MaxPerSecond.
	DecisionSample float64
	// Rejections logs every rejection and would-reject (default true),
	// within MaxPerSecond.
	Rejections bool
	// MaxPerSecond bounds decision log lines per second (default 100).
	MaxPerSecond int
	// HashSessions writes a request's session in the decision log and
	// the request log as apikey.HashSession's pseudonym rather than as
	// the id (logging.sessions: hash; default raw).
	HashSessions bool
}

// DefaultExempt is the default of http.exempt.
var DefaultExempt = []string{"/healthz", "/readyz", "/livez", "/metrics"}

// Defaults of the http and identity sections, which package httpadmit
// shares.
const (
	DefaultMaxBody         = 1 << 20     // http.max_body
	DefaultBodyTimeout     = time.Minute // http.body_timeout
	DefaultAnonymousTenant = "anonymous" // identity.anonymous_tenant
)

func defaults() *File {
	return &File{
		Identity:  Identity{AnonymousTenant: DefaultAnonymousTenant, ClientIPHeader: "X-Forwarded-For"},
		HTTP:      HTTP{Exempt: DefaultExempt, MaxBody: DefaultMaxBody, QuotaStatus: 403},
		Metrics:   Metrics{Enabled: true, Path: "/metrics", TopTenants: 20, CardinalityLimit: 2000},
		Logging:   Logging{Level: slog.LevelInfo, Format: "json", Rejections: true, MaxPerSecond: 100},
		Prices:    Prices{Builtin: true},
		Directory: Directory{Source: DirectoryFile},
	}
}

// edgeDefaults sets the defaults of the identity and http settings that
// bound hostile clients: the failed-authentication throttle and the body
// timeout.
func edgeDefaults(f *File) *File {
	f.Identity.FailedAuth = FailedAuth{Enabled: true, Limit: 20, Per: time.Minute, MaxAddresses: 1 << 16}
	f.HTTP.BodyTimeout = DefaultBodyTimeout
	f.Identity.Session = defaultSession()
	return f
}

// Stores returns the store names the policies refer to, other than the
// in-memory store, in order of first use, the stores the stores section
// declares (Upstreams) among them. The program registers each with
// admission.WithStore; the file cannot.
func (f *File) Stores() []string {
	var out []string
	for _, p := range f.Config.Policies {
		if p.Store == "" || p.Store == "memory" || slices.Contains(out, p.Store) {
			continue
		}
		out = append(out, p.Store)
	}
	return out
}

// Load reads and parses the policy file at path (see ReadFile).
func Load(path string) (*File, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Row is one line of the effective-policy table: a policy's limits as a
// plan (or a tenant's own overrides) makes them.
type Row struct {
	// Plan is the plan name, "-" for the policy's own limits, or
	// "tenant:<id>" for a tenant with its own overrides.
	Plan      string
	Policy    string           // policy name
	Mode      limits.Mode      // enforce, shadow or off
	Algorithm limits.Algorithm // the policy's algorithm
	Unit      limits.Unit      // what it counts
	Key       string           // key parts joined by "+", or "global"
	Limit     int64            // the effective limit
	Burst     int64            // the effective burst (token buckets)
	Per       time.Duration    // the effective period or window
	Period    limits.Period    // a quota's period kind
	Queue     int              // queue size, 0 for none
}

// Effective returns the limits every plan gives every policy, the policies'
// own first, then each plan in name order, then tenants with overrides.
func (f *File) Effective() []Row {
	var rows []Row
	pols := f.Config.Policies
	add := func(plan string, overrides ...map[string]limits.Override) {
		for i := range pols {
			p := &pols[i]
			r := Row{
				Plan: plan, Policy: p.Name, Mode: p.Mode, Algorithm: p.Algorithm, Unit: p.Unit,
				Limit: p.Limit, Burst: p.Burst, Per: p.Per, Period: p.Period, Queue: p.Queue.Size,
			}
			if r.Unit == "" {
				r.Unit = limits.UnitRequests
			}
			if r.Burst == 0 && p.Algorithm == limits.TokenBucket {
				r.Burst = r.Limit
			}
			r.Key = keyString(p.Key)
			for _, os := range overrides {
				o, ok := os[p.Name]
				if !ok {
					continue
				}
				follows := r.Burst == r.Limit
				if o.Limit > 0 {
					r.Limit = o.Limit
					if follows && p.Algorithm == limits.TokenBucket {
						r.Burst = o.Limit
					}
				}
				if o.Burst > 0 {
					r.Burst = o.Burst
				}
				if o.Per > 0 {
					r.Per = o.Per
				}
			}
			rows = append(rows, r)
		}
	}
	pl := &f.Config.Plans
	add("-")
	names := make([]string, 0, len(pl.Plans))
	for n := range pl.Plans {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		add(n, pl.Plans[n])
	}
	tenants := make([]string, 0, len(pl.Tenants))
	for t, tp := range pl.Tenants {
		if len(tp.Overrides) > 0 {
			tenants = append(tenants, t)
		}
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		tp := pl.Tenants[t]
		plan := tp.Plan
		if plan == "" {
			plan = pl.Default
		}
		add(fmt.Sprintf("tenant:%s", t), pl.Plans[plan], tp.Overrides)
	}
	return rows
}

func keyString(ks []limits.KeyPart) string {
	if len(ks) == 0 {
		return "global"
	}
	s := ""
	for i, k := range ks {
		if i > 0 {
			s += "+"
		}
		s += k.String()
	}
	return s
}
