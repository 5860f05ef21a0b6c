// Package httpadmit puts an admission.Controller in front of net/http
// handlers.
//
// For each request the middleware finds the operation (the route pattern
// and method, as "POST /v1/chat/completions"), identifies the caller (the
// WithIdentity function's identity; without one, an identity placed in the
// context by the application's own authentication middleware, else an API
// key looked up by its SHA-256 hash, else the anonymous tenant; the client
// address only through trusted proxies, IPv6 grouped by /64) and asks the
// controller for admission. A refused request gets 429 (its own rate,
// concurrency or queue limit), 403 (an exhausted quota; 429 if configured)
// or 503 (limit store unavailable, partition table full) with Retry-After
// in whole seconds rounded up, the IETF RateLimit-Policy and RateLimit
// fields, X-RateLimit-Limit/Remaining/Reset and an RFC 9457 problem+json
// body whose type is stable per reason. An unknown API key gets 401 and
// never a partition. A body is bounded before anything reads it, in size
// (WithMaxBody, 1 MiB by default) and in time (WithBodyTimeout, a minute
// by default), and a refusal is answered at once with the connection
// closed rather than the body drained. Estimates from a WithRequest
// function are checked (amounts.Bound): negative is a 400 (problem type
// problemInvalidCost), above limits.MaxAmount saturated. Admitted
// responses carry the same limit headers; the ticket is settled when the
// handler returns, panics or gives up on a departed client.
//
// A service with its own authentication passes a WithIdentity function
// (the identity it validated); WithRejectionHandler writes its own answer
// to a rejection, with the default answer's headers and status from one
// call (SetRejectionHeaders); WithRetryAfterMs adds the precise wait
// (Retry-After-Ms) beside Retry-After's whole seconds; an admitted
// request that waited in a queue gets a Server-Timing entry
// "queue;dur=<ms>" (WithServerTiming). A request whose
// X-Stainless-Retry-Count (the OpenAI and Anthropic SDKs' count of a
// request's retries) is 1 or more is a retry (admission.Request.Retry):
// it takes the place a full queue held for its refused try, whose answer
// said so (X-Retry-Held: true).
//
// # What the limit headers mean
//
// Every enforced policy the request passed (or the refusing one, on a
// rejection) appears in RateLimit-Policy ("name";q=<limit>;w=<window>)
// and RateLimit ("name";r=<remaining>;t=<reset>). Shadow policies never
// appear. The figures follow one rule:
//
//   - r is what the partition has left now, in the policy's unit.
//   - t is the number of seconds, rounded up, until the partition is fully
//     available again, and never more than the policy's window w: the
//     window's end for a fixed window; the period's end for a quota; the
//     time a token bucket takes to refill to its burst (w is the time it
//     takes from empty; a bucket in debt reports w); the time the newest
//     admission leaves a sliding log; for a sliding window counter, the
//     time the previous window's weight has decayed, or w while the
//     current window counts anything (the counter remembers it into the
//     next window, but the policy promises one window).
//   - A concurrency limit has no window (qu="concurrent-requests", no w):
//     r is the room left in flight, and t is 0 while there is room and the
//     policy's retry hint (Policy.RetryHint, 1 s by default) once it is at
//     capacity: "r=0;t=0", which reads "retry now", is never written.
//   - X-RateLimit-Limit, -Remaining and -Reset are q, r and t of one
//     policy, always the same one for the three: the one
//     with the least room left as a fraction of its limit; a concurrency
//     limit only once it is at capacity, or when it is the only one; equal
//     fractions go to the longer reset. A rejection carries the refusing
//     policy's figures only, so the trio is that policy's.
//   - Retry-After is the wait of the refused request itself, in whole
//     seconds rounded up and at least 1, absent when waiting cannot help
//     (limits.Never). It can differ from t: a small request may fit
//     long before the partition is full again, and a request refused by a
//     bucket in debt or a sliding window counter may have to wait past t,
//     which stops at w. With WithRetryAfterMs, Retry-After-Ms carries the
//     same wait in milliseconds.
//
// # Server settings
//
// The middleware bounds what reaches it; the http.Server in front bounds
// the rest, and a service author sets it: ReadHeaderTimeout (a client
// sending its headers slowly holds a connection for nothing),
// IdleTimeout, MaxHeaderBytes (net/http allows a megabyte), no
// ReadTimeout or WriteTimeout shorter than a stream (the body's time is
// WithBodyTimeout's, the writes' a per-write deadline), and the Handler
// wrapped in StrictFraming.
//
// A request smuggled past a proxy in front of a service hides in the
// framing of a body: the proxy and the service disagree on where one
// request ends and the next begins. RFC 9112 §6.1 requires a server that
// receives both Transfer-Encoding and Content-Length, or a
// Transfer-Encoding in an HTTP/1.0 message, to close the connection after
// answering. Go's net/http (1.26) does part of it itself: it refuses with
// 501, and closes the connection, a Transfer-Encoding other than one
// "chunked" (several codings, several fields, "identity"), and with 400
// differing Content-Length fields. It does not close the rest: a chunked
// request that also declares a Content-Length is read as chunked with the
// Content-Length removed, and an HTTP/1.0 request's Transfer-Encoding is
// removed and ignored, so a handler cannot tell either from a clean
// request, and the connection stays open for whatever follows the body.
// The middleware closes it after the answer, on every request the
// middleware sees and, with StrictFraming, on every request of a server.
//
// # Problem types
//
// Every answer the middleware writes itself is problem+json with a type
// that is stable, so that a client may switch on it:
// urn:sluice:problem:<reason> for a rejection (rate-limited,
// concurrency-limited, queue-full, queue-timeout, quota-exceeded,
// store-unavailable, overloaded; rejected otherwise), and
// urn:sluice:problem:unauthenticated
// (401), body-too-large (413), body-timeout (408), invalid-cost and
// bad-request (400), unavailable (503).
//
// # One snapshot per request
//
// The middleware decides each request by one Snapshot: the policy set,
// identity settings, key set and settings of one configuration, read once
// when the request arrives (see Snapshot). The handler's request context
// holds one value the middleware placed, allocated once with the limit
// headers' values and the handler's request: the identity the request
// was admitted as (IdentityFrom), the ticket with WithTicketInContext
// (TicketFrom), and the snapshot whose settings SetRejectionHeaders
// reads in a rejection handler. The header rendering it shares
// with the LLM gateway and the Envoy service lives in
// internal/limitheaders, the body deadline in internal/bodywatch.
//
// # Without a policy file
//
// The package takes plain values: New takes Options, Apply and Compile
// an admission.Config and Options, and API keys are apikey values. It
// links neither the YAML decoder nor the file watcher (TestNoFileDeps):
// a program that reads a policy file uses httpadmitfile (Options(f), and
// its Middleware, whose Apply takes the file) and reload to follow it.
package httpadmit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/internal/amounts"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/bodywatch"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

