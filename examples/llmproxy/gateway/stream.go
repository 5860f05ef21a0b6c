package gateway

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/weights"
)

// streamBuffer is the most read from the upstream, and written to the
// client, at once. Every open stream holds one while it waits for the
// next event, so it is sized for memory per stream: an event of a chat
// stream is a few hundred bytes, a fast stream's reads take several at
// once, and a larger event takes several reads.
const streamBuffer = 2 << 10

// stream passes a server-sent-events response through chunk by chunk,
// flushing each, while a StreamReader picks up the usage report (and
// strips the usage chunk the client did not ask for). The stream is
// charged every ChargeInterval for what it has produced, cut off when an
// enforcing limit runs out (per Config.Cut), and settled at the end with
// the reported usage or, for a stream cut short by either side, with what
// was counted (at least the reservation once an event too large to read
// has passed).
func (x *exchange) stream(ctx context.Context, cancel context.CancelFunc, resp *http.Response, injected bool) {
	g := x.g
	w := x.c.Response()
	sr := g.est.NewStreamReader(resp.Body, x.est, injected)
	h := w.Header()
	for k, vs := range resp.Header {
		if !dropResponseHeader(k) {
			h[k] = vs
		}
	}
	h.Del("Content-Length")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	w.Flush()
	g.m.streams.Add(ctx, 1)
	defer g.m.streams.Add(context.Background(), -1)

	// What the loop touches at every chunk is in one allocation.
	ls := new(streamLoop)
	ws, idle, buf := &ls.ws, &ls.idle, ls.buf[:]
	g.streams.watch(ws, w.Writer, g.cfg.ClientWriteTimeout)
	defer ws.done()
	// The chunks' time comes from the watch's coarse clock, unless the
	// charge interval is too short for its tick.
	clock := ws.clock
	if g.cfg.ChargeInterval < 4*watchTick {
		clock = time.Now
	}
	idle.start(g.cfg.StreamIdleTimeout, cancel, clock)
	defer idle.stop()
	ch := charging{interval: g.cfg.ChargeInterval, last: idle.began}
	var readErr error
	var first time.Time // when the first chunk came
	clientGone, cut := false, false
	// A cut waits for the end of the event being passed on: the error
	// event that ends the stream must not land inside another.
	var cutBy *admission.Rejection
	for {
		n, err := sr.Read(buf)
		if n > 0 {
			now := clock()
			if first.IsZero() {
				first = g.now()
				g.genai.responseModel(x.c.Request().Context(), &x.gen, buf[:n])
				g.genai.ttft.RecordSet(x.c.Request().Context(), first.Sub(x.arrived).Seconds(), g.genai.set(x.gen))
			}
			idle.progress(now)
			// Each write and flush is bounded by the client write
			// timeout: a client that stops reading is cut here.
			ws.begin()
			if werr := ws.end(writeClient(w, buf[:n])); werr != nil {
				clientGone = true
				break
			}
			if cutBy == nil && ch.due(now) {
				cutBy = x.charge(sr)
			}
			if cutBy != nil && sr.AtEventEnd() {
				// A stream whose end came in this read has nothing left
				// to cut, and an event after its end would break it: its
				// overrun is charged when it settles.
				if !sr.Result().Completed {
					cut = true
					x.cutStream(cutBy)
				}
				break
			}
		}
		if err != nil {
			if err != io.EOF {
				readErr = err
			}
			break
		}
	}
	cancel()
	res := sr.Result()
	if x.c.Request().Context().Err() != nil {
		clientGone = true
	}
	switch {
	case res.Completed:
	case clientGone:
		g.m.count(context.Background(), g.m.clientCancels, "during_stream")
	case cut:
	case !res.Completed:
		reason := "stream_cut"
		if readErr != nil && idle.fired.Load() {
			reason = "stream_idle_timeout"
		}
		g.m.count(context.Background(), g.m.upstreamFailures, reason)
		x.writeStreamError("server_error", "upstream_error", "The upstream API ended the stream before it was complete.")
	}
	if res.Fallback != weights.FallbackNone {
		g.m.count(context.Background(), g.m.usageFallbacks, res.Fallback.String())
	}
	u := res.Usage
	if !res.Reported || !res.Completed {
		// Charge what was produced.
		u = produced(sr)
		u.Estimated = true
		if res.Reported && res.Fallback == weights.FallbackNone && res.Usage.TotalTokens() > u.TotalTokens() {
			u = res.Usage
		}
	}
	if res.Completed && u.OutputTokens > 1 {
		per := g.now().Sub(first).Seconds() / float64(u.OutputTokens-1)
		g.genai.tpot.RecordSet(x.c.Request().Context(), per, g.genai.set(x.gen))
	}
	if rc := x.rsp; rc != nil && rc.slot && !res.Completed {
		// A background response runs on without its stream: its
		// reservation is held until it ends.
		x.handOver(res.Response.ID, res.Response.Status != "queued" || sr.StreamedTokens() > 0)
		return
	}
	if x.rsp != nil {
		info := res.Response
		if !res.Completed || (res.Unread > 0 && res.Fallback == weights.FallbackMissing) {
			// The final response object, which lists the tool calls
			// with the usage, never came (the stream ended before it:
			// the calls, made before the text, ran all the same) or
			// may be among the unread events.
			info = x.rsp.reservedCalls(info)
		}
		x.rsp.answered(g, info, u)
	}
	x.settle(u)
}

