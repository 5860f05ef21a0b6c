package gateway

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/jsonscan"
	"github.com/sluicehq/sluice/weights"
)

// ResponsesAPI configures OpenAI's Responses API on the gateway beyond
// POST /v1/responses, which is priced like every LLM route: chained calls
// (previous_response_id), the routes of one response, background
// responses and built-in tool fees. Every field documents its default.
//
// # Chained calls
//
// A response created with previous_response_id carries its whole chain
// as input, kept by the provider: nothing in the request says how large
// it is. The gateway records, per tenant, the size of every response it
// proxied (its input plus output tokens as the provider reported them:
// the tokens the chain holds after it) and prices a chained call as that
// recorded size plus its own input, never from zero. An id the tenant
// has no record of (evicted, created elsewhere, or another tenant's: the
// gateway cannot tell these apart and never says which) is refused with
// the 404 of an unknown response, and a call naming a conversation with
// a 400: every tenant's responses live in the one upstream account, so a
// tenant that learned another's response id could otherwise have the
// provider continue that tenant's conversation for it. AllowUnknownChains
// admits them instead, priced as UnknownChainTokens. An input item that
// refers to an item of a stored response (item_reference, a reasoning
// item without its encrypted_content) is a 400 for the same reason, and
// so is a chat message naming the audio of an earlier response, unless
// AllowUnknownChains: the gateway records responses, not their items. The files and vector stores a body names
// are checked too (see Config.AllowUnknownFiles).
//
// The records are kept in memory, MaxRecordsPerTenant per tenant and
// MaxRecords in all (the oldest is forgotten first), or on the Redis
// server the gateway shares with other replicas (WithResponseRecords),
// under the same bounds, so that a chain continued through another
// replica is priced from the same record.
//
// # The routes of one response
//
// GET /v1/responses/{id}, DELETE /v1/responses/{id}, GET
// /v1/responses/{id}/input_items and POST /v1/responses/{id}/cancel
// reach the upstream only for the tenant whose call created the
// response (the record holds its owner): another tenant, or an id the
// gateway has no record of, gets a 404 in OpenAI's error shape, the same
// answer for both. An id is 1 to 128 ASCII letters, digits, - and _; the
// query of input_items is rebuilt from the parameters it knows (limit,
// order, after, before, include), each checked; that of the other routes
// is dropped (a retrieval is answered as an object, never as a resumed
// stream). The routes are limited
// by requests only: policies match them as "GET /v1/responses/{id}",
// "DELETE /v1/responses/{id}", "GET /v1/responses/{id}/input_items" and
// "POST /v1/responses/{id}/cancel".
//
// With Config.Azure, the same routes under /openai/responses/ and
// /openai/v1/responses/ (policies match "GET /openai/responses/{id}" and
// so on) serve the responses of the Azure OpenAI resource, as these
// serve OpenAI's: the same records prove ownership, the api-version
// (optional, checked as on Azure's other routes) is passed on, the
// resource is called with Config.Azure.Key, and errors are in Azure's
// shape. A tenant's records of the responses made on the Azure resource
// are kept apart from those made on the OpenAI-shaped upstream
// (objectBase.owner): a record opens its id on its own upstream only.
//
// # Background responses
//
// A response created with background: true is answered at once, queued
// or in progress, and runs on at the provider: its reservation (tokens,
// cost, and the concurrency it holds) stays open until it ends, as a
// batch's does. The gateway sees it end on the tenant's own retrievals,
// and polls it every PollInterval in the background; it is then settled
// at its reported usage (a failed one with no usage is refunded). A
// cancellation settles nothing by itself: Azure OpenAI's is best effort
// (a response answered cancelled can still complete), so the response
// is polled on until a retrieval shows it ended. A cancelled one is
// charged the usage reported; without usage (OpenAI reports none for a
// cancelled response, though it bills the tokens made before) it is
// charged as reserved, and at least the text its output kept, unless the
// gateway saw it queued and nothing else and its cancellation was
// answered cancelled with no output: nothing ran, and it is refunded.
// One created on an Azure OpenAI route is polled on the Azure
// resource: GET /openai/responses/{id} with the
// api-version of its creation (from a deployment route too), or GET
// /openai/v1/responses/{id} when created on the v1 path. One open
// longer than MaxHold is settled at its estimate and forgotten. A
// tenant has at most MaxBackgroundPerTenant open, the gateway
// MaxBackground (429 too_many_background_responses beyond, before
// anything is admitted). The open reservations live in
// the gateway's memory. A background call that also streams is settled
// when its stream completes, as any stream; when its stream ends before
// (the client left, the stream was cut), the response runs on at the
// provider and its reservation is held as above.
//
// # Built-in tools
//
// The web_search and file_search tools cost a fee per call on top of the
// tokens: the policy file's prices.tool_calls, in US dollars per
// thousand calls, else DefaultWebSearchFee and DefaultFileSearchFee.
// While a cost policy is installed a call reserves one call of each such
// tool it declares, and is settled at the calls its output lists
// (web_search_call and file_search_call items); a stream that ends
// before its final response object (cut, or left by its client) is
// settled at least at the calls it reserved.
type ResponsesAPI struct {
	// MaxRecords bounds the responses whose size and owner are recorded,
	// over all tenants; zero means DefaultMaxResponseRecords.
	MaxRecords int
	// MaxRecordsPerTenant bounds those of one tenant; zero means
	// DefaultMaxResponseRecordsPerTenant.
	MaxRecordsPerTenant int
	// UnknownChainTokens is the size a chained call is priced at, under
	// AllowUnknownChains, when its previous_response_id has no record for
	// its tenant, or it names a conversation; zero means
	// DefaultUnknownChainTokens.
	UnknownChainTokens int64
	// AllowUnknownChains admits, priced at UnknownChainTokens, a call
	// whose previous_response_id its tenant has no record of, and one
	// naming a conversation (the policies still decide), and passes on
	// an input item referring to a stored item (item_reference, or a
	// reasoning or image_generation_call item by id without what it
	// holds, priced by its reference) and a Chat Completions message
	// naming the audio of an earlier response (audio.id), where by
	// default the first is a 404, as an
	// unknown response, the second and third a 400, and a record the
	// store cannot read a 503. Set it only when the
	// tenants may continue each other's responses (one team behind
	// several keys): every tenant's responses live in the one upstream
	// account, and with it a tenant that learned another's response id
	// has the provider continue that conversation. Without it a tenant's
	// own evicted ids are refused too (MaxRecordsPerTenant, RecordTTL).
	AllowUnknownChains bool
	// RecordTTL is how long the records stay on Redis after their last
	// write (WithResponseRecords); zero means DefaultResponseRecordTTL.
	RecordTTL time.Duration
	// MaxBackground bounds the background responses with an open
	// reservation, and MaxBackgroundPerTenant those of one tenant; zero
	// means DefaultMaxBackground and DefaultMaxBackgroundPerTenant.
	MaxBackground, MaxBackgroundPerTenant int
	// PollInterval is how often an open background response is retrieved
	// by the gateway; zero means DefaultBackgroundPollInterval.
	PollInterval time.Duration
	// MaxHold is the longest a background reservation stays open; zero
	// means DefaultBackgroundMaxHold. Then it is settled at its estimate.
	MaxHold time.Duration
}