// An Option sets one setting of a Middleware's Snapshot.
type Option func(*Snapshot)

// A Snapshot is everything a Middleware decides a request with, derived
// from one configuration: the controller's policy set
// (admission.PolicySet), the identity settings with their key table, and
// the HTTP settings. It is immutable; a reload, or a tenant directory's
// change of one tenant or one key, makes another (Compile, WithTenant,
// WithKey), installed whole by one atomic swap (Install). Each request
// reads the snapshot once, when the middleware sees it, and is
// identified, admitted, answered and settled by it alone: never by the
// policies of one file and the key table of another.
type Snapshot struct {
	policies     *admission.PolicySet // nil: the controller's own
	identity     IdentityConfig
	keyLookup    KeyLookup // WithKeyLookup's, kept over Apply
	exempt       []string
	skipper      func(*http.Request) bool
	maxBody      int64
	bodyTimeout  time.Duration
	quotaStatus  int
	shadowHeader bool
	operation    func(*http.Request) string
	mux          *http.ServeMux
	enrich       func(*http.Request, *admission.Request) error
	noWait       bool
	ticketCtx    bool
	logger       *slog.Logger
	identify     func(*http.Request) (Identity, error)
	onRejected   func(http.ResponseWriter, *http.Request, *admission.Rejection)
	retryAfterMs bool
	serverTiming bool
	requestLog   func(*admission.Request, time.Time, admission.Usage, time.Duration)
	// sessions is set while a policy is keyed by session: only then is
	// an invalid session header refused (see session).
	sessions bool
}

// WithIdentityConfig sets how callers are identified (see IdentityConfig).
// The default admits every caller as the anonymous tenant, with the TCP
// peer as its address.
func WithIdentityConfig(ic IdentityConfig) Option {
	return func(o *Snapshot) { o.identity = ic }
}

// WithKeyLookup makes l the table API keys are looked up in, instead of
// the identity config's Keys: a KeySet kept current by a tenant directory.
// Unlike the identity config, which Apply replaces with a reloaded file's,
// it stays for the middleware's life.
func WithKeyLookup(l KeyLookup) Option {
	return func(o *Snapshot) { o.keyLookup = l }
}

// WithExempt lists paths that are never limited: exact paths, or prefixes
// written with a trailing "/*". The default is /healthz, /readyz, /livez
// and /metrics; WithExempt replaces it.
func WithExempt(paths ...string) Option {
	return func(o *Snapshot) { o.exempt = append([]string(nil), paths...) }
}

// WithSkipper sets a function that exempts a request when it returns true.
func WithSkipper(f func(*http.Request) bool) Option { return func(o *Snapshot) { o.skipper = f } }

// WithMaxBody refuses bodies larger than n bytes with 413, before anything
// reads them: a declared Content-Length over the limit is refused at once,
// and the body is wrapped in http.MaxBytesReader. The default is 1 MiB;
// 0 means no limit.
func WithMaxBody(n int64) Option { return func(o *Snapshot) { o.maxBody = n } }

// WithBodyTimeout bounds the time a client takes to send its request
// body, from when the middleware sees the request: a
// slower client gets 408 if the body is read before admission (by the
// WithRequest function), read errors in the handler otherwise. The
// default is a minute; 0 means no limit.
func WithBodyTimeout(d time.Duration) Option { return func(o *Snapshot) { o.bodyTimeout = d } }

// Defaults of the body options.
const (
	// defaultMaxBody is the body limit of a middleware without WithMaxBody.
	defaultMaxBody = 1 << 20
	// defaultBodyTimeout is the body timeout of a middleware without
	// WithBodyTimeout.
	defaultBodyTimeout = time.Minute
)

// WithQuotaStatus sets the status of an exhausted quota: 403 (the default)
// or 429.
func WithQuotaStatus(code int) Option { return func(o *Snapshot) { o.quotaStatus = code } }

