package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/tokenunits"
	"github.com/sluicehq/sluice/weights"
)

// handleLLM serves the four token-priced endpoints: identity → the
// policies that need no price (request rates, unqueued request
// concurrency), decided before the body is read → body cap and parse
// budget → strict parse and estimate → pricing → the remaining policies →
// proxy → settlement.
func (g *Gateway) handleLLM(c echo.Context, rt route) error {
	r := c.Request()
	ctx := r.Context()
	est := g.est
	arrived := g.now()
	// One state decides the request, from identity to settlement.
	st := g.state.Load()
	var tk admission.Ticket
	var err error
	// A caller over its request rate is refused here, before a byte of
	// its body is read or parsed.
	req, ok := g.identify(c, st)
	ok = ok && g.azureDeployment(c, st, rt)
	if ok && r.ContentLength <= est.MaxBodyBytes() {
		tk, err = g.ctl.Begin(ctx, req)
	}
	switch {
	case !ok:
		return nil
	case r.ContentLength > est.MaxBodyBytes():
		g.tooLarge(c, est.MaxBodyBytes())
		return nil
	case err != nil:
		g.logRefused(&req, arrived, err)
		g.refused(c, st, err)
		return nil
	}
	// Settles the permits held when the request ends before it is
	// admitted whole (a bad body); a no-op once the exchange owns the
	// ticket or it was refused. A request that ends before Continue spent
	// Begin's policies: it is logged for them.
	continued := false
	defer func() {
		if !continued {
			g.logBeginOnly(&req, arrived)
		}
		tk.Done()
	}()
	x := exchange{g: g, c: c}
	var body []byte
	if x.est, body, ok = g.readAndPrice(c, st, rt); !ok || !g.checkModel(c, x.est.Model) || !g.session(c, st, body, &req) {
		return nil
	}
	// The files and other objects stored upstream it names: its tenant's
	// own only (see checkRefs).
	if !g.refsAllowed(c, rt, req.Tenant, &x.est) {
		return nil
	}
	if rt.endpoint == weights.EndpointResponses {
		// A chain's recorded size, a background slot (see ResponsesAPI).
		if x.rsp, ok = g.responsesCall(c, st, rt, req.Tenant, body, &x.est); !ok {
			return nil
		}
		defer x.rsp.release(g.responses)
	}
	var src weights.PriceSource
	if x.price, x.priced, src, err = g.amounts(st, &x.est, &req); err == nil {
		x.rsp.reserve(&req, x.priced)
		if src == weights.PriceFallback {
			g.m.count(ctx, g.m.fallbackPrices, "fallback")
		}
		actx, cancel := g.admissionContext(c)
		continued = true
		err = tk.Continue(actx, req)
		cancel()
	}
	if err != nil {
		g.logRefused(&req, arrived, err)
		g.refused(c, st, err)
		return nil
	}
	x.tk, x.st, x.req, x.arrived, x.admitted = tk, st, req, arrived, g.now()
	x.gen = g.genAIKey(st, rt, x.est.Model)
	defer x.measure()
	defer x.settleZeroOutput() // settles only if nothing else did
	g.admitted(c.Response(), st, tk)
	g.queueWaited(ctx, st, req.Priority, tk)

	injected := false
	if x.est.Stream && !x.est.IncludeUsage && azureStreamUsage(rt.az) {
		if b, inj, err := weights.InjectIncludeUsage(rt.endpoint, body); err == nil && inj {
			body, injected = b, true
		}
	}
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The timeout bounds a whole non-streaming call, and a stream until its
	// first byte; from then on a stream is bounded by its idle timeout.
	timer := time.AfterFunc(g.cfg.Timeout, cancel)
	defer timer.Stop()
	resp, ok := x.call(uctx, rt, body, req)
	if !ok {
		return nil
	}
	defer resp.Body.Close()
	g.m.upstreamStatus(ctx, resp.StatusCode)
	if encoded(resp) {
		x.unreadable(resp)
		return nil
	}
	if streamed(resp) {
		if timer.Stop() {
			x.stream(uctx, cancel, resp, injected)
			if x.rsp.handedOver() {
				tk = admission.Ticket{} // the background watch's now
			}
		} else {
			g.upstreamFailed(c, ctx, context.DeadlineExceeded)
		}
		return nil
	}
	data, err := readLimited(resp.Body, g.cfg.MaxResponseBytes)
	if err != nil {
		g.upstreamFailed(c, ctx, err)
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		// Nothing was generated: the upstream refused or failed.
		x.settle(weights.Usage{})
		g.upstreamError(c, resp, data)
		return nil
	}
	if x.background(data) {
		tk = admission.Ticket{} // the background watch's now
		g.writeUpstream(c, resp, data)
		return nil
	}
	// The usage the upstream reports is checked against the request: a
	// missing or implausible figure is charged as reserved, never as
	// nothing, and counted.
	rep, err := weights.ReadUsage(data)
	u, fb := x.est.CheckUsage(rep)
	g.genai.responseModel(ctx, &x.gen, data)
	if fb != weights.FallbackNone {
		g.m.count(ctx, g.m.usageFallbacks, fb.String())
	}
	if x.rsp != nil {
		x.rsp.answered(g, weights.ReadResponseInfo(data), u)
	}
	x.settle(u)
	if err != nil {
		g.m.count(ctx, g.m.upstreamFailures, "bad_response")
		writeError(c.Response(), http.StatusBadGateway, "server_error", "bad_upstream_response", "", "The upstream API returned a response that is not valid JSON.")
		return nil
	}
	g.writeUpstream(c, resp, data)
	return nil
}

