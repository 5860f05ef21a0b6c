package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

// Reserved descriptor entries (rlsconfig.ReservedPrefix): stripped
// before matching, they say which phase of a request a call belongs to and
// correlate the two phases.
const (
	// PhaseKey is the entry whose value "response" marks a call made after
	// the response (Envoy's apply_on_stream_done): its hits are the actual
	// cost, charged without a decision. Any other value, or no entry, is
	// the request phase.
	PhaseKey = "sluice.phase"
	// RequestIDKey is the entry correlating a request-phase estimate with
	// its response-phase actual (Envoy's request_headers action on
	// x-request-id, say), so that the actual replaces the estimate.
	RequestIDKey = "sluice.request_id"
)

// Bounds on a request. A descriptor has at most rlsconfig.MaxDepth
// entries besides the reserved ones; domains, keys and values are at most
// rlsconfig.MaxName bytes.
const (
	// MaxDescriptors is the most descriptors one call may carry.
	MaxDescriptors = 64
	maxRequestID   = 128
)

// Defaults of the reconciliation table.
const (
	DefaultPendingTTL = 10 * time.Minute
	DefaultMaxPending = 100_000
)

const (
	// unlimitedRemaining is the limit_remaining of an unlimited
	// descriptor, as envoyproxy/ratelimit answers it.
	unlimitedRemaining = math.MaxUint32
	// phaseResponse is the PhaseKey value of a response-phase call.
	phaseResponse = "response"
)

// A Server answers Envoy's rate limit service calls
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) with an
// admission controller: each descriptor a rule matches is one admission
// of the rule's generated policy. Register it on a grpc.Server with
// Register, or use NewGRPCServer for one with health and reflection.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	ctl           *admission.Controller
	mu            sync.Mutex // serialises SetConfig
	cur           atomic.Pointer[snapshot]
	clock         admission.Clock
	unknownDomain rlsconfig.Code
	defaultStore  string
	pending       *pendingTable
	stats         counters
}

// snapshot is what a call is decided by, read once: the rules and the
// policy set compiled from them.
type snapshot struct {
	cfg      *rlsconfig.Config
	policies *admission.PolicySet
}

type counters struct {
	unknown, blocked, unlimited, reconciled, charged, untracked atomic.Int64
}

// Stats counts what the server did beside the controller's decisions.
type Stats struct {
	// Unknown counts descriptors no rule matched (answered by the domain's
	// unknown setting), Blocked those whose rule allows 0 (and no other
	// limit of the call replaces), Unlimited those whose rule is
	// unlimited.
	Unknown, Blocked, Unlimited int64
	// Reconciled counts response-phase actuals that replaced their
	// request-phase estimate; Charged those charged on their own (no
	// estimate was held for them); Untracked the estimates that could not
	// be held for reconciliation (the table was full) and stay charged.
	Reconciled, Charged, Untracked int64
}

// An Option configures a Server.
type Option func(*Server)

// WithClock sets the clock the reconciliation table expires entries with
// (and blocked descriptors compute their reset with); the default is the
// system clock.
func WithClock(c admission.Clock) Option { return func(s *Server) { s.clock = c } }

// WithUnknownDomain sets the answer for a call whose domain no file
// declares; the default is OK (as envoyproxy/ratelimit, which applies no
// limit).
func WithUnknownDomain(c rlsconfig.Code) Option { return func(s *Server) { s.unknownDomain = c } }

// WithDefaultStore names the store the configurations Watch loads keep
// the limits of a domain whose file sets no store in
// (rlsconfig.DefaultStore): with a shared store, an unchanged
// envoyproxy/ratelimit file enforces one limit for a fleet. A
// configuration given to New or SetConfig is taken as it was compiled.
func WithDefaultStore(name string) Option { return func(s *Server) { s.defaultStore = name } }

// WithPending bounds the reconciliation table: at most n estimates held,
// each for ttl at most (zero values keep DefaultMaxPending and
// DefaultPendingTTL). An estimate that expires stays charged.
func WithPending(n int, ttl time.Duration) Option {
	return func(s *Server) {
		if n > 0 {
			s.pending.max = n
		}
		if ttl > 0 {
			s.pending.ttl = ttl
		}
	}
}

