// Package grpcadmit puts an admission.Controller in front of a gRPC
// server, and gives its clients an interceptor that honours the
// server's retry hint.
//
// # One value, two interceptors
//
// New returns an Interceptor whose methods Unary and Stream are a
// grpc.UnaryServerInterceptor and a grpc.StreamServerInterceptor:
//
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(ic.Unary),
//		grpc.ChainStreamInterceptor(ic.Stream),
//	)
//
// One constructor and one set of options serve both kinds of call, as
// one httpadmit.Middleware serves every route: the identity rules and
// the policies cannot differ between a service's unary and streaming
// methods.
//
// # How it maps to the HTTP contract
//
// The operation a policy's match.operations names is the call's full
// method name, "/pkg.Service/Method" (exactly as an HTTP route is
// "POST /v1/chat/completions"); a name longer than 256 bytes (only a
// server with an unknown-service handler sees one) is the empty
// operation, which only unrestricted policies match. The caller is
// identified from the call's metadata by the rules the HTTP middleware
// applies to headers (apikey.Rules, one implementation): an API key in
// "authorization: Bearer <key>" or "x-api-key" (WithKeyHeaders), looked
// up by its SHA-256 hash and never longer than apikey.MaxKeyLen, else the
// anonymous tenant; a tenant header (WithTenantHeader) is a claim
// checked against the key, never the source of the tenant. The client
// address is the TCP peer, IPv6 grouped by /64. Metadata is read, never
// logged nor used as a metric label.
//
// Calls are decided by the policies the controller has installed, one
// immutable set per call (Controller.Install swaps it whole on a
// reload); Interceptor.Apply installs policies and identity settings
// together, one value read once per call, so a reload that changes keys
// and limits never mixes the two. Each call is admitted once, before its handler runs: a unary call for
// its one request, a stream for its whole life, however many messages
// it carries (a stream holds at most one permit of each policy). The
// ticket is settled when the handler returns, also when it panics or the
// client cancels; a handler that knows the actual usage settles it
// first (TicketFrom), which makes the interceptor's settlement do
// nothing.
//
// The answers mirror HTTP's statuses:
//
//   - 429 and 403 (a rate, concurrency, queue or quota limit):
//     codes.ResourceExhausted, with an errdetails.RetryInfo holding the
//     wait of the refused call (the figure HTTP rounds up to whole
//     seconds in Retry-After, here in milliseconds rounded up; absent
//     when waiting cannot help) and an errdetails.QuotaFailure whose
//     violation names the policy (subject "policy:<name>") and the
//     reason.
//   - 403 loop_detected (a loop policy: the session repeats one step
//     more often than the policy allows): codes.FailedPrecondition,
//     which a client does not retry as it is, with an errdetails.ErrorInfo
//     (reason LOOP_DETECTED, domain sluice, metadata policy, limit and
//     window) and an errdetails.PreconditionFailure naming the policy
//     (subject "policy:<name>"), and no RetryInfo: the same step would
//     be refused again, so waiting cannot help (see docs/sessions.md).
//   - 503 (the limit store unavailable with a policy failing closed, or
//     the partition table full): codes.Unavailable with RetryInfo and no
//     figures, which describe the service rather than the caller.
//   - 401 (an unknown key, a missing one under WithRequireKey, a tenant
//     claim that is not the key's, or an error of the WithIdentity
//     function): codes.Unauthenticated, without a partition.
//   - 400 (a WithRequest error, or a negative estimate):
//     codes.InvalidArgument. An estimate above limits.MaxAmount is
//     saturated to it, as HTTP does, and refused as larger than any
//     limit.
//   - Any other failure: codes.Unavailable, logged, its text never sent.
//
// Admitted and refused calls carry the limit figures as header metadata
// under the HTTP field names, lower-cased (ratelimit-policy, ratelimit,
// x-ratelimit-limit, -remaining, -reset), as httpadmit writes them. A
// policy in shadow mode never refuses; its decisions reach the
// controller's observer (metrics, decision log) exactly as HTTP
// requests' do, and WithShadowHeader names them to the caller. The
// health service (grpc.health.v1.Health) is never limited (WithExempt).
//
// # Clients
//
// UnaryClientInterceptor retries a unary call refused with RetryInfo
// (ResourceExhausted or Unavailable: an admission refusal, which means
// the server did not run the call), waiting the hint with
// httpretry's jitter and attempt budget and never past the call's
// deadline (httpretry.Transport.WaitHint). A stream is refused when it
// opens, which its client sees on its first receive:
// StreamClientInterceptor opens a server-streaming call again after the
// hint, and RetryDelay reads the hint of any refusal for a client that
// retries itself. Both number their retries in grpc-previous-rpc-attempts,
// as gRPC's own retries do, and the server reads a call that carries it
// as a retry (admission.Request.Retry): a queue that refused the call for
// want of room holds a place for it.
package grpcadmit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/internal/amounts"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

