package gateway

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/bodywatch"
)

// clientWriteChunk is the most written to a client under one deadline: a
// large answer is written in pieces, each of which must be accepted
// within Config.ClientWriteTimeout.
const clientWriteChunk = 64 << 10

// deadlines is echo middleware, run before routing, that bounds what a
// client can hold: its body must arrive within Config.BodyReadTimeout,
// and every write and flush to it must complete within
// Config.ClientWriteTimeout. An answer written before the body was read
// in full (a refusal) closes the connection instead of draining the rest
// of the body, and so does the answer to a request whose framing a proxy
// in front could read differently (bodywatch.CloseSuspectFraming: a
// chunked body, HTTP/1.0), so nothing after its body is served.
func (g *Gateway) deadlines(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		res, r := c.Response(), c.Request()
		bodywatch.CloseSuspectFraming(res.Header(), r)
		cw := &clientWriter{ResponseWriter: res.Writer, rc: http.NewResponseController(res.Writer), timeout: g.cfg.ClientWriteTimeout, r: r}
		cw.body = bodywatch.WatchBody(res.Writer, r, g.cfg.BodyReadTimeout)
		res.Writer = cw
		// Armed now for what net/http writes by itself (100 Continue),
		// and again at the end for what it writes after the handler.
		cw.arm()
		err := next(c)
		cw.arm()
		if cw.body == nil {
			return err
		}
		if cw.body.TimedOut() && !res.Committed {
			// The handler gave up on the body (net/http cancels the
			// request when a read fails) without answering.
			writeError(res, http.StatusRequestTimeout, "invalid_request_error", "request_timeout", "",
				"The request body was not received in time.")
		}
		cw.body.Abandon()
		return err
	}
}

// clientWriter arms the client write deadline before every write, flush
// and header.
type clientWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	// deadline is the write deadline set last.
	deadline time.Time
	r        *http.Request
	body     *bodywatch.Body // nil for a request without a body
	// watched is set while a stream's writes are bounded by the
	// gateway's streamWatch instead of the connection's deadline.
	watched bool
}

// setWatched hands the bounding of writes to the stream watch (on) or
// back to the connection's deadline. The deadline is cleared while the
// watch bounds the writes, and set afresh at the next write after.
func (w *clientWriter) setWatched(on bool) {
	w.watched = on
	w.deadline = time.Time{}
	if on {
		_ = w.rc.SetWriteDeadline(time.Time{})
	}
}

// arm sets the write deadline to the timeout from now, unless the
// deadline already set is within timeout/deadlineSlack of that: a stream
// writing and flushing many small chunks moves its deadline a few times
// per timeout, not twice per chunk (each move updates a runtime timer),
// and a write still gets at least 7/8 of the timeout (26 s of the default
// 30 s), never more.
func (w *clientWriter) arm() {
	if w.watched {
		return
	}
	d := time.Now().Add(w.timeout)
	if d.Sub(w.deadline) < w.timeout/deadlineSlack {
		return
	}
	if w.rc.SetWriteDeadline(d) == nil {
		w.deadline = d
	}
}

// deadlineSlack is the share of the client write timeout a deadline may
// lag behind.
const deadlineSlack = 8

// WriteHeader implements http.ResponseWriter. An answer to a request
// whose body is not read to its end closes the connection: net/http
// would otherwise read (drain) the rest of the body first, at the
// client's pace.
func (w *clientWriter) WriteHeader(code int) {
	if code >= 200 {
		bodywatch.CloseUnread(w.Header(), w.r, w.body)
	}
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter, clientWriteChunk bytes per
// deadline.
func (w *clientWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), clientWriteChunk)
		w.arm()
		m, err := w.ResponseWriter.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// FlushError flushes within the deadline; http.ResponseController and
// flushClient use it.
func (w *clientWriter) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

// Flush implements http.Flusher.
func (w *clientWriter) Flush() { _ = w.FlushError() }

// Unwrap gives http.ResponseController the writer underneath.
func (w *clientWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeClient writes p to the client of a stream (the echo response w)
// and flushes it, each step within the client write timeout; it returns
// the first error, once the client has stopped reading or left.
func writeClient(w *echo.Response, p []byte) error {
	if _, err := w.Write(p); err != nil {
		return err
	}
	return flushClient(w)
}

// flushClient flushes a response and returns the error echo's Flush
// drops.
func flushClient(w *echo.Response) error {
	if f, ok := w.Writer.(interface{ FlushError() error }); ok {
		return f.FlushError()
	}
	return http.NewResponseController(w.Writer).Flush()
}