// encoded reports whether resp's body has a Content-Encoding (gzip...),
// which the gateway never asks for (it sends no Accept-Encoding): it can
// neither read its usage nor count its stream.
func encoded(resp *http.Response) bool {
	ce := resp.Header.Get("Content-Encoding")
	return ce != "" && !strings.EqualFold(ce, "identity")
}

// unreadable answers an upstream response the gateway cannot read (see
// encoded) with 502 bad_upstream_response, never its bytes: passed on,
// its output would reach the client unmetered. A 200 is charged as
// reserved, as any unreadable usage is; an error nothing, as the
// upstream's errors are.
func (x *exchange) unreadable(resp *http.Response) {
	g, ctx := x.g, x.c.Request().Context()
	u := weights.Usage{}
	if resp.StatusCode == http.StatusOK {
		rep, _ := weights.ReadUsage(nil)
		var fb weights.UsageFallback
		u, fb = x.est.CheckUsage(rep)
		g.m.count(ctx, g.m.usageFallbacks, fb.String())
	}
	x.settle(u)
	g.m.count(ctx, g.m.upstreamFailures, "bad_response")
	writeError(x.c.Response(), http.StatusBadGateway, "server_error", "bad_upstream_response", "",
		"The upstream API returned an encoded response (Content-Encoding) the gateway did not ask for.")
}

// errNotPriced refuses a request for a model the prices cannot price
// while a cost policy is installed (400 model_not_priced).
var errNotPriced = errors.New("gateway: the model has no price")

// maxDefaultOutput bounds Config.DefaultMaxTokens, as the policy file
// bounds its models' default_max_tokens.
const maxDefaultOutput = 10_000_000

// defaultOutput sets the output reservation of e, a request that sets no
// output limit of its own, to the default of its model in st's models
// section, else Config.DefaultMaxTokens, per completion asked for; it
// leaves the estimator's default when neither is set.
func (g *Gateway) defaultOutput(st *state, e *weights.Estimate) {
	if e.DefaultOutput <= 0 {
		return
	}
	def := g.cfg.DefaultMaxTokens
	if r, ok := weights.MatchModel(st.outputs, e.Model); ok {
		def = r.MaxOutputTokens
	}
	if def > 0 {
		// def <= 10^7: the product saturates at MaxAmount, never wraps.
		e.OutputTokens = def * min(e.DefaultOutput, limits.MaxAmount/def)
	}
}

