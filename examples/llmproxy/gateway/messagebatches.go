package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/jsonscan"
	"github.com/sluicehq/sluice/weights"
)

// The routes of Anthropic's Message Batches API, served with the Messages
// API. Policies match them as "POST /v1/messages/batches" (a creation,
// priced and reserved), "GET /v1/messages/batches" (a list),
// "GET /v1/messages/batches/{id}", "DELETE /v1/messages/batches/{id}",
// "POST /v1/messages/batches/{id}/cancel" and
// "GET /v1/messages/batches/{id}/results".
//
// A creation is read whole (at most Anthropic.MaxBatchBytes, within the
// parse budget) and checked before anything is admitted: an object of
// requests (1 to Anthropic.MaxBatchRequests), each a custom_id (1 to 64
// letters, digits, - and _, unique in the batch) and the params of a
// Messages API call that does not stream, every one for the same model
// (one batch per model, so that a policy on a model counts all of it). It
// is priced as the Batch API's batches are (the prompts' tokens and their
// max_tokens; its cost at the model's batch price) and holds its
// reservation until the batch ends, watched by the same background polls
// (BatchAPI's PollInterval, MaxHold, MaxOpen). Once the upstream says it
// ended, its results are read (each line at most Config.MaxResponseBytes)
// and it is settled at the usage of its succeeded requests, refunded
// whole when none succeeded; results that cannot be read keep it charged
// at its estimate. A tenant sees only the batches it created through the
// gateway: another id is a 404 that never reaches the upstream, and a
// list holds the tenant's own batches only.
const (
	OpMessageBatches      = "/v1/messages/batches"
	OpMessageBatch        = "/v1/messages/batches/:id"
	OpMessageBatchCancel  = "/v1/messages/batches/:id/cancel"
	OpMessageBatchResults = "/v1/messages/batches/:id/results"
)

// Defaults of Anthropic fields left zero.
const (
	// DefaultMaxMessageBatchBytes bounds a message batch's creation body,
	// which the gateway holds until the batch is admitted.
	DefaultMaxMessageBatchBytes = 32 << 20
	// DefaultMaxMessageBatchRequests bounds the requests of one message
	// batch: Anthropic's own limit.
	DefaultMaxMessageBatchRequests = 100_000
)

var (
	messageBatchesRoute      = route{OpMessageBatches, "POST " + OpMessageBatches, "/messages/batches", weights.EndpointUnknown, nil}
	messageBatchListRoute    = route{OpMessageBatches, "GET " + OpMessageBatches, "/messages/batches", weights.EndpointUnknown, nil}
	messageBatchRoute        = route{OpMessageBatch, "GET " + OpMessageBatches + "/{id}", "/messages/batches/", weights.EndpointUnknown, nil}
	messageBatchDeleteRoute  = route{OpMessageBatch, "DELETE " + OpMessageBatches + "/{id}", "/messages/batches/", weights.EndpointUnknown, nil}
	messageBatchCancelRoute  = route{OpMessageBatchCancel, "POST " + OpMessageBatches + "/{id}/cancel", "/messages/batches/", weights.EndpointUnknown, nil}
	messageBatchResultsRoute = route{OpMessageBatchResults, "GET " + OpMessageBatches + "/{id}/results", "/messages/batches/", weights.EndpointUnknown, nil}
)

// maxMessageCustomID bounds a custom_id, as Anthropic does.
const maxMessageCustomID = 64

// registerMessageBatches adds the Message Batches routes.
func (g *Gateway) registerMessageBatches(e *echo.Echo) {
	e.POST(OpMessageBatches, inAnthropicShape(on(messageBatchesRoute, g.handleMessageBatchCreate)))
	e.GET(OpMessageBatches, inAnthropicShape(on(messageBatchListRoute, g.handleMessageBatchList)))
	e.GET(OpMessageBatch, inAnthropicShape(on(messageBatchRoute, g.handleOwned)))
	e.DELETE(OpMessageBatch, inAnthropicShape(on(messageBatchDeleteRoute, g.handleOwned)))
	e.POST(OpMessageBatchCancel, inAnthropicShape(on(messageBatchCancelRoute, g.handleOwned)))
	e.GET(OpMessageBatchResults, inAnthropicShape(on(messageBatchResultsRoute, g.handleOwned)))
}

// messageBatchLimits returns the bounds of a creation body: its bytes
// (at most the parse budget) and its requests.
func (g *Gateway) messageBatchLimits() (maxBytes int64, maxRequests int) {
	a := g.cfg.Anthropic
	maxBytes = min(positive(a.MaxBatchBytes, DefaultMaxMessageBatchBytes), g.cfg.ParseBudget)
	maxRequests = int(positive(int64(a.MaxBatchRequests), DefaultMaxMessageBatchRequests))
	return maxBytes, maxRequests
}