// Defaults of ResponsesAPI fields left zero, and of the built-in tool
// fees.
const (
	DefaultMaxResponseRecords          = 100_000
	DefaultMaxResponseRecordsPerTenant = 1_000
	DefaultUnknownChainTokens          = 32_768
	DefaultResponseRecordTTL           = 30 * 24 * time.Hour
	DefaultMaxBackground               = 1_000
	DefaultMaxBackgroundPerTenant      = 50
	DefaultBackgroundPollInterval      = time.Minute
	DefaultBackgroundMaxHold           = 2 * time.Hour
	// DefaultWebSearchFee and DefaultFileSearchFee are the fees of a
	// thousand web_search and file_search calls in US dollars (OpenAI's
	// list prices), when the policy file's prices.tool_calls names none.
	DefaultWebSearchFee  = 10.0
	DefaultFileSearchFee = 2.5
)

// responseRoutes returns the routes of one response under prefix (an
// echo path: "/v1/responses"), each going to upstream + "/" + its id and
// its part (see objectBase): retrieve, delete, list input items and
// cancel.
func responseRoutes(prefix, upstream string) []route {
	rt := func(method, part string) route {
		return route{prefix + "/:id" + part, method + " " + prefix + "/{id}" + part, upstream, weights.EndpointUnknown, nil}
	}
	return []route{rt(http.MethodGet, ""), rt(http.MethodDelete, ""), rt(http.MethodGet, "/input_items"), rt(http.MethodPost, "/cancel")}
}