// amounts is the one pricing step of a request: the estimate's tokens
// (the output of a request without max_tokens as st's models section or
// Config.DefaultMaxTokens says, see defaultOutput), the output capped by
// Config.MaxOutputReserve, and with a cost policy
// the model's price from st and the reservation's cost, bounded to
// [0, limits.MaxAmount]; errNotPriced for a model st cannot price.
func (g *Gateway) amounts(st *state, e *weights.Estimate, req *admission.Request) (price weights.Price, priced bool, src weights.PriceSource, err error) {
	if st.cost {
		if price, src, priced = st.prices.Resolve(e.Model); !priced {
			return price, false, src, errNotPriced
		}
	}
	g.defaultOutput(st, e)
	in, out := e.InputTokens, e.OutputTokens
	if m := g.cfg.MaxOutputReserve; m > 0 && out > m {
		out = m
	}
	req.Model = e.Model
	// Tokens and the units input_tokens and output_tokens; each figure is
	// at most weights.MaxTokens = MaxAmount, and their sum saturates there.
	tokenunits.Request(req, weights.TokenUnits{Input: max(in, 0), Output: max(out, 0)})
	req.Cost = 0
	if priced {
		req.Cost = min(price.EstimateMicros(in, out), limits.MaxAmount)
	}
	return price, priced, src, nil
}

// readAndPrice reads the body within the parse budget and prices it as
// the endpoint of rt (an Azure OpenAI request as its deployment's model,
// by the state st), answering the client itself when it cannot: 413 for
// a body over the cap, 400 for one that is unreadable or malformed, 404
// for an Azure OpenAI body naming no deployment, 503 when the budget
// stays full.
func (g *Gateway) readAndPrice(c echo.Context, st *state, rt route) (weights.Estimate, []byte, bool) {
	ep := rt.endpoint
	ctx := c.Request().Context()
	est := g.est
	body, release, ok := g.readBody(c)
	if !ok {
		return weights.Estimate{}, nil, false
	}
	defer release()
	var e weights.Estimate
	var err error
	if as := azureModel(st, rt); as != nil {
		e, err = est.EstimateAs(ep, body, as)
	} else {
		e, err = est.EstimateModel(ep, pathModel(c), body)
	}
	if err == nil {
		return e, body, true
	}
	var mal *weights.MalformedError
	switch {
	case errors.As(err, &mal):
		code, msg := "invalid_type", mal.Error()
		if mal.Field == "" {
			code, msg = "invalid_json", "We could not parse the JSON body of your request: "+mal.Error()
		}
		writeError(c.Response(), http.StatusBadRequest, "invalid_request_error", code, mal.Field, msg)
		g.m.count(ctx, g.m.clientErrors, code)
	case errors.Is(err, weights.ErrTooLarge):
		g.tooLarge(c, est.MaxBodyBytes())
	case errors.Is(err, errUnknownDeployment):
		g.deploymentNotFound(c)
	default:
		g.log.ErrorContext(ctx, "llmproxy: estimate failed", "err", err)
		writeError(c.Response(), http.StatusInternalServerError, "server_error", "internal_error", "", "The request could not be priced.")
	}
	return weights.Estimate{}, nil, false
}

// readBody reads the body within the parse budget, answering the client
// itself when it cannot (413, 400, 503 as readAndPrice); release returns
// the body's room in the budget.
func (g *Gateway) readBody(c echo.Context) (body []byte, release func(), ok bool) {
	r := c.Request()
	ctx := r.Context()
	est := g.est
	want := r.ContentLength
	if want < 0 {
		want = est.MaxBodyBytes()
	}
	got, ok := g.budget.acquire(ctx, want)
	if !ok {
		if ctx.Err() == nil {
			g.m.count(ctx, g.m.clientErrors, "parse_budget_full")
			c.Response().Header().Set("Retry-After", "1")
			writeError(c.Response(), http.StatusServiceUnavailable, "server_error", "server_busy", "",
				"The gateway is reading too many request bodies at once. Please retry.")
		}
		return nil, nil, false
	}
	body, err := est.ReadBody(r.Body)
	if err != nil {
		g.budget.release(got)
		if errors.Is(err, weights.ErrTooLarge) {
			g.tooLarge(c, est.MaxBodyBytes())
		} else if ctx.Err() == nil {
			writeError(c.Response(), http.StatusBadRequest, "invalid_request_error", "invalid_body", "", "The request body could not be read.")
		}
		return nil, nil, false
	}
	return body, func() { g.budget.release(got) }, true
}

func (g *Gateway) tooLarge(c echo.Context, limit int64) {
	g.m.count(c.Request().Context(), g.m.clientErrors, "request_too_large")
	writeError(c.Response(), http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "",
		"The request body is larger than "+strconv.FormatInt(limit, 10)+" bytes.")
}