// maxMethodLen bounds the full method name taken as an operation.
const maxMethodLen = 256

// wouldRejectKey is the metadata key of WithShadowHeader.
const wouldRejectKey = "sluice-would-reject"

// maxStatuses is the number of policy statuses read on the stack.
const maxStatuses = 8

// An Option sets one setting of an Interceptor.
type Option func(*settings)

// settings are an Interceptor's options.
type settings struct {
	rules    apikey.Rules
	identify func(ctx context.Context, md metadata.MD) (apikey.Identity, error)
	enrich   func(ctx context.Context, method string, msg any, r *admission.Request) error
	exempt   []string
	noWait   bool
	shadow   bool
	logger   *slog.Logger
	// sessionKeys are the metadata keys of a session id (nil:
	// apikey.DefaultSessionHeaders lower-cased), maxSession its longest.
	sessionKeys []string
	maxSession  int
}

// WithKeyHeaders sets the metadata keys that may carry an API key, tried
// in order: "authorization" is read as "Bearer <key>", any other holds
// the key itself. The default is authorization and x-api-key.
func WithKeyHeaders(names ...string) Option {
	return func(s *settings) { s.rules.KeyHeaders = lower(names) }
}

// WithKeys sets the table API keys are looked up in: an apikey.Table, an
// httpadmit.KeySet, or any apikey.Lookup. Without it every key is
// unknown.
func WithKeys(l apikey.Lookup) Option { return func(s *settings) { s.rules.Keys = l } }

// WithTenantHeader names a metadata key in which a caller may state its
// tenant: a caller that sends it must send the tenant its key stands for
// (the anonymous tenant without a key) in each of its values, or be
// refused as unauthenticated (apikey.Rules.TenantHeader). The tenant
// always comes from the key.
func WithTenantHeader(name string) Option {
	return func(s *settings) { s.rules.TenantHeader = strings.ToLower(name) }
}

// WithAnonymousTenant sets the tenant of callers that present no key;
// the default is "anonymous".
func WithAnonymousTenant(tenant string) Option {
	return func(s *settings) { s.rules.AnonymousTenant = tenant }
}

// WithRequireKey refuses callers without a key (codes.Unauthenticated)
// instead of admitting them as the anonymous tenant.
func WithRequireKey() Option { return func(s *settings) { s.rules.RequireKey = true } }

// WithIdentity sets the function that identifies callers, for a service
// with its own authentication (mTLS, a verified token), replacing the
// key rules. Every field of the identity it returns must come from
// credentials it has validated, never from metadata the client chooses
// freely. An error refuses the call with codes.Unauthenticated, without
// its text.
func WithIdentity(f func(ctx context.Context, md metadata.MD) (apikey.Identity, error)) Option {
	return func(s *settings) { s.identify = f }
}

