package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/internal/tokenunits"
	"github.com/sluicehq/sluice/shadow/requestlog"
	"github.com/sluicehq/sluice/weights"
)

// responses is the Responses API's state: the records of responses, and
// the background responses whose reservation is open.
type responses struct {
	g       *Gateway
	cfg     ResponsesAPI
	clock   admission.Clock
	records responseRecords
	// Metrics: the reservations open, and the reservations ended by how.
	openGauge metric.Int64UpDownCounter
	ended     metric.Int64Counter

	mu        sync.Mutex
	slots     int            // background slots taken: open or being created
	perTenant map[string]int // tenant → its slots
	open      map[string]*held
	closed    bool
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// held is a background response's open reservation.
type held struct {
	tenant string
	tk     admission.Ticket
	est    weights.Estimate
	price  weights.Price
	priced bool
	fees   toolFees
	opened time.Time
	timer  admission.Timer
	// objects is where the response is polled: on the upstream it was
	// created on.
	objects objectBase

	// For the request log: the call as admitted, when it arrived and
	// when it was admitted.
	req               admission.Request
	arrived, admitted time.Time

	// What the gateway saw of the response, for its settlement once
	// cancelled without usage (see endLocked), under responses.mu: ran
	// is set once a status other than queued, or an output item, was
	// seen; cancelled once a cancellation was answered cancelled; kept
	// is the most output tokens counted in the text of the output of a
	// cancelled object without usage.
	ran, cancelled bool
	kept           int64
}

func newResponses(g *Gateway, cfg ResponsesAPI, clock admission.Clock) (*responses, error) {
	for _, f := range []struct {
		v *int
		d int
	}{
		{&cfg.MaxRecords, DefaultMaxResponseRecords}, {&cfg.MaxRecordsPerTenant, DefaultMaxResponseRecordsPerTenant},
		{&cfg.MaxBackground, DefaultMaxBackground}, {&cfg.MaxBackgroundPerTenant, DefaultMaxBackgroundPerTenant},
	} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	cfg.MaxRecordsPerTenant = min(cfg.MaxRecordsPerTenant, cfg.MaxRecords)
	cfg.MaxBackgroundPerTenant = min(cfg.MaxBackgroundPerTenant, cfg.MaxBackground)
	cfg.UnknownChainTokens = positive(cfg.UnknownChainTokens, DefaultUnknownChainTokens)
	cfg.RecordTTL = positive(cfg.RecordTTL, DefaultResponseRecordTTL)
	cfg.PollInterval = positive(cfg.PollInterval, DefaultBackgroundPollInterval)
	cfg.MaxHold = positive(cfg.MaxHold, DefaultBackgroundMaxHold)
	if cfg.MaxHold > requestlog.MaxRecordDuration-cfg.PollInterval {
		return nil, fmt.Errorf("gateway: responses: max hold %v and a poll interval of %v exceed the longest hold a request log records (%v)", cfg.MaxHold, cfg.PollInterval, requestlog.MaxRecordDuration)
	}
	if clock == nil {
		clock = admission.SystemClock{}
	}
	rs := &responses{g: g, cfg: cfg, clock: clock, perTenant: map[string]int{}, open: map[string]*held{}}
	if c := g.opt.responseRedis; c != nil {
		rs.records = &redisRecords{c: c, max: cfg.MaxRecords, perTenant: cfg.MaxRecordsPerTenant, ttl: cfg.RecordTTL}
	} else {
		rs.records = newMemRecords(cfg.MaxRecords, cfg.MaxRecordsPerTenant)
	}
	rs.ctx, rs.cancel = context.WithCancel(context.Background())
	var errs [2]error
	rs.openGauge, errs[0] = g.meter.Int64UpDownCounter("llmproxy.responses.background.open",
		metric.WithDescription("Background responses whose reservation is open, watched until they end."), metric.WithUnit("{response}"))
	rs.ended, errs[1] = g.meter.Int64Counter("llmproxy.responses.background.ended",
		metric.WithDescription("Background response reservations ended, by outcome: the response's final status (completed, incomplete, failed, cancelled, other), held_too_long (settled at the estimate after MaxHold) or unwatchable (a running response without a valid id)."), metric.WithUnit("{response}"))
	return rs, errors.Join(errs[:]...)
}

// end counts a reservation ended, by outcome (a closed set).
func (rs *responses) end(outcome string) {
	rs.ended.Add(context.Background(), 1, rs.g.m.opt("outcome", outcome))
}

// close stops the polls; open reservations stay charged at their
// estimate.
func (rs *responses) close() {
	rs.mu.Lock()
	rs.closed = true
	for _, h := range rs.open {
		if h.timer != nil {
			h.timer.Stop()
		}
	}
	rs.mu.Unlock()
	rs.cancel()
	rs.wg.Wait()
}

// takeSlot takes a background slot for tenant; false when the tenant or
// the gateway has all of theirs.
func (rs *responses) takeSlot(tenant string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed || rs.perTenant[tenant] >= rs.cfg.MaxBackgroundPerTenant || rs.slots >= rs.cfg.MaxBackground {
		return false
	}
	rs.slots++
	rs.perTenant[tenant]++
	return true
}

// freeSlot gives a slot of tenant back.
func (rs *responses) freeSlot(tenant string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.freeSlotLocked(tenant)
}

func (rs *responses) freeSlotLocked(tenant string) {
	rs.slots--
	if rs.perTenant[tenant]--; rs.perTenant[tenant] <= 0 {
		delete(rs.perTenant, tenant)
	}
}

// record writes the size of response id (its usage's input and output
// tokens, the chain it now holds) for owner, its tenant on the upstream
// it was made on (objectBase.owner); an id that is not valid is not
// recorded. A failed write is logged: the chain is then priced as
// unknown, never as nothing.
func (rs *responses) record(owner, id string, u weights.Usage) {
	if !ValidObjectID(id) {
		return
	}
	ctx, cancel := context.WithTimeout(rs.ctx, 5*time.Second)
	defer cancel()
	if err := rs.records.put(ctx, owner, id, u.TotalTokens()); err != nil {
		rs.g.log.Warn("llmproxy: recording a response failed; a call chained on it is priced as unknown", "err", err)
	}
}

// hold keeps h open for background response id until it ends, polling it
// every PollInterval; the slot it took becomes the response's.
func (rs *responses) hold(id string, h *held) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	h.opened = rs.clock.Now()
	if old := rs.open[id]; old != nil { // the upstream reused an id
		rs.endLocked(id, old, nil)
	}
	rs.open[id] = h
	rs.openGauge.Add(context.Background(), 1)
	rs.armLocked(id, h)
}