// handleMessageBatchCreate serves POST /v1/messages/batches: the body is
// read (bounded, within the parse budget) and checked, the batch priced
// from its requests, admitted as a reservation, and created upstream.
func (g *Gateway) handleMessageBatchCreate(c echo.Context, rt route) error {
	maxBytes, maxRequests := g.messageBatchLimits()
	st, req, ok := g.batchCaller(c, maxBytes)
	if !ok {
		return nil
	}
	r := c.Request()
	ctx := r.Context()
	want := r.ContentLength
	if want < 0 {
		want = maxBytes
	}
	got, ok := g.budget.acquire(ctx, want)
	if !ok {
		if ctx.Err() == nil {
			g.m.count(ctx, g.m.clientErrors, "parse_budget_full")
			c.Response().Header().Set("Retry-After", "1")
			writeError(c.Response(), http.StatusServiceUnavailable, "server_error", "server_busy", "", "The gateway is reading too many request bodies at once. Please retry.")
		}
		return nil
	}
	defer g.budget.release(got)
	body, err := readLimited(r.Body, maxBytes)
	if err != nil {
		if ctx.Err() == nil {
			g.tooLarge(c, maxBytes)
		}
		return nil
	}
	sum, err := g.priceMessageBatch(body, maxRequests)
	if err != nil {
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_batch", "requests", "Invalid message batch: "+err.Error()+".")
		return nil
	}
	g.openBatch(c, st, req, sum.model, sum.in, sum.out, true, "requests", "/messages/batches", body)
	return nil
}

// messageBatchSum is what a message batch's creation reserves.
type messageBatchSum struct {
	model   string
	in, out int64
}

// priceMessageBatch checks a message batch's creation body and sums its
// requests' estimates. Its errors name no content of the body but the
// model and a request's position.
func (g *Gateway) priceMessageBatch(body []byte, maxRequests int) (messageBatchSum, error) {
	var sum messageBatchSum
	var requests json.RawMessage
	if err := objectFields(body, objField{"requests", &requests}); err != nil {
		return sum, err
	}
	var sc jsonscan.Scanner
	sc.ResetBytes(requests)
	if sc.Peek() != '[' {
		return sum, errors.New("requests must be an array")
	}
	sc.Open()
	ids := map[string]struct{}{}
	n := 0
	for sc.More(&n, ']') {
		if n > maxRequests {
			return sum, errors.New("more than " + strconv.Itoa(maxRequests) + " requests")
		}
		item := []byte(sc.Value())
		if sc.Err() != nil {
			break
		}
		bad := func(msg string) error { return errors.New("requests[" + strconv.Itoa(n-1) + "]: " + msg) }
		var customID, params json.RawMessage
		if err := objectFields(item, objField{"custom_id", &customID}, objField{"params", &params}); err != nil {
			return sum, bad("not a request (an object of custom_id and params): " + err.Error())
		}
		id, ok := jsonText(customID)
		if !ok || !validCustomID(id) {
			return sum, bad("custom_id must be 1 to " + strconv.Itoa(maxMessageCustomID) + " letters, digits, - and _")
		}
		if _, dup := ids[id]; dup {
			return sum, bad("custom_id is not unique in the batch")
		}
		ids[id] = struct{}{}
		if len(params) == 0 || params[0] != '{' {
			return sum, bad("params must be a JSON object")
		}
		e, err := g.est.EstimateEndpoint(weights.EndpointMessages, params)
		if err != nil {
			var mal *weights.MalformedError
			if errors.As(err, &mal) {
				return sum, bad("params: " + mal.Error())
			}
			return sum, bad("the params could not be priced")
		}
		switch {
		case e.Model == "" || !ValidModelName(e.Model):
			return sum, bad("params.model must name a model (at most " + strconv.Itoa(MaxModelBytes) + " bytes of text)")
		case n > 1 && e.Model != sum.model:
			return sum, bad("model " + quoteClip(e.Model) + " differs from the first request's " + quoteClip(sum.model) + ": the gateway prices a batch per model, send one batch per model")
		case e.Stream:
			return sum, bad("params.stream: a batch request cannot stream")
		}
		// The gateway records no file of Anthropic's (see checkRefs).
		if err := g.checkRefs("", false, &e); err != nil {
			return sum, bad("params." + err.Error())
		}
		out := e.OutputTokens
		if m := g.cfg.MaxOutputReserve; m > 0 && out > m {
			out = m
		}
		sum.model = e.Model
		sum.in, sum.out = satSum(sum.in, e.InputTokens), satSum(sum.out, out)
	}
	if err := sc.Err(); err != nil {
		return sum, err
	}
	if n == 0 {
		return sum, errors.New("requests must hold at least one request")
	}
	return sum, nil
}

