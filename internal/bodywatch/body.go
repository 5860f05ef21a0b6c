// Package bodywatch bounds the time a client takes to send a request
// body (WatchBody) and closes the connection of a request answered
// before its body was read (CloseUnread), for the net/http middleware
// (package httpadmit), its echo adapter and the LLM gateway.
package bodywatch

import (
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// A Body is a request body read under a deadline: see WatchBody.
type Body struct {
	r        *http.Request
	rc       *http.ResponseController
	body     io.ReadCloser
	left     int64 // bytes of a declared length still to read; -1 when undeclared
	eof      bool
	timedOut bool
}

// WatchBody puts a read deadline d from now on the connection of r and
// replaces r.Body with a Body that lifts the deadline once the body has
// been read to its end: net/http then reads the connection in the
// background to notice a client that leaves, and a deadline there would
// cancel the request. A client slower than d gets read errors, and its
// request context is cancelled. WatchBody returns nil and changes nothing
// when r has no body or d <= 0.
func WatchBody(w http.ResponseWriter, r *http.Request, d time.Duration) *Body {
	if d <= 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b := &Body{r: r, rc: http.NewResponseController(w), body: r.Body, left: -1}
	if r.ContentLength > 0 {
		b.left = r.ContentLength
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(d))
	r.Body = b
	return b
}

// Read implements io.Reader.
func (b *Body) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if b.left > 0 {
		b.left = max(b.left-int64(n), 0)
	}
	var ne net.Error
	switch {
	case !b.eof && (errors.Is(err, io.EOF) || b.left == 0):
		// The end, seen or, for a declared length, reached.
		b.eof = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.As(err, &ne) && ne.Timeout():
		b.timedOut = true
	}
	return n, err
}

// Close implements io.Closer.
func (b *Body) Close() error { return b.body.Close() }

// Complete reports whether the body has been read to its end (for a
// declared length, all of its bytes).
func (b *Body) Complete() bool { return b.eof }

// TimedOut reports whether a read failed because the deadline passed.
func (b *Body) TimedOut() bool { return b.timedOut }

// AbandonGrace is how long the rest of an abandoned body may still be
// read and discarded (see Abandon).
const AbandonGrace = 500 * time.Millisecond

// Abandon ends the reads of the connection, for a handler that answered
// without reading the whole body: net/http would otherwise read (drain)
// the rest at the client's pace before closing. The answer should carry
// "Connection: close" (see CloseUnread). Abandon puts the request's own
// body back in place, so that net/http sees the early close: it then
// sends its answer, shuts the connection for writing and leaves the
// client a moment to read the answer before closing (a close with unread
// data resets the connection, and a client still sending would lose the
// answer). What net/http still discards of a short remainder is bounded
// by AbandonGrace.
func (b *Body) Abandon() {
	b.r.Body = b.body
	if !b.eof {
		_ = b.rc.SetReadDeadline(time.Now().Add(AbandonGrace))
	}
}

// CloseUnread sets "Connection: close" on an answer to r when its body
// may not have been read to its end, so that net/http closes the
// connection instead of draining the rest of the body, at the client's
// pace, before it even sends the answer. b is r's Body from WatchBody,
// or nil.
func CloseUnread(h http.Header, r *http.Request, b *Body) {
	if b != nil {
		if !b.eof {
			h.Set("Connection", "close")
		}
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		h.Set("Connection", "close")
	}
}

// CloseSuspectFraming sets "Connection: close" on the answer to r when a
// proxy in front could have framed its body differently from net/http:
// an HTTP/1.1 request with a chunked body (net/http hides a Content-Length
// sent beside it) and any HTTP/1.0 request (net/http hides its
// Transfer-Encoding). net/http then closes the connection once the
// answer is sent and never reads what follows the body as another
// request. A clean chunked request loses only its connection's reuse.
// HTTP/2 requests are left alone: their framing is the protocol's own.
// Call it before the answer's header is written; the middleware does
// (httpadmit.Middleware.Handler), and httpadmit.StrictFraming does for a
// whole server.
func CloseSuspectFraming(h http.Header, r *http.Request) {
	if r.ProtoMajor == 1 && (r.ProtoMinor == 0 || len(r.TransferEncoding) > 0) {
		h.Set("Connection", "close")
	}
}