// WithRequest sets a function that completes the admission request
// before it is decided (the model, the estimated tokens or cost, the
// priority): msg is a unary call's request message, nil for a stream
// (admitted before its first message is read). An error refuses the
// call with codes.InvalidArgument and its text, which must therefore not
// reveal internals.
func WithRequest(f func(ctx context.Context, method string, msg any, r *admission.Request) error) Option {
	return func(s *settings) { s.enrich = f }
}

// WithExempt lists full method names that are never limited, or service
// prefixes written "/pkg.Service/*". The default is the health service,
// "/grpc.health.v1.Health/*"; WithExempt replaces it.
func WithExempt(methods ...string) Option {
	return func(s *settings) { s.exempt = append([]string(nil), methods...) }
}

// WithoutQueueing refuses at once calls that would wait in a policy's
// queue (Controller.TryAdmit).
func WithoutQueueing() Option { return func(s *settings) { s.noWait = true } }

// WithShadowHeader adds, on admitted calls, the header metadata
// sluice-would-reject naming the shadow policies that would have
// refused the call, as httpadmit's Sluice-Would-Reject. Off by default:
// it tells callers about limits not yet enforced.
func WithShadowHeader(on bool) Option { return func(s *settings) { s.shadow = on } }

// WithSessions sets the metadata keys that may carry a call's agent
// session id (admission.Request.Session), tried in order, and the
// longest id accepted in bytes (zero: apikey.DefaultMaxSessionLength).
// The default keys are x-session-id and mcp-session-id; no keys reads
// none. A value apikey.ValidSession refuses, or a key sent twice, is
// refused with codes.InvalidArgument while a policy is keyed by session,
// and ignored otherwise, as httpadmit does with its session headers.
func WithSessions(maxLength int, keys ...string) Option {
	return func(s *settings) { s.sessionKeys, s.maxSession = lower(keys), maxLength }
}

// WithLogger sets the logger of unexpected admission errors; the default
// is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.logger = l } }

// lower returns names lower-cased, as metadata keys are.
func lower(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.ToLower(n)
	}
	return out
}

// An Interceptor admits gRPC calls through a Controller: Unary for unary
// calls, Stream for streams. It is safe for concurrent use.
type Interceptor struct {
	ctl *admission.Controller
	own []Option   // New's options, which win over Apply's
	mu  sync.Mutex // serializes Apply
	cur atomic.Pointer[snapshot]
}

// snapshot is what a call is decided by, read once when it starts: the
// settings and the policy set installed together by Apply.
type snapshot struct {
	settings
	policies *admission.PolicySet // nil: the controller's installed set
	// sessions is set while a policy is keyed by session: only then is
	// an invalid session refused.
	sessions bool
}

// New returns an Interceptor admitting calls through ctl.
func New(ctl *admission.Controller, opts ...Option) (*Interceptor, error) {
	if ctl == nil {
		return nil, errors.New("grpcadmit: nil controller")
	}
	ic := &Interceptor{ctl: ctl, own: slices.Clip(opts)}
	ic.cur.Store(&snapshot{settings: build(opts), sessions: keyedBySession(ctl.Policies())})
	return ic, nil
}