// WithShadowHeader adds, on admitted responses, the Sluice-Would-Reject
// header naming the shadow policies that would have rejected the request.
// Off by default: it tells callers about limits not yet enforced.
func WithShadowHeader(on bool) Option { return func(o *Snapshot) { o.shadowHeader = on } }

// WithOperation sets the function naming a request's operation, replacing
// the route-pattern default.
func WithOperation(f func(*http.Request) string) Option {
	return func(o *Snapshot) { o.operation = f }
}

// WithRoutes names operations after the pattern mux would route the
// request to, for a middleware wrapped around the whole mux (where
// Request.Pattern is not yet set). A request that matches no route has the
// empty operation, which only unrestricted policies match.
func WithRoutes(mux *http.ServeMux) Option { return func(o *Snapshot) { o.mux = mux } }

// WithRequest sets a function that completes the admission request before
// it is evaluated: the model, the estimated tokens or cost, the priority.
// An error it returns answers 400 with its text, so it must not reveal
// internals.
func WithRequest(f func(*http.Request, *admission.Request) error) Option {
	return func(o *Snapshot) { o.enrich = f }
}

// WithoutQueueing rejects at once requests that would have to wait in a
// policy's queue (Controller.TryAdmit).
func WithoutQueueing() Option { return func(o *Snapshot) { o.noWait = true } }

// WithRequestLog has the middleware report every request the policies
// decided, once its fate is known: a refused one at once, an admitted one
// when the handler returns, with the time it arrived and, for an admitted
// one, how long it held its permits. The usage reported is the zero Usage
// (the estimates): a handler that settles with the actual usage
// (WithTicketInContext) knows more than the middleware. Pass a
// requestlog.Writer's Log to write the request log admitctl replay reads.
func WithRequestLog(log func(r *admission.Request, arrived time.Time, actual admission.Usage, work time.Duration)) Option {
	return func(o *Snapshot) { o.requestLog = log }
}

// WithTicketInContext places the ticket in the request context for the
// handler (see TicketFrom), so it can Settle with the actual usage or
// Charge while it streams. It costs no allocation: the ticket shares the
// one context value the middleware places (with the identity,
// IdentityFrom).
func WithTicketInContext() Option { return func(o *Snapshot) { o.ticketCtx = true } }

// WithLogger sets the logger of unexpected admission errors; the default
// is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *Snapshot) { o.logger = l } }

// WithIdentity sets the function that identifies callers, for a service
// with its own authentication (a session, a JWT, mTLS), like echo's
// IdentifierExtractor. It replaces the identity rules of the
// IdentityConfig (an identity in the context, an API key, the anonymous
// tenant); the client address still comes from the IdentityConfig (the
// TCP peer, or the forwarding header of a trusted proxy).
//
// The function may set every field of Identity: Tenant (the partition key
// of per-tenant policies, and the plan's tenant), KeyID (a short id of the
// credential, never the credential) and User. Each must come from
// credentials the function has validated (a verified signature, a session
// looked up server side), never from a header or parameter the client
// chooses freely: whoever can pick their tenant can pick someone else's
// allowance. An error answers 401, as an unknown API key does, without a
// partition and without the error's text (see ErrUnauthenticated).
func WithIdentity(f func(*http.Request) (Identity, error)) Option {
	return func(o *Snapshot) { o.identify = f }
}

// WithRejectionHandler sets the function that answers a rejected request,
// like ASP.NET's OnRejected: it writes the status, headers and body from
// the typed rejection, whose Reason, Policy, RetryAfter and Status
// figures are the middleware's. One call, SetRejectionHeaders(w, r, rej),
// sets the headers the default answer carries (Retry-After,
// Retry-After-Ms with WithRetryAfterMs, the limit fields) and returns its
// status (429, the WithQuotaStatus status, 503), by the settings of the
// snapshot that decided r; the function then writes that status (or its
// own) and its body. Only "Connection: close" is set before it is called,
// when the request body was not read to its end; r's context holds the
// identity the request was refused as (IdentityFrom). Without it, or to
// fall back, the answer is the default one (Middleware.WriteRejection):
// those headers and problem+json. The function must not reveal
// internals.
func WithRejectionHandler(f func(w http.ResponseWriter, r *http.Request, rej *admission.Rejection)) Option {
	return func(o *Snapshot) { o.onRejected = f }
}

// WithRetryAfterMs adds to rejections the precise wait beside
// Retry-After's whole seconds: the Retry-After-Ms header (milliseconds,
// rounded up, as OpenAI-style clients read it) and the problem's
// retry_after_ms member. A wait of 0.2 s then reads "Retry-After: 1" and
// "Retry-After-Ms: 200". Off by default.
func WithRetryAfterMs(on bool) Option { return func(o *Snapshot) { o.retryAfterMs = on } }

// WithServerTiming sets whether an admitted response that waited in a
// queue carries the wait in a Server-Timing entry ("queue;dur=1020", in
// milliseconds), which browsers' developer tools and
// tracing agents show. On by default: the wait is the caller's own.
func WithServerTiming(on bool) Option { return func(o *Snapshot) { o.serverTiming = on } }

// A Middleware admits HTTP requests through a Controller. It is safe for
// concurrent use; a policy file's settings replace its own while it
// serves (Apply), requests in flight finishing with those they started
// with.
type Middleware struct {
	ctl *admission.Controller
	cur atomic.Pointer[Snapshot]
	mu  sync.Mutex // serialises installs and the changes built on the snapshot in force
	ops opCache
}