// streamLoop is a running stream's state: its watch, its idle watch and
// its read buffer, together, as the stream touches each at every chunk
// and a slow stream's state is out of the cache by then.
type streamLoop struct {
	ws   watchedStream
	idle idleWatch
	buf  [streamBuffer]byte
}

// charging decides when a running stream is charged: once
// Config.ChargeInterval has passed since its last charge (or its start),
// read from the streams' coarse clock. What a stream has produced and not
// been charged for is thus, after every chunk, at most its output over
// the last interval (TestChargingBound).
type charging struct {
	interval time.Duration // Config.ChargeInterval
	last     time.Time     // the last charge, or the stream's start
}

// due reports whether the stream is to be charged at now, and if so
// records the charge.
func (c *charging) due(now time.Time) bool {
	if now.Sub(c.last) < c.interval {
		return false
	}
	c.last = now
	return true
}

// produced returns what a running stream has produced so far: the prompt
// as the upstream reported it (Anthropic's message_start, with its cache
// figures) or else as estimated, and the output counted on the way, or
// as reported so far (Anthropic's message_delta) when that is more. Once
// an event too large to read has passed (weights.StreamResult.Unread)
// with no report after it, its text is not in the count: the output is
// then at least the reservation, as the result's usage says.
func produced(sr *weights.StreamReader) weights.Usage {
	res := sr.Result()
	u := weights.Usage{
		InputTokens: res.Usage.InputTokens, CachedInputTokens: res.Usage.CachedInputTokens,
		CacheWriteInputTokens: res.Usage.CacheWriteInputTokens, CacheWrite1hInputTokens: res.Usage.CacheWrite1hInputTokens,
		OutputTokens: sr.StreamedTokens(),
	}
	if res.Fallback == weights.FallbackNone || res.Unread > 0 {
		u.OutputTokens = max(u.OutputTokens, res.Usage.OutputTokens)
	}
	return u
}

// chargeCounter counts the charges of running streams, exported as
// llmproxy.stream.charges{reason="charged"}: a slow stream charges on
// nearly every chunk, so a charge adds to an atomic count (a few
// nanoseconds, no attribute lookup), which the instrument reports when
// read.
type chargeCounter struct{ n atomic.Int64 }

// init registers the instrument on meter; the registration ends the
// reports (Gateway.Close unregisters it).
func (c *chargeCounter) init(meter metric.Meter) (metric.Registration, error) {
	inst, err := meter.Int64ObservableCounter("llmproxy.stream.charges",
		metric.WithDescription("Intermediate charges of running streams."), metric.WithUnit("{charge}"))
	if err != nil {
		return nil, err
	}
	charged := metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "charged")))
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(inst, c.n.Load(), charged)
		return nil
	}, inst)
}