// build returns the settings opts make over the defaults.
func build(opts []Option) settings {
	s := settings{exempt: []string{"/grpc.health.v1.Health/*"}}
	for _, opt := range opts {
		opt(&s)
	}
	if len(s.rules.KeyHeaders) == 0 {
		s.rules.KeyHeaders = lower(apikey.DefaultKeyHeaders)
	}
	if s.sessionKeys == nil {
		s.sessionKeys = lower(apikey.DefaultSessionHeaders)
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return s
}

// Apply installs a configuration for the calls that start after it, as
// one value: cfg's policies and plans, compiled by the controller, with
// the settings opts make (a policy file's identity section and key
// table), under the options New was given, which win. A call decided
// before keeps the policies and identity rules it started with; no call
// sees the new keys with the old policies. The controller's installed
// set becomes cfg's too. From the first Apply on, calls are decided by
// the applied set, so change policies and plans through Apply. An error
// changes nothing.
func (ic *Interceptor) Apply(cfg admission.Config, opts ...Option) error {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	set, err := ic.ctl.Compile(cfg)
	if err != nil {
		return err
	}
	s := build(append(slices.Clip(opts), ic.own...))
	if err := ic.ctl.Install(set); err != nil {
		return err
	}
	ic.cur.Store(&snapshot{settings: s, policies: set, sessions: keyedBySession(cfg.Policies)})
	return nil
}

// Unary is a grpc.UnaryServerInterceptor: it admits the call, runs the
// handler, and settles the ticket when the handler returns.
func (ic *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	snap := ic.cur.Load()
	if snap.exempts(info.FullMethod) {
		return handler(ctx, req)
	}
	actx, tk, err := ic.admit(ctx, snap, info.FullMethod, req, func(md metadata.MD) { _ = grpc.SetHeader(ctx, md) })
	if err != nil {
		return nil, err
	}
	defer tk.Done()
	return handler(actx, req)
}

// Stream is a grpc.StreamServerInterceptor: it admits the stream once,
// when it opens, and holds its permits until the handler returns.
func (ic *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	snap := ic.cur.Load()
	if snap.exempts(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx, tk, err := ic.admit(ss.Context(), snap, info.FullMethod, nil, func(md metadata.MD) { _ = ss.SetHeader(md) })
	if err != nil {
		return err
	}
	defer tk.Done()
	return handler(srv, &stream{ServerStream: ss, ctx: ctx})
}

// stream is a server stream whose context carries the ticket.
type stream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context, with its ticket and identity.
func (s *stream) Context() context.Context { return s.ctx }

// exempts reports whether method is never limited.
func (s *settings) exempts(method string) bool {
	for _, e := range s.exempt {
		if prefix, ok := strings.CutSuffix(e, "*"); ok && strings.HasSuffix(prefix, "/") {
			if strings.HasPrefix(method, prefix) {
				return true
			}
		} else if method == e {
			return true
		}
	}
	return false
}

type ticketKey struct{}

type identityKey struct{}

// TicketFrom returns the ticket of the call whose context is ctx, so that
// its handler can Settle with the actual usage or Charge while it
// streams. Settling it in the handler is fine: the interceptor's own
// settlement then does nothing.
func TicketFrom(ctx context.Context) (admission.Ticket, bool) {
	tk, ok := ctx.Value(ticketKey{}).(admission.Ticket)
	return tk, ok
}

// IdentityFrom returns the identity the call whose context is ctx was
// admitted as, which its handler uses rather than identifying the
// caller again.
func IdentityFrom(ctx context.Context) (apikey.Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(apikey.Identity)
	return id, ok
}

// admit identifies and admits a call to method by snap, sending the
// limit figures with setHeader, and returns the handler's context.
func (ic *Interceptor) admit(ctx context.Context, snap *snapshot, method string, msg any, setHeader func(metadata.MD)) (context.Context, admission.Ticket, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	id, err := snap.identity(ctx, md)
	if err != nil {
		return nil, admission.Ticket{}, status.Error(codes.Unauthenticated, unauthenticatedMessage(err))
	}
	req := admission.Request{Tenant: id.Tenant, KeyID: id.KeyID, User: id.User, Addr: peerAddr(ctx), Policies: snap.policies, Retry: isRetry(md)}
	if req.Session, err = snap.session(md); err != nil {
		return nil, admission.Ticket{}, status.Error(codes.InvalidArgument, "the session id is not valid: 1 to "+strconv.Itoa(cmp.Or(snap.maxSession, apikey.DefaultMaxSessionLength))+" bytes of printable ASCII, no space")
	}
	if len(method) <= maxMethodLen {
		req.Operation = method
	}
	if snap.enrich != nil {
		if err := snap.enrich(ctx, method, msg, &req); err != nil {
			return nil, admission.Ticket{}, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if err := amounts.Bound(&req); err != nil {
		return nil, admission.Ticket{}, snap.errorStatus(ctx, err)
	}
	var tk admission.Ticket
	if snap.noWait {
		tk, err = ic.ctl.TryAdmit(ctx, req)
	} else {
		tk, err = ic.ctl.Admit(ctx, req)
	}
	if err != nil {
		var rej *admission.Rejection
		if errors.As(err, &rej) && rej.Status.Policy != "" && rej.Reason != admission.ReasonStoreUnavailable && rej.Reason != admission.ReasonOverflow {
			setHeader(limitMetadata([]admission.Status{rej.Status}))
		}
		return nil, tk, snap.errorStatus(ctx, err)
	}
	var stack [maxStatuses]admission.Status
	md = limitMetadata(limitheaders.Enforced(tk.Statuses(stack[:0])))
	if snap.shadow {
		var names [maxStatuses]string
		if wr := tk.WouldReject(names[:0]); len(wr) > 0 {
			md[wouldRejectKey] = []string{strings.Join(wr, ", ")}
		}
	}
	if len(md) > 0 {
		setHeader(md)
	}
	ctx = context.WithValue(ctx, ticketKey{}, tk)
	return context.WithValue(ctx, identityKey{}, id), tk, nil
}

// identity returns the caller's validated identity: the WithIdentity
// function's, else the shared key rules applied to md.
func (s *settings) identity(ctx context.Context, md metadata.MD) (apikey.Identity, error) {
	if s.identify != nil {
		return s.identify(ctx, md)
	}
	id, err := s.rules.Identify(func(name string) string {
		if vs := md[name]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	})
	if err != nil || s.rules.TenantHeader == "" {
		return id, err
	}
	// The rules check the first claim; a later one must not name
	// another tenant either.
	for _, t := range md[s.rules.TenantHeader] {
		if t != "" && t != id.Tenant {
			return apikey.Identity{}, apikey.ErrTenantMismatch
		}
	}
	return id, nil
}

// session returns the session id md carries in the first of the session
// keys present, "" when none is. An invalid one (apikey.ValidSession, a
// key sent twice) is apikey.ErrInvalidSession while a policy is keyed by
// session, and ignored otherwise.
func (s *snapshot) session(md metadata.MD) (string, error) {
	for _, k := range s.sessionKeys {
		vs := md[k]
		if len(vs) == 0 {
			continue
		}
		if len(vs) > 1 || !apikey.ValidSession(vs[0], s.maxSession) {
			if !s.sessions {
				return "", nil
			}
			return "", apikey.ErrInvalidSession
		}
		return vs[0], nil
	}
	return "", nil
}

// keyedBySession reports whether a policy of ps is keyed by session.
func keyedBySession(ps []admission.Policy) bool {
	return slices.ContainsFunc(ps, func(p admission.Policy) bool { return p.KeyedBySession() })
}

// unauthenticatedMessage is the message of a refused identity: fixed
// texts, never the error of a WithIdentity function.
func unauthenticatedMessage(err error) string {
	switch {
	case errors.Is(err, apikey.ErrUnknownKey):
		return "the API key is not valid"
	case errors.Is(err, apikey.ErrNoCredentials):
		return "an API key is required"
	case errors.Is(err, apikey.ErrTenantMismatch):
		return "the tenant does not match the API key"
	}
	return "the call's credentials are not valid"
}

// peerAddr returns the call's TCP peer address, grouped as partitions
// see it; the zero Addr when there is none.
func peerAddr(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}
	}
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		return apikey.Group(tcp.AddrPort().Addr())
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return netip.Addr{}
	}
	return apikey.Group(ap.Addr())
}

// limitMetadata returns the limit fields of sts as header metadata,
// under the HTTP field names lower-cased.
func limitMetadata(sts []admission.Status) metadata.MD {
	h := http.Header{}
	limitheaders.SetLimitHeaders(h, sts)
	md := make(metadata.MD, len(h))
	for k, vs := range h {
		md[strings.ToLower(k)] = vs
	}
	return md
}

// errorStatus returns the gRPC status error of an admission error (see
// the package doc).
func (s *settings) errorStatus(ctx context.Context, err error) error {
	var rej *admission.Rejection
	switch {
	case errors.As(err, &rej):
		return rejectionStatus(rej).Err()
	case errors.Is(err, admission.ErrInvalidCost):
		return status.Error(codes.InvalidArgument, "the call's estimated cost is negative or too large")
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return status.FromContextError(err).Err()
	}
	s.logger.LogAttrs(ctx, slog.LevelError, "admission failed", slog.String("error", err.Error()))
	return status.Error(codes.Unavailable, "the call cannot be admitted right now")
}

// rejectionStatus returns the status of a rejection: ResourceExhausted
// (Unavailable for the store or the partition table) with RetryInfo and,
// for a caller's own limit, QuotaFailure; a loop's (loopStatus). It
// names the policy, which the operator wrote, and nothing the client
// sent.
func rejectionStatus(rej *admission.Rejection) *status.Status {
	if rej.Reason == admission.ReasonLoop {
		return loopStatus(rej)
	}
	code := codes.ResourceExhausted
	if limitheaders.StatusCode(rej, 0) == http.StatusServiceUnavailable {
		code = codes.Unavailable
	}
	msg := fmt.Sprintf("%s limit %q exceeded", rej.Reason, rej.Policy)
	if code == codes.Unavailable {
		msg = "the service cannot check limits right now"
	}
	st := status.New(code, msg)
	var retry *errdetails.RetryInfo
	if rej.RetryAfter != limits.Never {
		ms := max(1, limitheaders.Millis(rej.RetryAfter))
		retry = &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(ms) * time.Millisecond)}
	}
	var with *status.Status
	var err error
	switch {
	case code == codes.ResourceExhausted && retry != nil:
		with, err = st.WithDetails(retry, quotaFailure(rej))
	case code == codes.ResourceExhausted:
		with, err = st.WithDetails(quotaFailure(rej))
	case retry != nil:
		with, err = st.WithDetails(retry)
	default:
		return st
	}
	if err != nil {
		return st
	}
	return with
}