// validCustomID reports whether id is a custom_id Anthropic accepts: 1
// to 64 letters, digits, - and _.
func validCustomID(id string) bool {
	if id == "" || len(id) > maxMessageCustomID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// gatewayResultsURL returns a message batch object with its results_url,
// when it has one, pointing at the gateway's route (a path: the client
// resolves it against the URL it called), so that a client following it
// reads the results through the gateway, never from the upstream, whose
// address it does not learn.
func gatewayResultsURL(data []byte, id string) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return data
	}
	if v, ok := obj["results_url"]; !ok || string(v) == "null" {
		return data
	}
	obj["results_url"], _ = json.Marshal(OpMessageBatches + "/" + id + "/results")
	out, err := json.Marshal(obj)
	if err != nil {
		return data
	}
	return out
}

// handleMessageBatchList serves GET /v1/messages/batches, limited by
// requests: the upstream's page (limit, after_id and before_id checked
// and passed on) with only the caller's own batches in it, first_id and
// last_id theirs; a page may hold fewer than limit, has_more telling
// whether the upstream has more.
func (g *Gateway) handleMessageBatchList(c echo.Context, rt route) error {
	st := g.state.Load()
	req, ok := g.identify(c, st)
	if !ok {
		return nil
	}
	query, ok := listQuery(c.Request().URL.Query())
	if !ok {
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_value", "",
			"The query takes limit (1 to 1000), after_id and before_id (batch ids), at most once each.")
		return nil
	}
	_, finish, ok := g.admitRequest(c, st, req)
	if !ok {
		return nil
	}
	defer finish()
	path := rt.upstream
	if query != "" {
		path += "?" + query
	}
	resp, data, ok := g.objectCall(c, st, path, g.cfg.MaxResponseBytes, nil)
	if !ok {
		return nil
	}
	var page struct {
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
	}
	if json.Unmarshal(data, &page) != nil {
		g.m.count(c.Request().Context(), g.m.upstreamFailures, "bad_response")
		g.batchError(c, http.StatusBadGateway, "server_error", "bad_upstream_response", "", "The upstream API answered with a list that is not valid JSON.")
		return nil
	}
	own := make([]json.RawMessage, 0, len(page.Data))
	var first, last any
	for _, d := range page.Data {
		var obj struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(d, &obj) != nil || !ValidObjectID(obj.ID) || !g.batches.owns(req.Tenant, obj.ID, true) {
			continue
		}
		g.batches.observe(obj.ID, d)
		own = append(own, gatewayResultsURL(d, obj.ID))
		if first == nil {
			first = obj.ID
		}
		last = obj.ID
	}
	out, err := json.Marshal(map[string]any{"data": own, "has_more": page.HasMore, "first_id": first, "last_id": last})
	if err != nil {
		return err
	}
	g.writeUpstream(c, resp, out)
	return nil
}

// listQuery checks a list's query and returns it encoded: limit (1 to
// 1000), after_id and before_id (valid ids), each at most once, nothing
// else.
func listQuery(q url.Values) (string, bool) {
	out := url.Values{}
	for k, vs := range q {
		if len(vs) != 1 {
			return "", false
		}
		v := vs[0]
		switch k {
		case "limit":
			if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
				return "", false
			}
		case "after_id", "before_id":
			if !ValidObjectID(v) {
				return "", false
			}
		default:
			return "", false
		}
		out.Set(k, v)
	}
	return out.Encode(), true
}

// observeMessages starts reading the results of message batch id (its
// record r) when the object the upstream returned for it (data) says it
// ended and they are not being read already.
func (b *batches) observeMessages(id string, r *batchRecord, data []byte) {
	var obj struct {
		ID     string `json:"id"`
		Status string `json:"processing_status"`
	}
	if json.Unmarshal(data, &obj) != nil || obj.ID != id || obj.Status != "ended" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !r.open || r.fetching || b.closed {
		return
	}
	r.fetching = true
	b.wg.Add(1)
	go b.settleMessages(id, r)
}