// openAIResponseRoutes are the routes of one response of Config.Upstream.
var openAIResponseRoutes = responseRoutes(OpResponses, "/responses")

// registerResponseRoutes adds rts, routes of one response, served by h.
func registerResponseRoutes(e *echo.Echo, rts []route, h func(echo.Context, route) error, wrap func(echo.HandlerFunc) echo.HandlerFunc) {
	for _, rt := range rts {
		method, _, _ := strings.Cut(rt.pattern, " ")
		e.Add(method, rt.path, wrap(on(rt, h)))
	}
}

// registerResponses adds the routes of one response.
func (g *Gateway) registerResponses(e *echo.Echo) {
	registerResponseRoutes(e, openAIResponseRoutes, g.handleResponse, func(h echo.HandlerFunc) echo.HandlerFunc { return h })
}

// objectBase is where the routes of a response go upstream: under the
// path prefix of its objects ("/responses/" of Config.Upstream,
// "/openai/responses/" or "/openai/v1/responses/" of Config.Azure's),
// with the api-version of Azure OpenAI when the call had one.
type objectBase struct{ prefix, version string }

// objectsOf returns where the routes of a response made on rt go: the
// routes of one response under rt's upstream path, and for a response
// created on an Azure OpenAI deployment route, Azure's
// /openai/responses/ with the creation's api-version.
func objectsOf(rt route) objectBase {
	b := objectBase{prefix: rt.upstream + "/"}
	if a := rt.az; a != nil {
		b.version = a.version
		if a.named != "" {
			b.prefix = azureResponsesPath + "/"
		}
	}
	return b
}

// owner returns the name tenant's records of responses made on the
// upstream b names are kept under: the tenant's own on the OpenAI-shaped
// upstream, one of its own on Azure OpenAI's. A response id is its
// upstream's: the same id on the other upstream is another response,
// which the tenant's record of the first must not open.
func (b objectBase) owner(tenant string) string {
	if strings.HasPrefix(b.prefix, "/openai/") {
		return tenant + "\x00azure"
	}
	return tenant
}

// path returns the upstream path of response id's part ("", or
// "/input_items", "/cancel") with, after a '?', the api-version and
// query, a query its caller built from checked values: what batchCall
// sends.
func (b objectBase) path(id, part, query string) string {
	p := b.prefix + id + part
	if b.version != "" {
		query = strings.TrimSuffix(url.Values{"api-version": {b.version}}.Encode()+"&"+query, "&")
	}
	if query != "" {
		p += "?" + query
	}
	return p
}

// responsesRequest is what the gateway reads of a POST /v1/responses body
// besides what the estimator prices.
type responsesRequest struct {
	previous     string // previous_response_id; empty when absent or null
	conversation bool   // a conversation is named
	background   bool
	// The built-in tools declared.
	webSearch, fileSearch int64
}

// responsesFields are the members parseResponsesRequest reads, exactly
// as the API names them.
var responsesFields = [...]string{"previous_response_id", "conversation", "background", "tools"}

// errResponsesBody is a body parseResponsesRequest refuses; param names
// the member.
type errResponsesBody struct{ param, msg string }

func (e *errResponsesBody) Error() string { return e.param + ": " + e.msg }