// loopReason is the ErrorInfo reason of a loop refusal (see the package
// doc); errorDomain is the domain of the package's reasons.
const (
	loopReason  = "LOOP_DETECTED"
	errorDomain = "sluice"
)

// loopStatus returns the status of a loop refusal: FailedPrecondition,
// with the loop's evidence (the policy, how many repetitions of one step
// in what window) in the message, an ErrorInfo and a
// PreconditionFailure, and no RetryInfo.
func loopStatus(rej *admission.Rejection) *status.Status {
	st := rej.Status
	per, md := "", map[string]string{"policy": rej.Policy, "limit": strconv.FormatInt(st.Limit, 10)}
	if st.Window > 0 {
		per = " within " + st.Window.String()
		md["window"] = st.Window.String()
	}
	evidence := fmt.Sprintf("the session made the same step more than %d times%s", st.Limit, per)
	s := status.New(codes.FailedPrecondition, fmt.Sprintf("loop detected by policy %q: %s; it will not be served again as it is: change the step or end the session", rej.Policy, evidence))
	with, err := s.WithDetails(
		&errdetails.ErrorInfo{Reason: loopReason, Domain: errorDomain, Metadata: md},
		&errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{{
			Type: loopReason, Subject: "policy:" + rej.Policy, Description: evidence,
		}}})
	if err != nil {
		return s
	}
	return with
}

// quotaFailure names the refusing policy and the reason.
func quotaFailure(rej *admission.Rejection) *errdetails.QuotaFailure {
	desc := fmt.Sprintf("%s limit of policy %q", rej.Reason, rej.Policy)
	if rej.RetryAfter == limits.Never {
		desc += ": the call costs more than the limit allows at once; retrying cannot succeed"
	}
	return &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject: "policy:" + rej.Policy, Description: desc,
	}}}
}