// settleMessages reads the results of ended message batch id and ends
// its reservation by them; when they cannot be fetched, a later poll (or
// a retrieval) tries again, until MaxHold settles it at its estimate.
func (b *batches) settleMessages(id string, r *batchRecord) {
	defer b.wg.Done()
	ctx, cancel := context.WithTimeout(b.ctx, b.g.cfg.Timeout)
	defer cancel()
	res, err := b.readResults(ctx, id)
	b.mu.Lock()
	defer b.mu.Unlock()
	r.fetching = false
	if err != nil || !r.open {
		if err != nil {
			b.g.log.Warn("llmproxy: a message batch's results could not be read; retried at the next poll", "batch", id, "error", err.Error())
		}
		return
	}
	r.open = false
	b.releaseSlotLocked(r.tenant)
	b.closeLocked(r, res.report(), res.succeeded == 0 && res.unreadable == 0)
	b.end(res.outcome())
	b.g.log.Info("llmproxy: batch ended", "batch", id, "status", res.outcome())
}

// messageResults is what the results of a message batch add up to.
type messageResults struct {
	usage                                 weights.Usage
	succeeded, errored, canceled, expired int
	// unreadable counts succeeded results whose usage could not be read:
	// the batch is then charged as reserved.
	unreadable int
}

// report returns the usage to settle at: the succeeded requests' sum, or
// none read (charged as reserved) when one could not be read.
func (m *messageResults) report() weights.UsageReport {
	if m.unreadable > 0 {
		return weights.UsageReport{Input: weights.FallbackMalformed, Output: weights.FallbackMalformed}
	}
	return weights.UsageReport{Usage: m.usage}
}

// outcome names how the batch ended, as the Batch API's statuses do: failed when
// every request errored, cancelled or expired when none succeeded and
// some were, else completed.
func (m *messageResults) outcome() string {
	switch {
	case m.succeeded > 0 || m.unreadable > 0:
		return "completed"
	case m.canceled > 0:
		return "cancelled"
	case m.expired > 0:
		return "expired"
	case m.errored > 0:
		return "failed"
	}
	return "completed"
}

// readResults reads the results of message batch id as they come: at
// most the requests a batch may hold, each line at most
// Config.MaxResponseBytes.
func (b *batches) readResults(ctx context.Context, id string) (*messageResults, error) {
	if !ValidObjectID(id) {
		return nil, errNotForwarded
	}
	resp, err := b.g.batchCall(ctx, nil, nil, http.MethodGet, "/messages/batches/"+id+"/results", nil, "", 0)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New("upstream status " + strconv.Itoa(resp.StatusCode))
	}
	_, maxRequests := b.g.messageBatchLimits()
	maxLine := int(min(b.g.cfg.MaxResponseBytes, 1<<30))
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	res := &messageResults{}
	for lines := 0; ; lines++ {
		line, err := readLine(br, maxLine)
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if lines >= maxRequests {
			return nil, errors.New("more results than a batch has requests")
		}
		res.add(line)
	}
}

// add counts one result line.
func (m *messageResults) add(line []byte) {
	var v struct {
		Result struct {
			Type    string          `json:"type"`
			Message json.RawMessage `json:"message"`
		} `json:"result"`
	}
	if json.Unmarshal(line, &v) != nil {
		m.unreadable++
		return
	}
	switch v.Result.Type {
	case "succeeded":
		rep, err := weights.ReadUsage(v.Result.Message)
		if err != nil || !rep.Found() || rep.Input != weights.FallbackNone || rep.Output != weights.FallbackNone {
			m.unreadable++
			return
		}
		m.succeeded++
		u := &m.usage
		u.InputTokens = satSum(u.InputTokens, rep.Usage.InputTokens)
		u.OutputTokens = satSum(u.OutputTokens, rep.Usage.OutputTokens)
		u.CachedInputTokens = satSum(u.CachedInputTokens, rep.Usage.CachedInputTokens)
		u.CacheWriteInputTokens = satSum(u.CacheWriteInputTokens, rep.Usage.CacheWriteInputTokens)
		u.CacheWrite1hInputTokens = satSum(u.CacheWrite1hInputTokens, rep.Usage.CacheWrite1hInputTokens)
		u.ReasoningTokens = satSum(u.ReasoningTokens, rep.Usage.ReasoningTokens)
	case "errored":
		m.errored++
	case "canceled":
		m.canceled++
	case "expired":
		m.expired++
	default:
		m.unreadable++
	}
}

// readLine reads one line of br, without its newline, of at most max
// bytes; io.EOF once nothing is left.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(line)+len(part) > max+1 {
			return nil, errors.New("a result line is longer than " + strconv.Itoa(max) + " bytes")
		}
		line = append(line, part...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}
