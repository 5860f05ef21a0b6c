package httpadmit

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/bodywatch"
)

// StrictFraming returns next with the connection closed after the answer
// to every request whose body a proxy in front could frame differently
// (see the package doc), for the Handler of an http.Server: it covers the requests
// that no middleware sees (unknown routes, the application's own
// handlers). A service behind the middleware only needs it for what the
// middleware does not wrap; a service author sets, besides, the server's
// ReadHeaderTimeout and MaxHeaderBytes, and leaves net/http's refusals
// of ambiguous framing on (no GODEBUG httplaxcontentlength).
func StrictFraming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bodywatch.CloseSuspectFraming(w.Header(), r)
		next.ServeHTTP(w, r)
	})
}