// armLocked schedules the next poll of h.
func (rs *responses) armLocked(id string, h *held) {
	if rs.closed {
		return
	}
	h.timer = rs.clock.AfterFunc(rs.cfg.PollInterval, func() { rs.tick(id, h) })
}

// tick polls background response id, or settles it at its estimate once
// it has been open MaxHold.
func (rs *responses) tick(id string, h *held) {
	rs.mu.Lock()
	if rs.open[id] != h || rs.closed {
		rs.mu.Unlock()
		return
	}
	if d := rs.clock.Now().Sub(h.opened); d >= rs.cfg.MaxHold {
		rs.g.log.Warn("llmproxy: background response held too long, settled at its estimate", "response", id, "held", d.String())
		rs.endLocked(id, h, nil)
		rs.mu.Unlock()
		return
	}
	rs.wg.Add(1)
	rs.mu.Unlock()
	go func() {
		defer rs.wg.Done()
		data, err := rs.retrieve(h.objects.path(id, "", ""))
		if err == nil {
			rs.observe(h.tenant, id, data, false)
		}
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if rs.open[id] == h {
			rs.armLocked(id, h)
		}
	}()
}

// retrieve gets the response object at path (see objectBase) from its
// upstream.
func (rs *responses) retrieve(path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(rs.ctx, min(rs.g.cfg.Timeout, time.Minute))
	defer cancel()
	resp, err := rs.g.batchCall(ctx, nil, nil, http.MethodGet, path, nil, "", 0)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := readLimited(resp.Body, rs.g.cfg.MaxResponseBytes)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New("upstream status " + strconv.Itoa(resp.StatusCode))
	}
	return data, err
}