// exchange is one admitted LLM request on its way through the proxy.
type exchange struct {
	// What a stream's charge reads comes first.
	g      *Gateway
	tk     admission.Ticket
	priced bool
	// units holds the token units of a stream's charges, which run on
	// nearly every chunk of a slow stream: one buffer, not one each.
	units [3]admission.UnitAmount
	price weights.Price

	c   echo.Context
	st  *state // what the request was decided with
	est weights.Estimate

	// For the request log: the request as admitted, when it arrived and
	// when it was admitted.
	req               admission.Request
	arrived, admitted time.Time

	gen genAIKey // the GenAI metrics' attributes

	rsp *responseCall // a Responses API call; nil on other routes
}

// usage converts upstream usage to the admission figures: tokens, the
// token units (the prompt read from a cache apart) and the cost, the
// units appended to buf (nil for a new slice).
func (x *exchange) usage(buf []admission.UnitAmount, u weights.Usage) admission.Usage {
	au := tokenunits.Usage(buf, u.Units())
	if x.priced {
		au.Cost, au.CostKnown = satSum(x.price.CostMicros(u), x.rsp.feeMicros()), true
	}
	return au
}

// settle settles the ticket with u, once, logs the request, records its
// tokens on the GenAI metrics and the settled amounts on its span.
func (x *exchange) settle(u weights.Usage) {
	au := x.usage(nil, u)
	ctx := x.c.Request().Context()
	if x.tk.Valid() {
		x.g.logAdmitted(&x.req, x.arrived, au, x.admitted)
		x.g.genai.usage(ctx, x.gen, x.est.Endpoint, u)
		settledEvent(ctx, &au)
	}
	x.tk.SettleContext(ctx, au)
}

// refund settles the ticket as a call that did not happen (a provider
// 429 about to be absorbed: the request is admitted again): every unit
// is given back, the request and its session step included (see
// admission.Ticket.Refund), and the request is logged as having cost
// nothing.
func (x *exchange) refund() {
	if x.tk.Valid() {
		au := x.usage(nil, weights.Usage{})
		ctx := x.c.Request().Context()
		x.g.logAdmitted(&x.req, x.arrived, au, x.admitted)
		x.g.genai.usage(ctx, x.gen, x.est.Endpoint, weights.Usage{})
		settledEvent(ctx, &au)
	}
	x.tk.Refund()
}

// measure records the duration of the admitted request on the GenAI
// metrics, once it has been answered.
func (x *exchange) measure() {
	x.g.genai.requestDuration(x.c.Request().Context(), x.gen, x.g.now().Sub(x.arrived), x.c.Response().Status)
}

// logRefused writes a request the policies refused to the request log,
// with its estimates as its usage.
func (g *Gateway) logRefused(req *admission.Request, arrived time.Time, err error) {
	var rej *admission.Rejection
	if g.opt.requestLog != nil && errors.As(err, &rej) {
		g.opt.requestLog.Log(req, arrived, admission.Usage{}, 0)
	}
}

// logBeginOnly writes a request that Begin admitted and that ended
// before its body was priced (refused as malformed, too large or
// unreadable) to the request log: a begin_only record of req as Begin
// was given it, never its body.
func (g *Gateway) logBeginOnly(req *admission.Request, arrived time.Time) {
	if l := g.opt.requestLog; l != nil {
		l.LogBeginOnly(req, arrived)
	}
}

// logAdmitted writes an admitted request that has ended to the request
// log: its actual usage (the zero Usage keeps its estimates) and how long
// it held its permits, from its admission.
func (g *Gateway) logAdmitted(req *admission.Request, arrived time.Time, u admission.Usage, admitted time.Time) {
	if l := g.opt.requestLog; l != nil {
		l.Log(req, arrived, u, g.now().Sub(admitted))
	}
}

// settleZeroOutput settles a request that ended before any output (the
// upstream failed or the client left): the prompt is charged, as a
// provider would.
func (x *exchange) settleZeroOutput() {
	if x.tk.Valid() {
		x.settle(weights.Usage{InputTokens: x.est.InputTokens})
	}
}