// maxStatuses is the number of policy statuses read on the stack.
const maxStatuses = 8

// New returns a Middleware admitting requests through ctl.
func New(ctl *admission.Controller, opts ...Option) (*Middleware, error) {
	if ctl == nil {
		return nil, errors.New("httpadmit: nil controller")
	}
	m := &Middleware{ctl: ctl}
	o := &Snapshot{
		exempt:       []string{"/healthz", "/readyz", "/livez", "/metrics"},
		maxBody:      defaultMaxBody,
		bodyTimeout:  defaultBodyTimeout,
		quotaStatus:  http.StatusForbidden,
		logger:       slog.Default(),
		serverTiming: true,
	}
	if err := build(o, opts); err != nil {
		return nil, err
	}
	o.sessions = keyedBySession(ctl.Policies())
	m.cur.Store(o)
	return m, nil
}

// keyedBySession reports whether a policy of ps is keyed by session.
func keyedBySession(ps []admission.Policy) bool {
	return slices.ContainsFunc(ps, func(p admission.Policy) bool { return p.KeyedBySession() })
}

// Apply installs the policies and plans of cfg with opts applied over
// the middleware's own options (a policy file's: httpadmitfile.Options),
// as one snapshot: Compile, then Install, with no other change in
// between. A configuration that does not compile changes nothing.
func (m *Middleware) Apply(cfg admission.Config, opts ...Option) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.Compile(cfg, opts...)
	if err != nil {
		return err
	}
	return m.install(s)
}

// Compile builds, without installing it, the snapshot of a
// configuration: cfg's policies and plans compiled by the controller,
// and opts (a policy file's http and identity sections:
// httpadmitfile.Options) over the middleware's own options.
func (m *Middleware) Compile(cfg admission.Config, opts ...Option) (*Snapshot, error) {
	s := *m.cur.Load()
	if err := build(&s, opts); err != nil {
		return nil, err
	}
	set, err := m.ctl.Compile(cfg)
	if err != nil {
		return nil, err
	}
	s.policies, s.sessions = set, keyedBySession(cfg.Policies)
	return &s, nil
}

// Install makes s, from Compile, WithTenant or WithKey, the snapshot
// requests are decided with, in one atomic swap (its policy set becomes
// the controller's too).
func (m *Middleware) Install(s *Snapshot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.install(s)
}

// install is Install; m.mu is held.
func (m *Middleware) install(s *Snapshot) error {
	if s.policies != nil {
		if err := m.ctl.Install(s.policies); err != nil {
			return err
		}
	}
	m.cur.Store(s)
	return nil
}

// Snapshot returns the snapshot in force.
func (m *Middleware) Snapshot() *Snapshot { return m.cur.Load() }

// SetTenant installs the current snapshot with one tenant's plan and
// overrides changed (Snapshot.WithTenant), for a tenant directory.
func (m *Middleware) SetTenant(tenant string, tp *limits.TenantPlan) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.cur.Load().WithTenant(m.ctl, tenant, tp)
	if err != nil {
		return err
	}
	return m.install(s)
}

// SetKey installs the current snapshot with one API key added, replaced
// or (id nil) revoked (Snapshot.WithKey), for a tenant directory.
func (m *Middleware) SetKey(h apikey.Hash, id *Identity) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.cur.Load().WithKey(h, id)
	if err != nil {
		return err
	}
	return m.install(s)
}

// WithTenant returns s with one tenant's plan and overrides replaced (tp
// nil removes the tenant), sharing everything else with s
// (admission.PolicySet.WithTenant); ctl is the middleware's controller,
// whose installed set a snapshot without a set of its own stands for.
func (s *Snapshot) WithTenant(ctl *admission.Controller, tenant string, tp *limits.TenantPlan) (*Snapshot, error) {
	set := s.policies
	if set == nil {
		var err error
		if set, err = ctl.Compile(admission.Config{Policies: ctl.Policies()}); err != nil {
			return nil, err
		}
	}
	set, err := set.WithTenant(tenant, tp)
	if err != nil {
		return nil, err
	}
	next := *s
	next.policies = set
	return &next, nil
}

// WithKey returns s with one API key added or replaced (id nil revokes
// it), copying one shard of its key set. A snapshot whose keys are
// looked up elsewhere (WithKeyLookup) refuses.
func (s *Snapshot) WithKey(h apikey.Hash, id *Identity) (*Snapshot, error) {
	ks, ok := s.identity.KeySource.(*KeySet)
	if !ok || s.keyLookup != nil {
		return nil, errors.New("httpadmit: the API keys are looked up in the WithKeyLookup table")
	}
	next := *s
	if id == nil {
		next.identity.KeySource = ks.without(h)
	} else {
		next.identity.KeySource = ks.with(h, *id)
	}
	return &next, nil
}

// Policies returns the policy set of s: nil when s was not compiled from
// a file (the controller's installed set decides).
func (s *Snapshot) Policies() *admission.PolicySet { return s.policies }

// Identity returns the identity settings of s; they must not be
// modified.
func (s *Snapshot) Identity() *IdentityConfig { return &s.identity }