// parseResponsesRequest reads the members of a Responses API body that
// the estimator leaves: previous_response_id (a valid id or null),
// conversation (anything but null names one), background (a boolean or
// null) and the types of the tools. Keys are compared decoded; a key
// that differs from one of these only in case is refused, as an upstream
// that folds case would read it. Every other member is skipped.
func parseResponsesRequest(body []byte) (responsesRequest, error) {
	var r responsesRequest
	var sc jsonscan.Scanner
	sc.ResetBytes(body)
	bad := func(param, msg string) error { return &errResponsesBody{param, msg} }
	if sc.Peek() != '{' {
		return r, bad("", "want a JSON object")
	}
	var problem error
	var seen [len(responsesFields)]bool
	sc.Open()
	for n := 0; sc.More(&n, '}'); {
		raw, dirty := sc.Key()
		key := raw
		if dirty {
			var ok bool
			if key, ok = jsonscan.Unquote(raw); !ok {
				key = raw
			}
		}
		k := -1
		for i, f := range responsesFields {
			if key == f {
				k = i
			} else if problem == nil && len(key) >= len(f) && len(key) <= 3*len(f) && strings.EqualFold(key, f) {
				problem = bad(f, "a key that differs from "+f+" only in case")
			}
		}
		if k < 0 {
			sc.Skip()
			continue
		}
		if seen[k] && problem == nil {
			problem = bad(responsesFields[k], "given twice")
		}
		seen[k] = true
		switch c := sc.Peek(); {
		case c == 'n':
			sc.Literal()
		case k == 0:
			v, ok := "", c == '"'
			if ok {
				s, dirty := sc.Str()
				v = s
				if dirty {
					v, ok = jsonscan.Unquote(s)
				}
			} else {
				sc.Skip()
			}
			if (!ok || !ValidObjectID(v)) && problem == nil {
				problem = bad("previous_response_id", "must be the id of a response: 1 to 128 letters, digits, - and _")
			}
			r.previous = v
		case k == 1:
			sc.Skip()
			r.conversation = true
		case k == 2:
			if c != 't' && c != 'f' {
				sc.Skip()
				if problem == nil {
					problem = bad("background", "must be a boolean")
				}
				break
			}
			sc.Literal()
			r.background = c == 't'
		default:
			if err := readTools(&sc, &r); err != nil && problem == nil {
				problem = err
			}
		}
	}
	if sc.End(); sc.Err() != nil {
		return responsesRequest{}, bad("", sc.Err().Error())
	}
	if problem != nil {
		return responsesRequest{}, problem
	}
	return r, nil
}

// readTools reads the tools array, counting the built-in tools whose
// calls cost a fee: web_search (and its preview and dated variants) and
// file_search.
func readTools(sc *jsonscan.Scanner, r *responsesRequest) error {
	if sc.Peek() != '[' {
		sc.Skip()
		return &errResponsesBody{"tools", "must be an array"}
	}
	sc.Open()
	var problem error
	for n := 0; sc.More(&n, ']'); {
		if sc.Peek() != '{' {
			sc.Skip()
			if problem == nil {
				problem = &errResponsesBody{"tools", "every tool must be an object"}
			}
			continue
		}
		sc.Open()
		for m := 0; sc.More(&m, '}'); {
			key, _ := sc.Key()
			if key != "type" || sc.Peek() != '"' {
				sc.Skip()
				continue
			}
			typ, _ := sc.Str()
			switch {
			case typ == config.ToolFileSearch:
				r.fileSearch = satSum(r.fileSearch, 1)
			case strings.HasPrefix(typ, config.ToolWebSearch):
				r.webSearch = satSum(r.webSearch, 1)
			}
		}
	}
	return problem
}

// toolFees are the fees of the built-in tools in micro-dollars per call.
type toolFees struct{ webSearch, fileSearch int64 }

// feesOf returns the tool fees of the prices of f: its
// prices.tool_calls, else the defaults.
func feesOf(f *config.File) toolFees {
	fee := func(tool string, d float64) int64 {
		v, ok := f.Prices.ToolCalls[tool]
		if !ok {
			v = d
		}
		// US dollars per thousand calls are thousandths of a dollar, or
		// a thousand micro-dollars, per call.
		return int64(math.Round(min(max(v, 0), 1e9) * 1000))
	}
	return toolFees{webSearch: fee(config.ToolWebSearch, DefaultWebSearchFee), fileSearch: fee(config.ToolFileSearch, DefaultFileSearchFee)}
}

// micros returns the fees of web and file calls, saturating.
func (f toolFees) micros(web, file int64) int64 {
	return satSum(satMul(max(web, 0), f.webSearch), satMul(max(file, 0), f.fileSearch))
}

// satMul returns a × b for non-negative a and b, saturating.
func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// responseCall is a POST /v1/responses on its way: what its body said
// and, once answered, its tool fees.
type responseCall struct {
	rr   responsesRequest
	fees toolFees
	// charged is the tool fees to add to its cost: none until it is
	// answered (a call that fails runs no tool), then those of its
	// calls.
	charged int64
	// slot is set while it holds a background slot; handed once its
	// reservation went to the background watch.
	slot, handed bool
	tenant       string
	// objects is where its response is retrieved: the background watch
	// polls it there.
	objects objectBase
}