// New returns a Server deciding with ctl and installs cfg's policies in it
// (replacing ctl's configuration).
func New(ctl *admission.Controller, cfg *rlsconfig.Config, opts ...Option) (*Server, error) {
	s := &Server{ctl: ctl, clock: admission.SystemClock{}, pending: newPendingTable()}
	for _, o := range opts {
		o(s)
	}
	if err := s.SetConfig(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// SetConfig installs a new configuration: its policies in the controller
// (partitions of unchanged policies keep their state) and its rules,
// together: each call is decided by the rules and the policies of one
// configuration.
func (s *Server) SetConfig(cfg *rlsconfig.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	set, err := s.ctl.Compile(admission.Config{Policies: cfg.Policies})
	if err != nil {
		return err
	}
	if err := s.ctl.Install(set); err != nil {
		return err
	}
	s.cur.Store(&snapshot{cfg: cfg, policies: set})
	return nil
}

// Config returns the configuration in force.
func (s *Server) Config() *rlsconfig.Config { return s.cur.Load().cfg }

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{
		Unknown: c.unknown.Load(), Blocked: c.blocked.Load(), Unlimited: c.unlimited.Load(),
		Reconciled: c.reconciled.Load(), Charged: c.charged.Load(), Untracked: c.untracked.Load(),
	}
}

// Close settles every estimate still held for reconciliation at its
// estimate. The controller is the caller's to close.
func (s *Server) Close() { s.pending.drain() }

// Register registers the rate limit service on g.
func (s *Server) Register(g *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(g, s) }

// NewGRPCServer returns a grpc.Server serving s, the standard health
// service (grpc.health.v1, SERVING for "" and the rate limit service) and
// server reflection, and the health server so that shutdown can mark it
// NOT_SERVING before GracefulStop.
func NewGRPCServer(s *Server, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	g := grpc.NewServer(opts...)
	s.Register(g)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
	reflection.Register(g)
	return g, h
}

// eval is one descriptor's evaluation.
type eval struct {
	lf       *rlsconfig.Limit
	req      admission.Request
	cost     int64
	check    bool // hits_addend 0: is there room for one? charges nothing
	response bool
	rid      string
	code     rlsconfig.Code
	st       admission.Status
	hasSt    bool
	retry    time.Duration
	ticket   admission.Ticket
	admitted bool
	replaced bool
	// wouldReject marks a request-phase descriptor of a shadow limit of
	// zero: no policy decides it, the server reports its decision.
	wouldReject bool
}

// ShouldRateLimit answers one call: per descriptor OK or OVER_LIMIT with
// its limit's figures, overall OVER_LIMIT when any descriptor is, and the
// RateLimit-Policy, RateLimit and Retry-After response headers. See the
// package documentation for the mapping.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := checkRequest(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	snap := s.cur.Load()
	dom := snap.cfg.Domain(req.Domain)
	evs := make([]eval, len(req.Descriptors))
	for i, d := range req.Descriptors {
		s.prepare(&evs[i], dom, d, req.HitsAddend)
		evs[i].req.Policies = snap.policies
	}
	applyReplaces(evs)
	for i := range evs {
		e := &evs[i]
		if e.replaced || e.lf == nil || !e.lf.Blocked {
			continue
		}
		s.stats.blocked.Add(1)
		if e.wouldReject {
			s.wouldReject(ctx, e)
		}
	}
	// Descriptors that cannot wait first, together, so that a refusal is
	// known before a queue is waited in; then the others, without waiting
	// once something refused.
	if err := s.decideUnqueued(ctx, evs); err != nil {
		return nil, err
	}
	refused := false
	for i := range evs {
		refused = refused || evs[i].code == rlsconfig.OverLimit
	}
	for i := range evs {
		e := &evs[i]
		if !e.decided() || !e.lf.Queued {
			continue
		}
		if err := s.decide(ctx, e, !refused); err != nil {
			s.undo(evs)
			return nil, err
		}
		refused = refused || e.code == rlsconfig.OverLimit
	}
	now := s.clock.Now()
	// A request is admitted by all its descriptors or charged by none.
	if refused {
		s.undo(evs)
	} else {
		s.keep(evs, now)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(evs))}
	var sts []admission.Status
	// The longest finite wait a refusal advises; Never when waiting
	// cannot help any refused descriptor (its cost exceeds its limit).
	retry := limits.Never
	for i := range evs {
		e := &evs[i]
		if e.code == rlsconfig.OverLimit {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if e.lf != nil && e.lf.Blocked {
				e.retry = blockedReset(e.lf, now)
			}
			if e.retry != limits.Never {
				retry = max(retry, e.retry)
			}
		}
		resp.Statuses[i] = s.descriptorStatus(e, now)
		if e.hasSt && e.st.Mode == limits.Enforce {
			sts = append(sts, e.st)
		}
	}
	resp.ResponseHeadersToAdd = headers(sts, resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT, retry)
	return resp, nil
}