// writeUpstream answers with an upstream response's status, headers and
// body.
func (g *Gateway) writeUpstream(c echo.Context, resp *http.Response, body []byte) {
	h := c.Response().Header()
	for k, vs := range resp.Header {
		if dropResponseHeader(k) {
			continue
		}
		h[k] = vs
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	c.Response().WriteHeader(resp.StatusCode)
	_, _ = c.Response().Write(body)
}

// upstreamError answers an upstream error response. A client error (400,
// 404, 422...) is the client's own and passes through. The provider's
// throttling (429) and failures (5xx) pass through with their status,
// retry hints, type and code, but with a message of the gateway's: the
// provider's messages name its account (organization, project), which is
// none of a tenant's business. An upstream 401 or 403 means the gateway's
// own upstream key is wrong: the client gets 502, not a hint that its key
// is.
func (g *Gateway) upstreamError(c echo.Context, resp *http.Response, data []byte) {
	st := resp.StatusCode
	typ, code := upstreamErrorType(st), "upstream_error"
	e, ok := parseOpenAIError(data)
	if ok {
		if e.typ != "" {
			typ = e.typ
		}
		code = e.code
	}
	st = geminiUpstreamError(c.Response(), resp, data)
	switch {
	case bedrockShaped(c.Response()) && st < 500 && st != http.StatusTooManyRequests && st != http.StatusUnauthorized && st != http.StatusForbidden:
		// Bedrock's own refusal of the request (ValidationException...),
		// its type in x-amzn-ErrorType, its message the client's to read.
		g.writeUpstream(c, resp, data)
		return
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		g.log.ErrorContext(c.Request().Context(), "llmproxy: the upstream refused the gateway's key", "status", st)
		g.m.count(c.Request().Context(), g.m.upstreamFailures, "unauthorized")
		writeError(c.Response(), http.StatusBadGateway, "server_error", "upstream_unauthorized", "",
			"The upstream API refused the gateway's credentials.")
		return
	case st == http.StatusTooManyRequests:
		data = errorBodyFor(c.Response(), st, typ, code, "The upstream API is rate limiting the gateway (the provider's limit, not yours). Please retry after the advised delay.")
	case st >= 500:
		data = errorBodyFor(c.Response(), st, typ, code, "The upstream API failed with status "+strconv.Itoa(st)+". Please retry.")
	case !e.shaped:
		data = errorBodyFor(c.Response(), st, typ, code, "The upstream API refused the request with status "+strconv.Itoa(st)+".")
	default:
		g.writeUpstream(c, resp, data)
		return
	}
	resp.Header.Set("Content-Type", "application/json")
	g.writeUpstream(c, resp, data)
}

// openAIError is what an upstream error body says: its type and code,
// when it has an "error" object, and whether that object has a message,
// the shape every OpenAI-compatible client understands.
type openAIError struct {
	typ, code string
	shaped    bool
}

// parseOpenAIError reads an upstream error body.
func parseOpenAIError(body []byte) (openAIError, bool) {
	var v struct {
		Error *struct {
			Type    any     `json:"type"`
			Code    any     `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil || v.Error == nil {
		return openAIError{}, false
	}
	str := func(x any) string {
		switch y := x.(type) {
		case string:
			return y
		case float64:
			return strconv.FormatFloat(y, 'f', -1, 64)
		}
		return ""
	}
	return openAIError{typ: str(v.Error.Type), code: str(v.Error.Code), shaped: v.Error.Message != nil}, true
}

// upstreamFailed answers a call that got no usable response: 504 for a
// timeout, 502 otherwise; nothing when the client itself left.
func (g *Gateway) upstreamFailed(c echo.Context, clientCtx context.Context, err error) {
	if clientCtx.Err() != nil {
		g.m.count(context.Background(), g.m.clientCancels, "before_response")
		c.Response().Status = 499
		return
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		g.m.count(clientCtx, g.m.upstreamFailures, "timeout")
		writeError(c.Response(), http.StatusGatewayTimeout, "server_error", "upstream_timeout", "", "The upstream API did not answer in time.")
	default:
		reason := "unavailable"
		if errors.Is(err, syscall.ECONNREFUSED) {
			reason = "connection_refused"
		}
		g.log.WarnContext(clientCtx, "llmproxy: upstream call failed", "err", err)
		g.m.count(clientCtx, g.m.upstreamFailures, reason)
		writeError(c.Response(), http.StatusBadGateway, "server_error", "upstream_unavailable", "", "The upstream API could not be reached.")
	}
}

func readLimited(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errors.New("upstream response too large")
	}
	return b, nil
}

func upstreamErrorType(status int) string {
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}