// build applies opts to o and checks the result.
func build(o *Snapshot, opts []Option) error {
	for _, opt := range opts {
		opt(o)
	}
	if o.quotaStatus == 0 {
		o.quotaStatus = http.StatusForbidden
	}
	if o.quotaStatus != http.StatusForbidden && o.quotaStatus != http.StatusTooManyRequests {
		return errors.New("httpadmit: quota status must be 403 or 429")
	}
	if o.maxBody < 0 {
		return errors.New("httpadmit: negative body limit")
	}
	if o.bodyTimeout < 0 {
		return errors.New("httpadmit: negative body timeout")
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	switch {
	case o.identity.ClientIPHeader == "", strings.EqualFold(o.identity.ClientIPHeader, "X-Forwarded-For"):
		o.identity.ClientIPHeader = "X-Forwarded-For"
	case strings.EqualFold(o.identity.ClientIPHeader, "Forwarded"):
		o.identity.ClientIPHeader = "Forwarded"
	default:
		// Reading X-Forwarded-For in its place would believe what a
		// client sent through a proxy that sets only the named header.
		return fmt.Errorf("httpadmit: IdentityConfig.ClientIPHeader %.40q is not X-Forwarded-For or Forwarded", o.identity.ClientIPHeader)
	}
	o.identity = o.identity.normalize()
	switch {
	case o.keyLookup != nil:
		o.identity.KeySource = o.keyLookup
	case o.identity.KeySource == nil:
		// Looked up in a key set, which a directory changes one key at a
		// time (WithKey); the table itself is no longer read.
		o.identity.KeySource, o.identity.Keys = newKeySet(o.identity.Keys), nil
	}
	return nil
}

// Handler returns next behind the middleware. Every request it sees
// gets CloseSuspectFraming: one whose body a proxy in front could frame
// differently is answered with the connection closed.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return &handler{m: m, next: next}
}