// handedOver reports whether the call's reservation went to the
// background watch; false for a nil call.
func (rc *responseCall) handedOver() bool { return rc != nil && rc.handed }

// feeMicros returns the tool fees to charge; zero for a nil call.
func (rc *responseCall) feeMicros() int64 {
	if rc == nil {
		return 0
	}
	return rc.charged
}

// responsesCall reads the Responses API members of body and prices its
// chain into est (see ResponsesAPI). It answers the client itself and
// returns false when the body is refused, the previous response is
// unknown (unless AllowUnknownChains) or no background slot is free.
// The routes of its response are those of rt's upstream (objectsOf).
func (g *Gateway) responsesCall(c echo.Context, st *state, rt route, tenant string, body []byte, est *weights.Estimate) (*responseCall, bool) {
	ctx := c.Request().Context()
	rr, err := parseResponsesRequest(body)
	if err != nil {
		var be *errResponsesBody
		errors.As(err, &be)
		code, msg := "invalid_value", be.msg
		if be.param == "" {
			code, msg = "invalid_json", "We could not parse the JSON body of your request: "+be.msg+"."
		}
		g.m.count(ctx, g.m.clientErrors, code)
		writeError(c.Response(), http.StatusBadRequest, "invalid_request_error", code, be.param, msg)
		return nil, false
	}
	rs := g.responses
	chain, err := rs.chainTokens(ctx, objectsOf(rt).owner(tenant), rr)
	switch {
	case errors.Is(err, errUnknownChain):
		responseNotFound(g, c, rr.previous, "previous_response_id")
		return nil, false
	case errors.Is(err, errConversation):
		// The gateway serves no Conversations API: a conversation
		// was made elsewhere, and may be anyone's.
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_value", "conversation",
			"This gateway does not serve conversations: continue a response with previous_response_id.")
		return nil, false
	case err != nil:
		g.log.ErrorContext(ctx, "llmproxy: reading a response record failed", "err", err)
		writeError(c.Response(), http.StatusServiceUnavailable, "server_error", "service_unavailable", "",
			"The gateway cannot look the previous response up right now. Please retry.")
		return nil, false
	}
	est.InputTokens = min(satSum(est.InputTokens, chain), limits.MaxAmount)
	rc := &responseCall{rr: rr, fees: feesOf(st.file), tenant: tenant, objects: objectsOf(rt)}
	if rr.background {
		if !rs.takeSlot(tenant) {
			c.Response().Header().Set("Retry-After", strconv.Itoa(int(rs.cfg.PollInterval/time.Second)+1))
			g.batchError(c, http.StatusTooManyRequests, "invalid_request_error", "too_many_background_responses", "background",
				"Your account has as many background responses running through this gateway as it may ("+strconv.Itoa(rs.cfg.MaxBackgroundPerTenant)+"), or the gateway does. Please retry once one has ended.")
			return nil, false
		}
		rc.slot = true
	}
	return rc, true
}

// errUnknownChain and errConversation refuse a call continuing a
// response its tenant has no record of, and one naming a conversation
// (see chainTokens).
var (
	errUnknownChain = errors.New("previous_response_id: no response with this id was made through this gateway for your account")
	errConversation = errors.New("conversation: this gateway does not serve conversations, continue a response with previous_response_id")
)

// chainTokens returns the size of the chain a call of owner (a tenant on
// one upstream, see objectBase.owner) continues: the recorded size of
// its previous response plus, for a conversation, UnknownChainTokens;
// zero for a call that continues nothing. Without AllowUnknownChains, a
// previous response owner has no record of is errUnknownChain, a
// conversation errConversation, and a record the store cannot read the
// store's error; with it, each is priced as UnknownChainTokens.
func (rs *responses) chainTokens(ctx context.Context, owner string, rr responsesRequest) (int64, error) {
	chain := int64(0)
	if rr.previous != "" {
		n, found, err := rs.records.get(ctx, owner, rr.previous)
		switch {
		case err != nil && !rs.cfg.AllowUnknownChains:
			return 0, err
		case err != nil:
			rs.g.log.WarnContext(ctx, "llmproxy: reading a response record failed; the chain is priced as unknown", "err", err)
			chain = rs.cfg.UnknownChainTokens
		case found:
			chain = n
		case !rs.cfg.AllowUnknownChains:
			return 0, errUnknownChain
		default:
			chain = rs.cfg.UnknownChainTokens
		}
	}
	if rr.conversation {
		if !rs.cfg.AllowUnknownChains {
			return 0, errConversation
		}
		chain = satSum(chain, rs.cfg.UnknownChainTokens)
	}
	return chain, nil
}

