package gateway

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/upstream"
)

// maxGaugeGroups bounds the groups of one store the budget gauges report,
// so the series stay bounded whatever model names the provider answers
// for; the groups with the least budget left come first.
const maxGaugeGroups = 32

// maxThrottleBody bounds what is read of a provider 429's body to tell a
// rate limit from an exhausted account.
const maxThrottleBody = 64 << 10

// Providers are the upstream stores a policy file declares (its stores
// section, config.File.Upstreams): each an upstream.Store guarding one
// provider account's limits. The gateway feeds every upstream response's
// limit headers to each (Store.Observe), grouped as the entry says (by
// the request's model, or as one budget for the whole upstream), and
// absorbs the provider's 429s: the request is settled as nothing used,
// admitted again within the caller's deadline (so it waits in the
// policy's queue until the provider's pause ends, or is refused at once
// when the wait is hopeless) and retried once; only a second 429 reaches
// the client.
type Providers struct {
	stores []provider // by name
	decl   map[string]config.Upstream
}

// provider is one upstream store and its grouping.
type provider struct {
	name  string
	group config.Grouping
	store *upstream.Store
}

// NewProviders builds an upstream.Store for every upstream store f
// declares, its account named after the entry; static, when not nil,
// holds the policies' static budgets (a shared store, so a fleet of
// gateways keeps one published budget, and with the Redis store, an
// upstream.Ledger, learns the provider's accounting together: one
// charge ratio per account and model), else they are held in memory. With no store declared it returns an empty
// Providers, which observes and absorbs nothing.
func NewProviders(f *config.File, static backend.Store) (*Providers, error) {
	p := &Providers{decl: f.Upstreams}
	for name, u := range f.Upstreams {
		cfg := upstream.Config{Account: name, MaxGroups: u.MaxGroups, Pause: u.Pause, MaxPause: u.MaxPause, RemainingTTL: u.RemainingTTL,
			Accounting: upstream.Accounting{Initial: u.ChargeRatio.Initial, Min: u.ChargeRatio.Min, Max: u.ChargeRatio.Max, Window: u.ChargeRatio.Window}}
		if a := u.Adaptive; a != nil {
			cfg.Adaptive = &upstream.Adaptive{Min: a.Min, Tolerance: a.Tolerance, Smoothing: a.Smoothing, Window: a.Window}
		}
		s, err := upstream.New(cfg, upstream.WithStaticStore(static))
		if err != nil {
			return nil, fmt.Errorf("stores.%s: %w", name, err)
		}
		p.stores = append(p.stores, provider{name: name, group: u.GroupBy, store: s})
	}
	slices.SortFunc(p.stores, func(a, b provider) int { return cmp.Compare(a.name, b.name) })
	return p, nil
}

// Options returns the controller options that register the stores, each
// under its name.
func (p *Providers) Options() []admission.Option {
	out := make([]admission.Option, 0, len(p.stores))
	for _, s := range p.stores {
		out = append(out, admission.WithStore(s.name, s.store))
	}
	return out
}

// Store returns the store declared under name, or nil.
func (p *Providers) Store(name string) *upstream.Store {
	for _, s := range p.stores {
		if s.name == name {
			return s.store
		}
	}
	return nil
}

// check refuses a file whose stores section differs from the one the
// stores were built from: stores are registered with the controller once,
// so changing them takes a restart.
func (p *Providers) check(f *config.File) error {
	var decl map[string]config.Upstream
	if p != nil {
		decl = p.decl
	}
	switch {
	case len(decl) == 0 && len(f.Upstreams) == 0 || reflect.DeepEqual(decl, f.Upstreams):
		return nil
	case p == nil:
		return errors.New("stores: the file declares upstream stores: build them with NewProviders, register them with the controller and pass them with WithProviders")
	}
	return errors.New("stores: the stores section changed; it takes effect on a restart, not a reload")
}

// observe feeds a provider response, as soon as its headers arrive, to
// the stores that guarded the request (the stores of the policies tk
// passed, as st names them): the account it went to, never another
// provider's or another account's. Its group is model for a store
// grouped by model (a response without one, the models listing, speaks
// about none) and "" for one grouped by upstream. Only answers that speak about the limits
// are read: successes, 429 and 503, so that neither a client's
// misspelled model (404) nor any other error makes a group. A success's
// time to first byte, ttfb (0 when not measured), feeds the stores'
// adaptive concurrency; sent, the request's token estimate (0 when not
// known), teaches them the provider's accounting (upstream.Accounting).
func (g *Gateway) observe(resp *http.Response, st *state, tk admission.Ticket, model string, ttfb time.Duration, sent int64) {
	p := g.opt.providers
	if p == nil || len(p.stores) == 0 {
		return
	}
	code := resp.StatusCode
	if (code < 200 || code >= 300) && code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
		return
	}
	var buf [8]admission.Status
	passed := tk.Statuses(buf[:0])
	now := g.now()
	r := upstream.Parse(resp.Header.Get, code, now)
	r.Sent = sent
	for _, s := range p.stores {
		if !st.guards(passed, s.name) {
			continue
		}
		group := ""
		switch {
		case s.group == config.GroupByUpstream:
		case model != "":
			group = model
		default:
			continue
		}
		s.store.Observe(group, r)
		if ttfb > 0 && code < 300 {
			s.store.ObserveLatency(group, ttfb, now)
		}
	}
}