type handler struct {
	m    *Middleware
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	o := m.cur.Load()
	bodywatch.CloseSuspectFraming(w.Header(), r)
	if o.Exempt(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	var arrived time.Time
	log := o.requestLog
	if log != nil {
		arrived = time.Now()
	}
	// The admitted request's one allocation of the middleware's own (its
	// context value, the limit headers' values and the handler's
	// request), made once it is admitted.
	var st *served
	req, tk, err := m.decide(o, w, r, &st)
	body, _ := r.Body.(*bodywatch.Body)
	if body != nil {
		// What the handler leaves of the body is not drained.
		defer body.Abandon()
	}
	if err != nil {
		var rej *admission.Rejection
		if errors.As(err, &rej) {
			if log != nil {
				logRequest(log, req, arrived, time.Time{})
			}
			if o.onRejected != nil {
				// Refused as identified: the rejection handler may read it.
				rs := withState(r.Context(), new(reqState))
				rs.id, rs.hasID = Identity{Tenant: req.Tenant, KeyID: req.KeyID, User: req.User}, true
				o.writeError(w, r, err, rs)
				return
			}
		}
		o.WriteError(w, r, err)
		return
	}
	// Settled when the handler returns, and also while a panic unwinds
	// (the panic goes on after the deferred call). A departed client
	// cancels the request context, which the handler's work observes.
	if log != nil {
		defer logRequest(log, req, arrived, time.Now())
	}
	// Settled in the request's context, for the observers only: the
	// settlement's histograms take its trace as their exemplar.
	defer tk.SettleContext(r.Context(), admission.Usage{})
	// The identity the request was admitted as reaches the handler
	// (IdentityFrom), which never identifies the caller again; the ticket
	// too with WithTicketInContext (TicketFrom).
	st.Context, st.snap = r.Context(), o
	st.id, st.hasID = Identity{Tenant: req.Tenant, KeyID: req.KeyID, User: req.User}, true
	st.tk, st.hasTicket = tk, o.ticketCtx
	st.req = *r.WithContext(&st.reqState)
	h.next.ServeHTTP(w, &st.req)
}

// logRequest reports req to log (WithRequestLog): refused when admitted
// is zero, else admitted at admitted and ended now. req is a copy, so
// that only a middleware with a request log pays for it escaping.
func logRequest(log func(*admission.Request, time.Time, admission.Usage, time.Duration), req admission.Request, arrived, admitted time.Time) {
	var work time.Duration
	if !admitted.IsZero() {
		work = time.Since(admitted)
	}
	log(&req, arrived, admission.Usage{}, work)
}

// Exempt reports whether r bypasses admission: an exempt path or the
// skipper says so. A path with dot or empty segments ("/healthz/../v1/x",
// "/debug//x", encoded or not) is never exempt: routers disagree on what
// it names.
func (o *Snapshot) Exempt(r *http.Request) bool {
	if o.skipper != nil && o.skipper(r) {
		return true
	}
	p := r.URL.Path
	if c := path.Clean(p); p != c && p != c+"/" {
		return false
	}
	for _, e := range o.exempt {
		if prefix, ok := strings.CutSuffix(e, "/*"); ok {
			if strings.HasPrefix(p, prefix) && (len(p) == len(prefix) || p[len(prefix)] == '/') {
				return true
			}
		} else if p == e {
			return true
		}
	}
	return false
}

// decide admits r by the snapshot o, returning the request decided as
// well; into is admit's.
func (m *Middleware) decide(o *Snapshot, w http.ResponseWriter, r *http.Request, into **served) (admission.Request, admission.Ticket, error) {
	if err := o.LimitBody(w, r); err != nil {
		return admission.Request{}, admission.Ticket{}, err
	}
	return m.admitAs(o, w, r, nil, nil, into)
}

// AdmitAs admits r, after s.LimitBody, for an adapter that builds
// requests itself (echoadmit), by s, the snapshot it read when the
// request arrived (Snapshot): caller (nil: the middleware's own) returns
// r's identity, address and operation under s (an error of its own is
// answered 401 and never shown, as WithIdentity's), complete (nil: the
// WithRequest function) adds the amounts, once (its errors and amounts
// checked as the WithRequest function's); the request is decided by the
// policies of s.
func (m *Middleware) AdmitAs(s *Snapshot, w http.ResponseWriter, r *http.Request, caller func() (admission.Request, error), complete func(*admission.Request) error) (admission.Ticket, error) {
	_, tk, err := m.admitAs(s, w, r, caller, complete, nil)
	return tk, err
}

// admitAs is AdmitAs by the snapshot o, returning the request decided as
// well; into is admit's.
func (m *Middleware) admitAs(o *Snapshot, w http.ResponseWriter, r *http.Request, caller func() (admission.Request, error), complete func(*admission.Request) error, into **served) (admission.Request, admission.Ticket, error) {
	req, err := m.caller(o, r, caller)
	switch {
	case err != nil:
		return req, admission.Ticket{}, err
	case complete != nil:
		c := req // escapes: declared here, so that decide's request does not
		if err = complete(&c); err != nil {
			err = requestError(r, err)
		} else {
			err = amounts.Bound(&c)
		}
		req = c
	case o.enrich != nil:
		req, err = enrich(o.enrich, r, req)
	}
	if err != nil {
		return req, admission.Ticket{}, err
	}
	tk, err := m.admit(o, w, r, req, into)
	return req, tk, err
}

// LimitBody applies the body limit and the body timeout to r before
// anything reads its body: it returns ErrBodyTooLarge for a declared
// length over the limit, and otherwise wraps the body in
// http.MaxBytesReader and a read deadline (internal/bodywatch).
func (o *Snapshot) LimitBody(w http.ResponseWriter, r *http.Request) error {
	if limit := o.maxBody; limit > 0 {
		if r.ContentLength > limit {
			return ErrBodyTooLarge
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
	}
	bodywatch.WatchBody(w, r, o.bodyTimeout)
	return nil
}

// admit asks the controller to admit req on behalf of r by the policies
// of o and, once admitted, sets the limit headers on w, their values held
// in *into, allocated for the admitted request, when into is not nil.
func (m *Middleware) admit(o *Snapshot, w http.ResponseWriter, r *http.Request, req admission.Request, into **served) (admission.Ticket, error) {
	req.Policies = o.policies
	var tk admission.Ticket
	var err error
	if o.noWait {
		tk, err = m.ctl.TryAdmit(r.Context(), req)
	} else {
		tk, err = m.ctl.Admit(r.Context(), req)
	}
	if err != nil {
		return tk, err
	}
	var stack [maxStatuses]admission.Status
	sts := limitheaders.Enforced(tk.Statuses(stack[:0]))
	h := w.Header()
	var vals *limitheaders.Values
	if into != nil {
		*into = new(served)
		vals = &(*into).vals
	}
	limitheaders.SetLimitHeadersIn(h, sts, vals)
	if o.serverTiming {
		if d := tk.QueueWait(); d > 0 {
			limitheaders.SetQueueTiming(h, d)
		}
	}
	if o.shadowHeader {
		var names [maxStatuses]string
		limitheaders.SetWouldReject(h, tk.WouldReject(names[:0]))
	}
	return tk, nil
}

// Request returns the admission request for r under the snapshot o:
// identity, client address and operation, completed by the WithRequest
// function, naming the policy set of o (Request.Policies), so that a
// handler admitting it itself decides it by the policies of the
// snapshot that identified it.
func (m *Middleware) Request(o *Snapshot, r *http.Request) (admission.Request, error) {
	req, err := m.caller(o, r, nil)
	req.Policies = o.policies
	if err != nil || o.enrich == nil {
		return req, err
	}
	return enrich(o.enrich, r, req)
}

// caller returns fn(), or the identity, client address and operation of
// r under o.
func (m *Middleware) caller(o *Snapshot, r *http.Request, fn func() (admission.Request, error)) (admission.Request, error) {
	if fn != nil {
		req, err := fn()
		if err == nil && req.Session == "" {
			req.Session, err = o.session(r)
		}
		req.Retry = req.Retry || isRetry(r.Header)
		return req, unauthenticated(err)
	}
	id, err := o.Identify(r)
	if err != nil {
		return admission.Request{}, err
	}
	req := admission.Request{
		Tenant: id.Tenant, KeyID: id.KeyID, User: id.User,
		Addr:      o.identity.ClientAddr(r),
		Operation: m.operation(o, r),
		Retry:     isRetry(r.Header),
	}
	req.Session, err = o.session(r)
	return req, err
}

// retryCountHeader is the header by which OpenAI's and Anthropic's SDKs
// number a request's retries (absent or 0 on the first try). A request
// with a count of 1 or more is an admission.Request.Retry: a place a full
// queue held for its refused try is its to take. A client gains nothing
// over other tenants by sending it on every request: places are held by
// tenant.
const retryCountHeader = "X-Stainless-Retry-Count"

// isRetry reports whether h numbers a retry (retryCountHeader, a decimal
// count of 1 to 999).
func isRetry(h http.Header) bool {
	v := h.Get(retryCountHeader)
	if len(v) == 0 || len(v) > 3 {
		return false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
		n = n*10 + int(v[i]-'0')
	}
	return n > 0
}

// session returns the agent session r carries under o
// (IdentityConfig.SessionHeaders), "" when it carries none. An invalid
// one is refused (apikey.ErrInvalidSession, which WriteError answers 400)
// while a policy of o is keyed by session, and ignored otherwise, so that
// a service without session policies never refuses the header; a valid
// one is always read, so that a session policy installed on the
// controller by other means than the middleware still finds it.
func (o *Snapshot) session(r *http.Request) (string, error) {
	s, err := o.identity.sessionOf(r)
	if err != nil && !o.sessions {
		return "", nil
	}
	return s, err
}

// Identify returns the validated identity of r: the WithIdentity
// function's, else the IdentityConfig's (IdentityConfig.Identify). An
// error of the function is returned wrapped so that it matches
// ErrUnauthenticated.
func (o *Snapshot) Identify(r *http.Request) (Identity, error) {
	if o.identify == nil {
		return o.identity.Identify(r)
	}
	id, err := o.identify(r)
	if err != nil {
		return Identity{}, unauthenticated(err)
	}
	return id, nil
}

// enrich is apart from Request so that the admitted path without a
// WithRequest function keeps its request on the stack. A body that was
// too large or too slow for the function to read is told apart from the
// function's own errors; the amounts are bounded by amounts.Bound.
func enrich(f func(*http.Request, *admission.Request) error, r *http.Request, req admission.Request) (admission.Request, error) {
	if err := f(r, &req); err != nil {
		return req, requestError(r, err)
	}
	return req, amounts.Bound(&req)
}

// requestError classifies the error of a function that completes the
// admission request of r (WithRequest, echo's Config.Request) for
// WriteError: ErrBodyTimeout when it failed reading a body the client did
// not send within the body timeout, ErrBodyTooLarge when the body was
// over the limit, and otherwise err wrapped so that WriteError answers
// 400 with its text (which must therefore not reveal internals). An
// error matching admission.ErrInvalidCost is returned as is.
func requestError(r *http.Request, err error) error {
	var tooLarge *http.MaxBytesError
	switch b, ok := r.Body.(*bodywatch.Body); {
	case ok && b.TimedOut():
		return ErrBodyTimeout
	case errors.As(err, &tooLarge):
		return ErrBodyTooLarge
	case errors.Is(err, admission.ErrInvalidCost):
		return err
	}
	return &badRequest{err}
}

type badRequest struct{ err error }

func (e *badRequest) Error() string { return e.err.Error() }
func (e *badRequest) Unwrap() error { return e.err }

// WriteError answers a request AdmitAs did not admit: 413 for
// ErrBodyTooLarge, 408 for ErrBodyTimeout, 401 for ErrUnknownKey,
// ErrNoCredentials and ErrUnauthenticated, the WithRejectionHandler
// function or the rejection contract (WriteRejection) for a
// *admission.Rejection, nothing when the client is gone, 400 for an
// error matching admission.ErrInvalidCost (problem type
// problemInvalidCost), for apikey.ErrInvalidSession (problemInvalidSession) or
// of the WithRequest function, and 503 for
// anything else (logged, never shown). The WithRejectionHandler function
// is given r with a context that SetRejectionHeaders reads o's settings
// from.
func (o *Snapshot) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	o.writeError(w, r, err, nil)
}

// writeError is WriteError; st (nil: allocated when needed) is the
// request's context value, given to the WithRejectionHandler function.
func (o *Snapshot) writeError(w http.ResponseWriter, r *http.Request, err error, st *reqState) {
	var rej *admission.Rejection
	var bad *badRequest
	// A refusal is sent at once, and the connection closed rather than
	// the rest of the body read first.
	body, _ := r.Body.(*bodywatch.Body)
	bodywatch.CloseUnread(w.Header(), r, body)
	switch {
	case errors.As(err, &rej):
		if o.onRejected != nil {
			if st == nil {
				st = withState(r.Context(), new(reqState))
			}
			st.snap = o
			o.onRejected(w, r.WithContext(st), rej)
			return
		}
		writeRejection(w, rej, o)
	case errors.Is(err, ErrUnknownKey), errors.Is(err, ErrNoCredentials), errors.Is(err, ErrUnauthenticated):
		w.Header()["Www-Authenticate"] = []string{`Bearer realm="api"`}
		detail := "The API key is not valid."
		switch {
		case errors.Is(err, ErrNoCredentials):
			detail = "An API key is required."
		case errors.Is(err, ErrUnauthenticated):
			detail = "The request's credentials are not valid."
		}
		writeProblem(w, &problem{Type: problemUnauthenticated, Title: "Unauthorized", Status: http.StatusUnauthorized, Detail: detail})
	case errors.Is(err, ErrBodyTooLarge):
		writeProblem(w, &problem{Type: problemBodyTooLarge, Title: "Content Too Large", Status: http.StatusRequestEntityTooLarge,
			Detail: "The request body is larger than this service accepts."})
	case errors.Is(err, ErrBodyTimeout):
		writeProblem(w, &problem{Type: problemBodyTimeout, Title: "Request Timeout", Status: http.StatusRequestTimeout,
			Detail: "The request body was not received in time."})
	case errors.Is(err, apikey.ErrInvalidSession):
		writeProblem(w, &problem{Type: problemInvalidSession, Title: "Bad Request", Status: http.StatusBadRequest,
			Detail: "The session id must be printable ASCII without spaces, within the length this service accepts."})
	case errors.Is(err, admission.ErrInvalidCost):
		writeProblem(w, &problem{Type: problemInvalidCost, Title: "Bad Request", Status: http.StatusBadRequest,
			Detail: "The request's estimated cost is negative or too large."})
	case errors.As(err, &bad):
		writeProblem(w, &problem{Type: problemTypeBase + "bad-request", Title: "Bad Request", Status: http.StatusBadRequest, Detail: bad.Error()})
	case r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// The client went away while queued: nobody reads an answer.
	default:
		o.logger.LogAttrs(r.Context(), slog.LevelError, "admission failed", slog.String("error", err.Error()))
		w.Header()["Retry-After"] = []string{"1"}
		writeProblem(w, &problem{Type: problemUnavailable, Title: "Service Unavailable", Status: http.StatusServiceUnavailable,
			Detail: "The request cannot be admitted right now."})
	}
}

// WriteRejection writes the default answer to a rejection with the
// settings in force (WithQuotaStatus, WithRetryAfterMs), for a
// WithRejectionHandler function that falls back to it.
func (m *Middleware) WriteRejection(w http.ResponseWriter, rej *admission.Rejection) {
	writeRejection(w, rej, m.cur.Load())
}

// SetRejectionHeaders sets on w the headers of the middleware's own
// answer to rej, and returns the status it answers with, for a
// WithRejectionHandler function that writes its own body: Retry-After
// (whole seconds, rounded up; absent when waiting cannot help), with
// WithRetryAfterMs Retry-After-Ms, and the refusing policy's
// RateLimit-Policy, RateLimit and X-RateLimit-* fields (none for an
// unavailable store or a full partition table); the status is 429, the
// WithQuotaStatus status for an exhausted quota (403 by default), or
// 503. The settings are those of the snapshot that decided r, the
// request the function is given; for a request the middleware did not
// decide, the defaults. The function then writes the status and its
// body.
func SetRejectionHeaders(w http.ResponseWriter, r *http.Request, rej *admission.Rejection) int {
	return snapshotOf(r).setRejectionHeaders(w.Header(), rej)
}

// setRejectionHeaders is SetRejectionHeaders by the settings of o.
func (o *Snapshot) setRejectionHeaders(h http.Header, rej *admission.Rejection) int {
	limitheaders.SetRetryAfter(h, rej.RetryAfter)
	if o.retryAfterMs {
		limitheaders.SetRetryAfterMs(h, rej.RetryAfter)
	}
	limitheaders.SetRetryHeld(h, rej)
	// A store failure or a full partition table has no figures worth
	// showing: they would describe the service, not the caller.
	if rej.Status.Policy != "" && rej.Reason != admission.ReasonStoreUnavailable && rej.Reason != admission.ReasonOverflow {
		limitheaders.SetLimitHeaders(h, []admission.Status{rej.Status})
	}
	return limitheaders.StatusCode(rej, o.quotaStatus)
}

// writeRejection writes the default answer to rej by the settings of o:
// its headers (setRejectionHeaders) and the problem.
func writeRejection(w http.ResponseWriter, rej *admission.Rejection, o *Snapshot) {
	p := rejectionProblem(rej, o.setRejectionHeaders(w.Header(), rej))
	if o.retryAfterMs && rej.RetryAfter != limits.Never {
		p.RetryAfterMs = limitheaders.Millis(rej.RetryAfter)
	}
	writeProblem(w, p)
}

func (m *Middleware) operation(o *Snapshot, r *http.Request) string {
	if o.operation != nil {
		return o.operation(r)
	}
	pat := r.Pattern
	if pat == "" && o.mux != nil {
		_, pat = o.mux.Handler(r)
		if pat == "" {
			return ""
		}
	}
	if pat == "" {
		return r.Method + " " + r.URL.Path
	}
	if i := strings.IndexByte(pat, ' '); i >= 0 {
		// A pattern written "METHOD /route" for the request's own method
		// is already the operation name.
		if pat[:i] == r.Method && i+1 < len(pat) && pat[i+1] != ' ' && pat[i+1] != '\t' {
			return pat
		}
		pat = strings.TrimLeft(pat[i+1:], " \t")
	}
	return m.OperationName(r.Method, pat)
}

// OperationName returns method + " " + route, interned so that the
// admitted path does not build the string on every request. route must be
// a route pattern (a bounded set), not a raw path.
func (m *Middleware) OperationName(method, route string) string { return m.ops.get(method, route) }

// opCache interns "METHOD route" strings so the admitted path does not
// build one per request. It is bounded: past maxOps entries, names are
// built per request.
type opCache struct {
	mu sync.Mutex
	m  atomic.Pointer[map[opKey]string]
}

type opKey struct{ method, route string }

const maxOps = 4096

func (c *opCache) get(method, route string) string {
	if mp := c.m.Load(); mp != nil {
		if s, ok := (*mp)[opKey{method, route}]; ok {
			return s
		}
	}
	s := method + " " + route
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	n := 0
	if old != nil {
		n = len(*old)
	}
	if n >= maxOps {
		return s
	}
	next := make(map[opKey]string, n+1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[opKey{strings.Clone(method), strings.Clone(route)}] = s
	c.m.Store(&next)
	return s
}
