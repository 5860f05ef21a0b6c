package httpadmit

import "net/http"

// CloseSuspectFraming sets "Connection: close" on the answer to r when a
// proxy in front could have framed its body differently from net/http:
// an HTTP/1.1 request with a chunked body (net/http hides a Content-Length
// sent beside it) and any HTTP/1.0 request (net/http hides its
// Transfer-Encoding). net/http then closes the connection once the
// answer is sent and never reads what follows the body as another
// request. A clean chunked request loses only its connection's reuse.
// HTTP/2 requests are left alone: their framing is the protocol's own.
// Call it before the answer's header is written; the middleware does
// (see Middleware.Handler), and StrictFraming does for a whole server.
func CloseSuspectFraming(h http.Header, r *http.Request) {
	if r.ProtoMajor == 1 && (r.ProtoMinor == 0 || len(r.TransferEncoding) > 0) {
		h.Set("Connection", "close")
	}
}

// StrictFraming returns next with CloseSuspectFraming applied to every
// request, for the Handler of an http.Server: it covers the requests
// that no middleware sees (unknown routes, the application's own
// handlers). A service behind the middleware only needs it for what the
// middleware does not wrap; a service author sets, besides, the server's
// ReadHeaderTimeout and MaxHeaderBytes, and leaves net/http's refusals
// of ambiguous framing on (no GODEBUG httplaxcontentlength).
func StrictFraming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		CloseSuspectFraming(w.Header(), r)
		next.ServeHTTP(w, r)
	})
}