// checkRequest bounds a call before anything is evaluated.
func checkRequest(req *rlsv3.RateLimitRequest) error {
	switch {
	case req.Domain == "":
		return errors.New("domain must not be empty")
	case len(req.Domain) > rlsconfig.MaxName:
		return fmt.Errorf("domain longer than %d bytes", rlsconfig.MaxName)
	case len(req.Descriptors) == 0:
		return errors.New("at least one descriptor is required")
	case len(req.Descriptors) > MaxDescriptors:
		return fmt.Errorf("more than %d descriptors", MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		// A rule matches at most MaxDepth entries; the reserved phase and
		// request id may come beside them.
		if len(d.Entries) == 0 || len(d.Entries) > rlsconfig.MaxDepth+2 {
			return fmt.Errorf("descriptors[%d]: %d entries; want between 1 and %d", i, len(d.Entries), rlsconfig.MaxDepth+2)
		}
		for j, en := range d.Entries {
			if en.Key == "" || len(en.Key) > rlsconfig.MaxName || len(en.Value) > rlsconfig.MaxName {
				return fmt.Errorf("descriptors[%d].entries[%d]: key empty, or key or value longer than %d bytes", i, j, rlsconfig.MaxName)
			}
			if en.Key == RequestIDKey && len(en.Value) > maxRequestID {
				return fmt.Errorf("descriptors[%d].entries[%d]: request id longer than %d bytes", i, j, maxRequestID)
			}
		}
		if d.IsNegativeHits {
			return fmt.Errorf("descriptors[%d]: negative hits are not supported: report the actual cost in the response phase", i)
		}
	}
	return nil
}

// prepare matches descriptor d and builds its admission request.
func (s *Server) prepare(e *eval, dom *rlsconfig.Domain, d *rlv3.RateLimitDescriptor, hits uint32) {
	var stack [rlsconfig.MaxDepth]rlsconfig.Entry
	entries := stack[:0]
	deep := false // deeper than any rule: matches none
	for _, en := range d.Entries {
		switch en.Key {
		case PhaseKey:
			e.response = en.Value == phaseResponse
		case RequestIDKey:
			e.rid = en.Value
		default:
			if len(entries) == rlsconfig.MaxDepth {
				deep = true
				continue
			}
			entries = append(entries, rlsconfig.Entry{Key: en.Key, Value: en.Value})
		}
	}
	e.cost = 1
	switch {
	case d.HitsAddend != nil:
		// Clamped, never refused: a response phase's usage above the
		// bound is charged as the bound (a debt no limit can pay back
		// soon), a request phase's is refused as over any limit.
		e.cost = int64(min(d.HitsAddend.Value, uint64(limits.MaxAmount)))
	case hits > 0:
		e.cost = int64(hits)
	}
	// No rule will match the descriptor later either: a refusal for it
	// advises no retry.
	if dom == nil {
		e.code, e.retry = s.unknownDomain, limits.Never
		s.stats.unknown.Add(1)
		return
	}
	lf, found := dom.Match(entries)
	if !found || deep {
		e.code, e.retry = dom.Unknown, limits.Never
		s.stats.unknown.Add(1)
		return
	}
	if lf == nil {
		return // a descriptor without a limit: let through
	}
	e.lf = lf
	switch {
	case lf.Unlimited:
		s.stats.unlimited.Add(1)
		return
	case lf.Blocked:
		switch {
		case e.response:
		case lf.Shadow || s.ctl.AllShadow():
			// Enforced, it would refuse: a would-reject decision, reported
			// once the call's replaced limits are known (wouldReject).
			e.wouldReject = true
			e.req.Tenant = lf.Tenant(entries)
		default:
			e.code = rlsconfig.OverLimit
		}
		return
	}
	e.req = admission.Request{Operation: lf.Policy, User: lf.Partition(entries), Tenant: lf.Tenant(entries)}
	if e.cost == 0 && !e.response {
		e.check, e.cost = true, 1
	}
	setAmount(&e.req, lf.Unit, e.cost)
}

// wouldReject reports e, a descriptor matching a shadow limit of zero, to
// the controller's observer as its policies' would-reject decisions are:
// a would-reject of the limit's generated policy name, in shadow mode, a
// fixed window of 0 (as envoyproxy/ratelimit counts it), for the
// descriptor's tenant and cost (a check's being one unit). No policy is
// installed for the limit: nothing else is kept.
func (s *Server) wouldReject(ctx context.Context, e *eval) {
	lf := e.lf
	reset := blockedReset(lf, s.clock.Now())
	s.ctl.Observer().Decision(&admission.Decision{
		Status: admission.Status{
			Policy: lf.Policy, Mode: limits.Shadow, Unit: lf.Unit, Algorithm: limits.FixedWindow,
			Window: lf.Per, Reset: reset,
		},
		Outcome: admission.WouldReject, Reason: admission.ReasonRate,
		Tenant: e.req.Tenant, Operation: lf.Policy, Cost: max(e.cost, 1), RetryAfter: reset, Context: ctx,
	})
}

// applyReplaces drops the limits another matched limit replaces: they are
// neither evaluated nor charged, and answered OK (a limit of 0 included,
// whose refusal prepare set).
func applyReplaces(evs []eval) {
	for i := range evs {
		lf := evs[i].lf
		if lf == nil || len(lf.Replaces) == 0 {
			continue
		}
		for j := range evs {
			if o := evs[j].lf; o != nil && o.Name != "" && slices.Contains(lf.Replaces, o.Name) {
				evs[j].replaced, evs[j].code = true, rlsconfig.OK
			}
		}
	}
}

func setAmount(r *admission.Request, u limits.Unit, n int64) {
	switch u {
	case limits.UnitTokens:
		r.Tokens = n
	case limits.UnitCost:
		r.Cost = n
	default:
		r.Units = []admission.UnitAmount{{Unit: u, Amount: n}}
	}
}

func zeroUsage(u limits.Unit) admission.Usage { return usageOf(u, 0) }

func usageOf(u limits.Unit, n int64) admission.Usage {
	switch u {
	case limits.UnitTokens:
		return admission.Usage{Tokens: n, TokensKnown: true}
	case limits.UnitCost:
		return admission.Usage{Cost: n, CostKnown: true}
	}
	return admission.Usage{Units: []admission.UnitAmount{{Unit: u, Amount: n}}}
}

// decided reports whether e is decided by its policy: it matched a limit
// that is neither replaced, unlimited nor blocked.
func (e *eval) decided() bool {
	return e.lf != nil && !e.replaced && !e.lf.Unlimited && !e.lf.Blocked
}

// decideUnqueued decides the descriptors whose limits have no queue: the
// response-phase ones are charged, the others admitted together, all or
// none, in one store call when their limits share a store that evaluates
// batches (Controller.TryAdmitAll). Like a limit without a queue in
// decide, they are decided whatever the call's deadline. An error is the
// call's failure; nothing is then held for any descriptor.
func (s *Server) decideUnqueued(ctx context.Context, evs []eval) error {
	ctx = context.WithoutCancel(ctx)
	var ms []admission.Member
	var idx []int
	for i := range evs {
		e := &evs[i]
		if !e.decided() || e.lf.Queued {
			continue
		}
		if e.response {
			s.charge(ctx, e)
			continue
		}
		s.checkEarly(e)
		if ms == nil {
			ms, idx = make([]admission.Member, 0, len(evs)-i), make([]int, 0, len(evs)-i)
		}
		ms = append(ms, admission.Member{Request: e.req})
		idx = append(idx, i)
	}
	if len(ms) == 0 {
		return nil
	}
	err := s.ctl.TryAdmitAll(ctx, ms)
	var rej *admission.Rejection
	if err != nil && !errors.As(err, &rej) {
		return status.Error(codes.Unavailable, "rate limit service unavailable")
	}
	for k, i := range idx {
		e, m := &evs[i], &ms[k]
		e.st, e.hasSt = m.Status, known(m.Status)
		if errors.As(m.Err, &rej) {
			e.code, e.retry = rlsconfig.OverLimit, rej.RetryAfter
			e.hasSt = refusalKnown(rej)
		}
		if m.Ticket.Valid() {
			e.ticket, e.admitted = m.Ticket, true
		}
	}
	return nil
}

// checkEarly makes e a check that charges nothing when the actual of its
// request id arrived first and was charged.
func (s *Server) checkEarly(e *eval) {
	if e.rid != "" && s.pending.settledEarly(s.key(e), s.clock.Now()) {
		e.check, e.cost = true, 1
		setAmount(&e.req, e.lf.Unit, 1)
	}
}

// decide evaluates one descriptor; wait says whether it may wait in its
// policy's queue (bounded by the call's deadline). An error is the call's
// failure (the controller closed, the call canceled while waiting).
//
// A limit without a queue waits for nothing but its store, and is decided
// within the store's own timeout whatever the call's deadline (Envoy's
// filter sends 20ms by default): a store answering a burst a little later
// than Envoy waits decides the request rather than failing open, and
// charges it (Envoy lets a request through when its call times out,
// unless failure_mode_deny). Work reported after the response is charged
// the same way.
func (s *Server) decide(ctx context.Context, e *eval, wait bool) error {
	if e.response {
		s.charge(context.WithoutCancel(ctx), e)
		return nil
	}
	if !e.lf.Queued {
		ctx = context.WithoutCancel(ctx)
	}
	s.checkEarly(e)
	var t admission.Ticket
	var err error
	if wait {
		t, err = s.ctl.Admit(ctx, e.req)
	} else {
		t, err = s.ctl.TryAdmit(ctx, e.req)
	}
	var rej *admission.Rejection
	switch {
	case errors.As(err, &rej):
		e.code, e.st, e.hasSt, e.retry = rlsconfig.OverLimit, rej.Status, refusalKnown(rej), rej.RetryAfter
		return nil
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	case err != nil:
		return status.Error(codes.Unavailable, "rate limit service unavailable")
	}
	e.ticket, e.admitted = t, true
	s.fill(e, t)
	return nil
}

// known reports whether st has figures to answer with: a policy decided
// it, with its store (not failed open, whose figures would read "nothing
// left, retry now").
func known(st admission.Status) bool { return st.Policy != "" && !st.FailedOpen }

// refusalKnown reports whether a refusal's figures describe the caller's
// partition: not when the store failed (on_store_error closed) or the
// partition table was full, as at the HTTP edge.
func refusalKnown(rej *admission.Rejection) bool {
	return known(rej.Status) && rej.Reason != admission.ReasonStoreUnavailable && rej.Reason != admission.ReasonOverflow
}

// charge applies a response-phase actual: it replaces the estimate held
// for the same request id, or is charged on its own (Controller.Charge).
// The bucket then reflects it for the next request; the answer is always
// OK (Envoy does not act on it), with the partition's figures only when
// it replaced an estimate.
func (s *Server) charge(ctx context.Context, e *eval) {
	now := s.clock.Now()
	if e.rid != "" {
		if t, ok := s.pending.take(s.key(e), now); ok {
			s.fill(e, t)
			t.Settle(usageOf(e.lf.Unit, e.cost))
			s.stats.reconciled.Add(1)
			return
		}
	}
	// Work already done: charged whatever the partition holds, a bucket
	// in debt included (within the policy's debt bound), and not counted
	// as a decision. A store that failed has reported to the observer.
	if err := s.ctl.Charge(ctx, e.req, usageOf(e.lf.Unit, e.cost)); err != nil {
		return
	}
	s.stats.charged.Add(1)
	if e.rid != "" {
		s.pending.markSettled(s.key(e), now)
	}
}

// fill sets e's figures from its ticket's.
func (s *Server) fill(e *eval, t admission.Ticket) {
	var buf [1]admission.Status
	if sts := t.Statuses(buf[:0]); len(sts) > 0 {
		e.st, e.hasSt = sts[0], known(sts[0])
	}
}

// key is the reconciliation key of e: its policy, tenant, partition and
// request id.
func (s *Server) key(e *eval) pendingID {
	return s.pending.id(e.lf.Policy, e.req.Tenant, e.req.User, e.rid)
}

// undo gives back what the call's admitted descriptors took.
func (s *Server) undo(evs []eval) {
	for i := range evs {
		e := &evs[i]
		if e.admitted {
			e.ticket.Settle(zeroUsage(e.lf.Unit))
			e.admitted = false
			if e.hasSt && e.st.Remaining < e.st.Limit {
				e.st.Remaining = min(e.st.Limit, e.st.Remaining+e.cost)
			}
		}
	}
}

// keep settles or holds the admitted descriptors' tickets: a check
// charges nothing, an estimate with a request id waits for its actual,
// any other is charged as it came.
func (s *Server) keep(evs []eval, now time.Time) {
	for i := range evs {
		e := &evs[i]
		if !e.admitted {
			continue
		}
		switch {
		case e.check:
			e.ticket.Settle(zeroUsage(e.lf.Unit))
			if e.st.Remaining < e.st.Limit {
				e.st.Remaining++
			}
		case e.rid != "":
			if !s.pending.put(s.key(e), e.ticket, now) {
				e.ticket.Done()
				s.stats.untracked.Add(1)
			}
		default:
			e.ticket.Done()
		}
	}
}

// envoyUnit is the protocol's name for a unit of time.
func envoyUnit(per time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch per {
	case time.Second:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case time.Minute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case 7 * 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// blockedReset is the time to the end of the current unit window.
func blockedReset(lf *rlsconfig.Limit, now time.Time) time.Duration {
	per := int64(lf.Per)
	return time.Duration(per - now.UnixNano()%per)
}

func clampU32(v int64) uint32 { return uint32(min(max(v, 0), math.MaxUint32)) }

func (s *Server) descriptorStatus(e *eval, now time.Time) *rlsv3.RateLimitResponse_DescriptorStatus {
	ds := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if e.code == rlsconfig.OverLimit {
		ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	lf := e.lf
	switch {
	case lf == nil || e.replaced:
		return ds
	case lf.Unlimited:
		ds.LimitRemaining = unlimitedRemaining
		return ds
	}
	name := lf.Name
	if name == "" {
		name = lf.Policy
	}
	ds.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clampU32(lf.Requests), Unit: envoyUnit(lf.Per)}
	switch {
	case lf.Blocked:
		ds.DurationUntilReset = durationpb.New(blockedReset(lf, now))
	case e.hasSt:
		ds.LimitRemaining = clampU32(e.st.Remaining)
		ds.DurationUntilReset = durationpb.New(e.st.Reset)
	}
	return ds
}

// headerNames are the fields headers may set, in the order they are
// sent, with the lower-case names HTTP/2 wants.
var headerNames = [...]struct{ canonical, lower string }{
	{limitheaders.HeaderRateLimitPolicy, "ratelimit-policy"},
	{limitheaders.HeaderRateLimit, "ratelimit"},
	{limitheaders.HeaderXRateLimitLimit, "x-ratelimit-limit"},
	{limitheaders.HeaderXRateLimitRemain, "x-ratelimit-remaining"},
	{limitheaders.HeaderXRateLimitReset, "x-ratelimit-reset"},
	{limitheaders.HeaderRetryAfter, "retry-after"},
}

var headerPool = sync.Pool{New: func() any { return make(http.Header, len(headerNames)) }}

// headers returns the draft-10 RateLimit-Policy and RateLimit fields of
// the enforcing policies evaluated, the X-RateLimit-* fields of the
// tightest, and Retry-After when the call is over limit.
func headers(sts []admission.Status, over bool, retry time.Duration) []*corev3.HeaderValue {
	h := headerPool.Get().(http.Header)
	defer headerPool.Put(h)
	clear(h)
	limitheaders.SetLimitHeaders(h, sts)
	if over {
		limitheaders.SetRetryAfter(h, retry)
	}
	if len(h) == 0 {
		return nil
	}
	out := make([]*corev3.HeaderValue, 0, len(h))
	for _, n := range headerNames {
		if v := h[n.canonical]; len(v) > 0 {
			out = append(out, &corev3.HeaderValue{Key: n.lower, Value: v[0]})
		}
	}
	return out
}
