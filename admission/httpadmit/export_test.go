package httpadmit

import (
	"net/http"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
)

// Names the tests of package httpadmit_test reach that the package does
// not export.

// Problem is the problem details object the middleware writes.
type Problem = problem

// The problem types.
const (
	ProblemTypeBase        = problemTypeBase
	ProblemBodyTooLarge    = problemBodyTooLarge
	ProblemBodyTimeout     = problemBodyTimeout
	ProblemInvalidCost     = problemInvalidCost
	ProblemUnauthenticated = problemUnauthenticated
	ProblemUnavailable     = problemUnavailable
	DefaultMaxBody         = defaultMaxBody
	DefaultBodyTimeout     = defaultBodyTimeout
	DefaultAnonymousTenant = defaultAnonymousTenant
)

// Group is apikey.Group, which ClientAddr applies.
var Group = apikey.Group

// NewKeySet is newKeySet.
var NewKeySet = newKeySet

// WriteRejection writes the default answer to rej with quotaStatus.
func WriteRejection(w http.ResponseWriter, rej *admission.Rejection, quotaStatus int) {
	writeRejection(w, rej, &Snapshot{quotaStatus: quotaStatus})
}

// Decide admits r, or says why not. On admission it sets the limit headers
// (and the shadow header when enabled) on w and returns the ticket, which
// the caller settles when the work ends. Otherwise it returns the reason
// without writing anything: ErrBodyTooLarge, ErrBodyTimeout,
// ErrUnknownKey, ErrNoCredentials, an error matching ErrUnauthenticated
// (from the WithIdentity function) or admission.ErrInvalidCost, a
// *admission.Rejection, the request context's error when the client went
// away while queued, or another error when admission itself failed.
// WriteError answers each of them.
func (m *Middleware) Decide(w http.ResponseWriter, r *http.Request) (admission.Ticket, error) {
	_, tk, err := m.decide(m.cur.Load(), w, r, nil)
	return tk, err
}

// Admit asks the controller to admit req on behalf of r (whose context
// bounds any queue wait) by the policies of the snapshot in force and,
// when it is admitted, sets the limit headers (and the shadow header when
// enabled) on w.
func (m *Middleware) Admit(w http.ResponseWriter, r *http.Request, req admission.Request) (admission.Ticket, error) {
	return m.admit(m.cur.Load(), w, r, req, nil)
}

// Operation returns the operation name of r: "METHOD route", the route
// being the pattern that matched (Request.Pattern, or the WithRoutes mux's
// match) without its method, else the URL path.
func (m *Middleware) Operation(r *http.Request) string { return m.operation(m.cur.Load(), r) }

// Len returns the number of keys.
func (s *KeySet) Len() int { return s.n }

// With is with.
func (s *KeySet) With(h apikey.Hash, id Identity) *KeySet { return s.with(h, id) }

// Without is without.
func (s *KeySet) Without(h apikey.Hash) *KeySet { return s.without(h) }

// KeyTable is keyTable.
type KeyTable = keyTable

// StripCredentials deletes from h every header CredentialHeader names,
// for a request about to be forwarded.
func (ic *IdentityConfig) StripCredentials(h http.Header) {
	for k := range h {
		if ic.CredentialHeader(k) {
			delete(h, k)
		}
	}
}

// Unauthenticated is unauthenticated.
var Unauthenticated = unauthenticated