// reserve adds the tool fees of one call of each built-in tool declared
// to the reservation's cost, when it is priced.
func (rc *responseCall) reserve(req *admission.Request, priced bool) {
	if rc == nil || !priced {
		return
	}
	fees := rc.fees.micros(min(rc.rr.webSearch, 1), min(rc.rr.fileSearch, 1))
	req.Cost = min(satSum(req.Cost, fees), limits.MaxAmount)
}

// reservedCalls returns info with at least the tool calls the call
// reserved (one of each built-in tool declared): for a stream whose
// final response object, which lists the calls made, may have passed
// unread (see weights.StreamResult.Unread).
func (rc *responseCall) reservedCalls(info weights.ResponseInfo) weights.ResponseInfo {
	info.WebSearchCalls = max(info.WebSearchCalls, min(rc.rr.webSearch, 1))
	info.FileSearchCalls = max(info.FileSearchCalls, min(rc.rr.fileSearch, 1))
	return info
}

// release gives back a background slot the call did not hand over.
func (rc *responseCall) release(rs *responses) {
	if rc != nil && rc.slot {
		rc.slot = false
		rs.freeSlot(rc.tenant)
	}
}

// answered takes what the upstream said of a finished call, before it is
// settled with u: the fees of the tool calls its output lists, and the
// record of its size under its id for its tenant.
func (rc *responseCall) answered(g *Gateway, info weights.ResponseInfo, u weights.Usage) {
	if rc == nil {
		return
	}
	rc.charged = rc.fees.micros(info.WebSearchCalls, info.FileSearchCalls)
	g.responses.record(rc.objects.owner(rc.tenant), info.ID, u)
}

// background reports whether the upstream's answer data to a call
// created with background: true is a response still running, and if so
// hands its reservation to the background watch (handOver).
func (x *exchange) background(data []byte) bool {
	if x.rsp == nil || !x.rsp.slot {
		return false
	}
	info := weights.ReadResponseInfo(data)
	if !running(info.Status) {
		return false
	}
	x.handOver(info.ID, info.Status != "queued")
	return true
}

// handOver gives the exchange's reservation and background slot to the
// background watch, which holds them until response id ends: the
// exchange then neither settles the ticket nor releases the slot (nor
// does its handler, see handedOver). ran says the response was seen
// running, not only queued (see held). A running response whose id is
// not valid cannot be watched: its reservation is kept at the estimate,
// as a batch's is.
func (x *exchange) handOver(id string, ran bool) {
	rc, rs := x.rsp, x.g.responses
	rc.slot, rc.handed = false, true
	defer func() { x.tk = admission.Ticket{} }()
	if !ValidObjectID(id) {
		rs.freeSlot(rc.tenant)
		x.g.logAdmitted(&x.req, x.arrived, admission.Usage{}, x.admitted)
		x.tk.Done()
		rs.end("unwatchable")
		x.g.m.count(context.Background(), x.g.m.upstreamFailures, "bad_response")
		x.g.log.Error("llmproxy: a background response without a valid id; its reservation is kept at the estimate")
		return
	}
	rs.hold(id, &held{
		tenant: rc.tenant, objects: rc.objects, tk: x.tk, est: x.est, price: x.price, priced: x.priced, fees: rc.fees,
		req: x.req, arrived: x.arrived, admitted: x.admitted, ran: ran,
	})
	u := weights.Usage{InputTokens: x.est.InputTokens, OutputTokens: x.est.OutputTokens}
	rs.record(rc.objects.owner(rc.tenant), id, u) // its owner, and its size at most
}

// running reports whether a response status is that of a response still
// running.
func running(status string) bool { return status == "queued" || status == "in_progress" }

