package budget

import "net/http"

// SetTransport makes h's deliveries go through rt, for tests that serve a
// receiver on in-memory connections (package internal/pipenet) inside a
// testing/synctest bubble. It must be called before the first Notify.
func SetTransport(h *Webhook, rt http.RoundTripper) { h.client.Transport = rt }