// guards reports whether one of the policies passed is on store.
func (st *state) guards(passed []admission.Status, store string) bool {
	for i := range passed {
		if st.store[passed[i].Policy] == store {
			return true
		}
	}
	return false
}

// now is the instant a response arrived, on the controller's clock when
// one is configured.
func (g *Gateway) now() time.Time {
	if g.opt.clock != nil {
		return g.opt.clock.Now()
	}
	return time.Now()
}

// call sends an admitted LLM request upstream and feeds the answer to the
// providers' stores. A provider 429 (other than an exhausted account,
// insufficient_quota) is absorbed once when the file declares upstream
// stores: the ticket is refunded whole (the request, its session step
// and its loop count included, so that the client's one call is charged
// once), the request admitted again with the caller's deadline and, once
// admitted, sent again. It
// answers the client itself and returns false when there is no response
// to pass on: the call failed, or the request was not admitted again.
func (x *exchange) call(ctx context.Context, rt route, body []byte, req admission.Request) (*http.Response, bool) {
	g, c := x.g, x.c
	r := c.Request()
	sent := time.Now()
	resp, err := g.roundTrip(ctx, x.st, r, rt, "", body)
	if err != nil {
		g.upstreamFailed(c, r.Context(), err)
		return nil, false
	}
	g.observe(resp, x.st, x.tk, x.est.Model, time.Since(sent), req.Tokens)
	if resp.StatusCode != http.StatusTooManyRequests || g.opt.providers == nil || len(g.opt.providers.stores) == 0 {
		return resp, true
	}
	data, err := readLimited(resp.Body, maxThrottleBody)
	resp.Body.Close()
	if err != nil {
		g.upstreamFailed(c, r.Context(), err)
		return nil, false
	}
	if e, _ := parseOpenAIError(data); e.code == "insufficient_quota" {
		// Waiting does not refill an account: the client is told.
		resp.Body = io.NopCloser(bytes.NewReader(data))
		g.m.throttled(ctx, "passed_through")
		return resp, true
	}
	g.m.upstreamStatus(ctx, resp.StatusCode)
	x.refund() // the provider served nothing: the call is decided again
	actx, cancel := g.admissionContext(c)
	tk, err := g.ctl.Admit(actx, req)
	cancel()
	if err != nil {
		g.m.throttled(ctx, "refused")
		g.logRefused(&req, g.now(), err)
		g.refused(c, x.st, err)
		return nil, false
	}
	g.m.throttled(ctx, "absorbed")
	// The request log holds both admissions, as the controller saw them.
	x.tk, x.admitted = tk, g.now()
	g.admitted(c.Response(), x.st, tk)
	sent = time.Now()
	if resp, err = g.roundTrip(ctx, x.st, r, rt, "", body); err != nil {
		g.upstreamFailed(c, r.Context(), err)
		return nil, false
	}
	g.observe(resp, x.st, x.tk, x.est.Model, time.Since(sent), req.Tokens)
	if resp.StatusCode == http.StatusTooManyRequests {
		g.m.throttled(ctx, "passed_through")
	}
	return resp, true
}

// acceptedCut returns what a running stream's charge that rej refused
// (nil: none) cuts it for: the provider's budget is settled, not
// enforced, once the provider accepted the request (it charges it
// anyway: cutting would waste what it counted), so a refusal by a policy
// on an upstream store cuts only when a tenant policy the stream is
// charged on (a token or cost policy, enforcing) has nothing left too.
func (x *exchange) acceptedCut(rej *admission.Rejection) *admission.Rejection {
	p := x.g.opt.providers
	if rej == nil || p == nil || p.Store(x.st.store[rej.Policy]) == nil {
		return rej
	}
	var buf [8]admission.Status
	for _, s := range x.tk.Statuses(buf[:0]) {
		if s.Mode != limits.Enforce || !s.Algorithm.IsRate() || s.Unit == "" || s.Unit == limits.UnitRequests ||
			s.Remaining > 0 || p.Store(x.st.store[s.Policy]) != nil {
			continue
		}
		reason := admission.ReasonRate
		if s.Algorithm == limits.Quota {
			reason = admission.ReasonQuota
		}
		return &admission.Rejection{Policy: s.Policy, Reason: reason, RetryAfter: s.Reset, Status: s}
	}
	return nil
}

// providerInstruments are the metrics of the providers' budgets: what
// became of the provider's 429s, and, per store and group, the learned
// budget and pause.
type providerInstruments struct {
	throttled metric.Int64Counter
}

// throttled counts a provider 429 by outcome: absorbed (admitted again
// and retried), refused (not admitted again: the client got the
// gateway's answer), passed_through (the client got the provider's 429).
func (m *instruments) throttled(ctx context.Context, outcome string) {
	m.provider.throttled.Add(ctx, 1, m.opt("outcome", outcome))
}