// responseNotFound answers 404 for a response id the tenant has no
// record of, in OpenAI's shape, the same for an unknown id and for
// another tenant's.
func responseNotFound(g *Gateway, c echo.Context, id, param string) {
	msg := "Response not found: an id is 1 to 128 letters, digits, - and _."
	if ValidObjectID(id) {
		msg = "Response with id '" + id + "' not found."
	}
	g.batchError(c, http.StatusNotFound, "invalid_request_error", "not_found", param, msg)
}

// handleResponse serves the routes of one response for the tenant that
// created it (see ResponsesAPI): any other id is a 404 that never
// reaches the upstream. A response object answered (a retrieval, a
// cancellation) is observed: a background response that ended is
// settled. A deletion forgets the record. On Azure OpenAI's routes
// (handleAzureResponse) the api-version is read and passed on apart,
// and the call goes to the Azure resource with its key (batchCall).
func (g *Gateway) handleResponse(c echo.Context, rt route) error {
	rs := g.responses
	r := c.Request()
	id := c.Param("id")
	if r.URL.RawPath != "" || !ValidObjectID(id) {
		responseNotFound(g, c, id, "")
		return nil
	}
	_, part, _ := strings.Cut(rt.path, ":id")
	q := r.URL.Query()
	if rt.az != nil {
		delete(q, "api-version")
	}
	query, ok := inputItemsQuery(q)
	if part == "/input_items" && !ok {
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_value", "",
			"The query accepts limit (1 to 100), order (asc or desc), after and before (item ids) and include.")
		return nil
	}
	if part != "/input_items" {
		query = ""
	}
	st := g.state.Load()
	req, ok := g.identify(c, st)
	if !ok {
		return nil
	}
	ctx := r.Context()
	owner := objectsOf(rt).owner(req.Tenant)
	_, found, err := rs.records.get(ctx, owner, id)
	if err != nil {
		g.log.ErrorContext(ctx, "llmproxy: reading a response record failed", "err", err)
		writeError(c.Response(), http.StatusServiceUnavailable, "server_error", "service_unavailable", "",
			"The gateway cannot look the response up right now. Please retry.")
		return nil
	}
	if !found {
		responseNotFound(g, c, id, "")
		return nil
	}
	_, finish, ok := g.admitRequest(c, st, req)
	if !ok {
		return nil
	}
	defer finish()
	resp, data, ok := g.objectCall(c, st, objectsOf(rt).path(id, part, query), g.cfg.MaxResponseBytes, nil)
	if !ok {
		return nil
	}
	switch {
	case r.Method == http.MethodDelete:
		if err := rs.records.forget(context.WithoutCancel(ctx), owner, id); err != nil {
			g.log.WarnContext(ctx, "llmproxy: forgetting a response record failed", "err", err)
		}
	case part != "/input_items":
		rs.observe(req.Tenant, id, data, part == "/cancel")
	}
	g.writeUpstream(c, resp, data)
	return nil
}

// inputItemsQuery rebuilds the query of an input_items listing from the
// parameters it knows, each checked: limit (1 to 100), order (asc or
// desc), after and before (ids), include (up to 8 names of lower-case
// letters, digits, . and _). ok is false for any other parameter or
// value.
func inputItemsQuery(q url.Values) (string, bool) {
	out := url.Values{}
	for k, vs := range q {
		switch {
		case k == "include" || k == "include[]":
			if len(vs) > 8 {
				return "", false
			}
			for _, v := range vs {
				if v == "" || len(v) > 64 || strings.Trim(v, "abcdefghijklmnopqrstuvwxyz0123456789._") != "" {
					return "", false
				}
				out.Add("include[]", v)
			}
		case len(vs) != 1:
			return "", false
		case k == "limit":
			if n, err := strconv.Atoi(vs[0]); err != nil || n < 1 || n > 100 {
				return "", false
			}
			out.Set(k, vs[0])
		case k == "order":
			if vs[0] != "asc" && vs[0] != "desc" {
				return "", false
			}
			out.Set(k, vs[0])
		case k == "after" || k == "before":
			if !ValidObjectID(vs[0]) {
				return "", false
			}
			out.Set(k, vs[0])
		default:
			return "", false
		}
	}
	return out.Encode(), true
}