// observe takes what the response object data says of background
// response id of tenant: a retrieval (the gateway's poll, the tenant's
// own) showing it ended settles its reservation. A cancellation's answer
// (cancel) showing it cancelled settles nothing: Azure OpenAI's
// cancellation is best effort (a response answered cancelled can still
// complete), so the response is polled on until a retrieval shows it
// ended, or MaxHold. What it says of the response having run is kept for
// the settlement of one cancelled without usage (see endLocked).
func (rs *responses) observe(tenant, id string, data []byte, cancel bool) {
	info := weights.ReadResponseInfo(data)
	if info.ID != id || info.Status == "" {
		return
	}
	rs.mu.Lock()
	h := rs.open[id]
	rs.mu.Unlock()
	if h == nil || h.tenant != tenant {
		return
	}
	// The output is read (its text counted) without the lock; h's
	// tenant and estimate never change once it is held.
	var items int
	var kept int64
	if info.Status == "queued" || info.Status == "cancelled" {
		var texts []string
		items, texts = outputOf(data)
		if rep, err := weights.ReadUsage(data); info.Status == "cancelled" && (err != nil || !rep.Found()) {
			for _, t := range texts {
				kept += rs.g.est.CountText(h.est.Model, t)
			}
		}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.open[id] != h {
		return
	}
	h.ran = h.ran || items > 0 || (info.Status != "queued" && info.Status != "cancelled")
	h.kept = max(h.kept, kept)
	switch {
	case running(info.Status):
	case cancel && info.Status == "cancelled":
		h.cancelled = true
	default:
		rs.endLocked(id, h, data)
	}
}

// outputOf reads the output of the response object data: how many items
// it lists, and the texts they carry (their messages' text and refusals,
// function calls' arguments, reasoning summaries), which the response
// produced: a lower bound of its output. A member of another type is
// skipped.
func outputOf(data []byte) (items int, texts []string) {
	var o struct {
		Output []json.RawMessage `json:"output"`
	}
	_ = json.Unmarshal(data, &o) // a member of another type leaves Output nil
	for _, raw := range o.Output {
		var it struct {
			Arguments        json.RawMessage
			Content, Summary []struct{ Text, Refusal json.RawMessage }
		}
		_ = json.Unmarshal(raw, &it) // fields of another type are skipped
		add := func(v json.RawMessage) {
			var s string
			if json.Unmarshal(v, &s) == nil && s != "" {
				texts = append(texts, s)
			}
		}
		add(it.Arguments)
		for _, p := range append(it.Content, it.Summary...) {
			add(p.Text)
			add(p.Refusal)
		}
	}
	return len(o.Output), texts
}

// endLocked ends h's reservation by the final response object data: nil
// settles it at its estimate (MaxHold passed, or its id was reused). A
// response that ended with a usage is settled at it (checked as every
// usage is), its tool calls' fees added, and its size recorded; a failed
// one without usage is refunded. A cancelled one is charged the usage it
// reports; without one (OpenAI reports
// none, though it bills the tokens made before the cancellation) it is
// charged as reserved, and at least the text its output kept, unless the
// gateway knows nothing ran: it saw the response queued and nothing
// else, and its cancellation answered cancelled with no output. Then it
// is refunded.
func (rs *responses) endLocked(id string, h *held, data []byte) {
	delete(rs.open, id)
	if h.timer != nil {
		h.timer.Stop()
	}
	rs.freeSlotLocked(h.tenant)
	rs.openGauge.Add(context.Background(), -1)
	g := rs.g
	if data == nil {
		g.logAdmitted(&h.req, h.arrived, admission.Usage{}, h.admitted)
		h.tk.Done()
		rs.end("held_too_long")
		return
	}
	info := weights.ReadResponseInfo(data)
	// Counted once settled and logged.
	switch info.Status {
	case "completed", "incomplete", "failed", "cancelled":
		defer rs.end(info.Status)
	default:
		defer rs.end("other")
	}
	rep, err := weights.ReadUsage(data)
	noUsage := err != nil || !rep.Found() || rep.Usage.TotalTokens() == 0
	if noUsage && (info.Status == "failed" || (info.Status == "cancelled" && h.cancelled && !h.ran)) {
		au := tokenunits.Usage(nil, weights.TokenUnits{})
		au.CostKnown = h.priced
		g.logAdmitted(&h.req, h.arrived, au, h.admitted)
		h.tk.Refund()
		return
	}
	if noUsage && info.Status == "cancelled" {
		rep = weights.UsageReport{Input: weights.FallbackMissing, Output: weights.FallbackMissing}
	}
	u, fb := h.est.CheckUsage(rep)
	if fb != weights.FallbackNone {
		g.m.count(context.Background(), g.m.usageFallbacks, fb.String())
	}
	if !rep.Found() && h.kept > u.OutputTokens {
		u.OutputTokens, u.Estimated = h.kept, true
	}
	au := tokenunits.Usage(nil, u.Units())
	if h.priced {
		au.Cost, au.CostKnown = satSum(h.price.CostMicros(u), h.fees.micros(info.WebSearchCalls, info.FileSearchCalls)), true
	}
	g.logAdmitted(&h.req, h.arrived, au, h.admitted)
	h.tk.Settle(au)
	// Recorded in the background, as the lock is held; a closed gateway
	// records nothing more.
	if rs.closed {
		return
	}
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		rs.record(h.objects.owner(h.tenant), id, u)
	}()
}