// charge charges the ticket for the stream so far; it returns the
// rejection when the stream must be cut. It allocates nothing: the
// units go in the exchange's buffer, Ticket.Charge returns its
// *Rejection unwrapped, and the count is an atomic one.
func (x *exchange) charge(sr *weights.StreamReader) *admission.Rejection {
	err := x.tk.Charge(x.usage(x.units[:0], produced(sr)))
	x.g.m.charges.n.Add(1)
	rej, _ := err.(*admission.Rejection)
	if rej = x.acceptedCut(rej); rej == nil {
		return nil
	}
	switch x.g.cfg.Cut {
	case CutNever:
		return nil
	case CutQuota:
		if rej.Reason != admission.ReasonQuota {
			return nil
		}
	}
	return rej
}

// cutStream ends a stream whose tenant ran out, with a final error event.
func (x *exchange) cutStream(rej *admission.Rejection) {
	x.g.m.count(context.Background(), x.g.m.streamsCut, rejectionCode(rej))
	_, typ, code := x.st.rejectionShape(rej)
	x.writeStreamError(typ, code, x.st.rejectionMessage(rej))
}

// writeStreamError appends an error event to a stream: "data:
// {"error":{...}}", which the official SDKs raise as a stream error. On
// the Responses API it is an "error" event that also carries the fields
// of that API's error event; on the Messages API Anthropic's error event;
// on a ConverseStream an exception message (bedrockStreamError).
func (x *exchange) writeStreamError(typ, code, msg string) {
	w := x.c.Response()
	body := errorBody(typ, code, "", msg)
	var ev []byte
	switch x.est.Endpoint {
	case weights.EndpointMessages:
		ev = anthropicStreamError(typ, msg)
	case weights.EndpointGenerateContent:
		status := http.StatusTooManyRequests
		if typ == "server_error" || typ == "server_overloaded" {
			status = http.StatusBadGateway
		}
		ev = geminiStreamError(w.Header(), status, code, msg)
	case weights.EndpointConverse:
		ev = bedrockStreamError(typ, msg)
	case weights.EndpointResponses:
		ev = append(ev, "event: error\ndata: {\"type\":\"error\",\"code\":"...)
		ev = appendJSONString(ev, code)
		ev = append(ev, ",\"message\":"...)
		ev = appendJSONString(ev, msg)
		ev = append(ev, ",\"param\":null,"...)
		ev = append(ev, body[1:]...)
		ev = append(ev, "\n\n"...)
	default:
		ev = append(append(ev, "data: "...), body...)
		ev = append(ev, "\n\n"...)
	}
	if _, err := w.Write(ev); err == nil {
		w.Flush()
	}
}

// idleWatch cancels a stream silent for its idle timeout. Progress only
// records the time, so a chunk costs no timer update: the one timer, set
// for the whole timeout, checks when it fires how long the stream has
// really been silent and sets itself again for the rest.
type idleWatch struct {
	timeout time.Duration
	cancel  context.CancelFunc
	clock   func() time.Time // the coarse clock progress is read from
	began   time.Time
	last    atomic.Int64 // nanoseconds from began to the last progress
	fired   atomic.Bool  // the stream was cancelled for its silence

	mu sync.Mutex
	t  *time.Timer
}

// start starts the watch of a stream that begins now (on clock), to be
// cancelled after timeout without progress.
func (w *idleWatch) start(timeout time.Duration, cancel context.CancelFunc, clock func() time.Time) {
	w.timeout, w.cancel, w.began, w.clock = timeout, cancel, clock(), clock
	w.mu.Lock()
	w.t = time.AfterFunc(timeout, w.check)
	w.mu.Unlock()
}

// progress records that the stream moved at now.
func (w *idleWatch) progress(now time.Time) { w.last.Store(int64(now.Sub(w.began))) }

func (w *idleWatch) check() {
	silent := w.clock().Sub(w.began) - time.Duration(w.last.Load())
	if rest := w.timeout - silent; rest > 0 {
		w.mu.Lock()
		w.t.Reset(rest)
		w.mu.Unlock()
		return
	}
	w.fired.Store(true)
	w.cancel()
}

func (w *idleWatch) stop() {
	w.mu.Lock()
	w.t.Stop()
	w.mu.Unlock()
}
