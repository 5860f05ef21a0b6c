package httpadmit

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

// reqState is everything the middleware puts in a request's context, as
// one value that is the context itself: the identity the request was
// admitted as, the ticket (WithTicketInContext) and the snapshot that
// decided it. One allocation, which the limit headers' values share
// (served), rather than a context.WithValue and a boxed value per item.
type reqState struct {
	context.Context // the request's context before the middleware

	snap      *Snapshot // nil: placed by ContextWithIdentity alone
	id        Identity
	tk        admission.Ticket
	hasID     bool
	hasTicket bool
}

// served is the per-request allocation of the middleware's admitted
// path: the context value, the values of the limit headers set on the
// response, and the request the handler gets (the copy
// http.Request.WithContext makes, held here rather than allocated apart).
type served struct {
	reqState
	vals limitheaders.Values
	req  http.Request
}

// stateKey is the context key under which a reqState finds itself.
type stateKey struct{}

// Value returns s for stateKey, and otherwise what the context it wraps
// holds.
func (s *reqState) Value(key any) any {
	if _, ok := key.(stateKey); ok {
		return s
	}
	return s.Context.Value(key)
}

// String names s without its contents, as context.WithValue's contexts
// do: a printed context shows no identity.
func (s *reqState) String() string { return fmt.Sprint(s.Context) + ".WithValue(httpadmit)" }

// stateOf returns the innermost reqState of ctx, or nil.
func stateOf(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

// withState returns st wrapping ctx with what ctx's own state holds
// (so that the innermost state is complete), for the caller to add to.
func withState(ctx context.Context, st *reqState) *reqState {
	if p := stateOf(ctx); p != nil {
		*st = *p
	}
	st.Context = ctx
	return st
}

// ContextWithIdentity returns a context carrying id. An authentication middleware
// that runs before this one calls it once it has validated the caller's
// credentials (a JWT, a session); the admission middleware then uses id
// instead of looking for an API key.
func ContextWithIdentity(ctx context.Context, id Identity) context.Context {
	st := withState(ctx, new(reqState))
	st.id, st.hasID = id, true
	return st
}

// IdentityFrom returns the identity placed in ctx by ContextWithIdentity:
// in a handler behind the middleware (Middleware.Handler), the identity
// the request was admitted as, which the handler uses rather than
// identifying the caller again; in a WithRejectionHandler function, the
// identity the request was refused as.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	if st := stateOf(ctx); st != nil && st.hasID {
		return st.id, true
	}
	return Identity{}, false
}

// TicketFrom returns the ticket of the request whose context is ctx, when
// the middleware has WithTicketInContext. Settling it in the handler is
// fine: the middleware's own settlement then does nothing.
func TicketFrom(ctx context.Context) (admission.Ticket, bool) {
	if st := stateOf(ctx); st != nil && st.hasTicket {
		return st.tk, true
	}
	return admission.Ticket{}, false
}

// snapshotOf returns the snapshot that decided r, or one with the
// default settings for a request the middleware did not see.
func snapshotOf(r *http.Request) *Snapshot {
	if st := stateOf(r.Context()); st != nil && st.snap != nil {
		return st.snap
	}
	return &defaultSnapshot
}

// defaultSnapshot holds the default settings of the rejection answer.
var defaultSnapshot = Snapshot{quotaStatus: http.StatusForbidden}