// initProviders creates the providers' instruments: the outcome counter,
// and the gauges read from each store at collection time
// (llmproxy.provider.budget.remaining and .limit by store, group and
// dimension; llmproxy.provider.paused by store and group; with adaptive
// concurrency, llmproxy.provider.concurrency.limit by store and group and
// llmproxy.provider.ttfb by store, group and average;
// llmproxy.provider.charge_ratio by store and group), at most
// maxGaugeGroups groups a store.
func (g *Gateway) initProviders(meter metric.Meter) error {
	errs := [8]error{6: g.m.initClasses(meter)}
	m := &g.m.provider
	m.throttled, errs[0] = meter.Int64Counter("llmproxy.provider.throttled",
		metric.WithDescription("The provider's 429 answers to the gateway, by outcome: absorbed (admitted again and retried), refused (not admitted again), passed_through (the client got the provider's 429)."), metric.WithUnit("{response}"))
	remaining, err := meter.Int64ObservableGauge("llmproxy.provider.budget.remaining",
		metric.WithDescription("The provider's remaining budget as learned from its headers, less what was admitted since, by store, group and dimension."), metric.WithUnit("{unit}"))
	errs[1] = err
	limit, err := meter.Int64ObservableGauge("llmproxy.provider.budget.limit",
		metric.WithDescription("The provider's limit as its headers report it, by store, group and dimension."), metric.WithUnit("{unit}"))
	errs[2] = err
	paused, err := meter.Float64ObservableGauge("llmproxy.provider.paused",
		metric.WithDescription("How long the group stays paused after a provider refusal, by store and group."), metric.WithUnit("s"))
	errs[3] = err
	concurrency, err := meter.Int64ObservableGauge("llmproxy.provider.concurrency.limit",
		metric.WithDescription("The adaptive cap of the concurrency policies on an upstream store with adaptive_concurrency, by store and group."), metric.WithUnit("{request}"))
	errs[4] = err
	ttfb, err := meter.Float64ObservableGauge("llmproxy.provider.ttfb",
		metric.WithDescription("The provider's time to first byte the adaptive cap follows, by store, group and average (short: the last 10 answers; baseline: the long-term average)."), metric.WithUnit("s"))
	errs[5] = err
	ratio, err := meter.Float64ObservableGauge("llmproxy.provider.charge_ratio",
		metric.WithDescription("What the provider's limiter counts per token of the gateway's estimate, as learned from its headers (the store's token policies reserve at it), by store and group."), metric.WithUnit("1"))
	errs[7] = err
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	p := g.opt.providers
	if p == nil || len(p.stores) == 0 {
		return nil
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := g.now()
		for _, s := range p.stores {
			for _, st := range gaugeGroups(s.store.Groups(now)) {
				base := []attribute.KeyValue{attribute.String("store", s.name), attribute.String("group", st.Group)}
				o.ObserveFloat64(paused, st.Paused.Seconds(), metric.WithAttributes(base...))
				o.ObserveFloat64(ratio, st.Ratio, metric.WithAttributes(base...))
				if st.Concurrency > 0 {
					o.ObserveInt64(concurrency, st.Concurrency, metric.WithAttributes(base...))
					o.ObserveFloat64(ttfb, st.TTFB.Seconds(), metric.WithAttributes(append(base, attribute.String("average", "short"))...))
					o.ObserveFloat64(ttfb, st.BaselineTTFB.Seconds(), metric.WithAttributes(append(base, attribute.String("average", "baseline"))...))
				}
				for d := upstream.Requests; d <= upstream.OutputTokens; d++ {
					f := st.Figures[d]
					if !f.HasRemaining {
						continue
					}
					attrs := metric.WithAttributes(append(base, attribute.String("dimension", d.String()))...)
					o.ObserveInt64(remaining, f.Remaining, attrs)
					if f.HasLimit {
						o.ObserveInt64(limit, f.Limit, attrs)
					}
				}
			}
		}
		return nil
	}, remaining, limit, paused, concurrency, ttfb, ratio)
	if reg != nil {
		g.m.regs = append(g.m.regs, reg)
	}
	return err
}

// gaugeGroups returns at most maxGaugeGroups groups: the paused first,
// then those with the least tokens (else requests) left.
func gaugeGroups(gs []upstream.GroupStatus) []upstream.GroupStatus {
	left := func(s *upstream.GroupStatus) int64 {
		for _, d := range []upstream.Dimension{upstream.Tokens, upstream.Requests} {
			if f := s.Figures[d]; f.HasRemaining {
				return f.Remaining
			}
		}
		return 1<<63 - 1
	}
	slices.SortFunc(gs, func(a, b upstream.GroupStatus) int {
		if c := cmp.Compare(b.Paused, a.Paused); c != 0 {
			return c
		}
		if la, lb := left(&a), left(&b); la != lb {
			return cmp.Compare(la, lb)
		}
		return cmp.Compare(a.Group, b.Group)
	})
	return gs[:min(len(gs), maxGaugeGroups)]
}
