// Package echoadmit adapts the httpadmit middleware to echo v4, with the
// vocabulary echo users know from echo's own rate limiter: a Skipper, an
// IdentifierExtractor, a DenyHandler for rejections and an ErrorHandler
// for everything else. The decisions, headers and response bodies are
// httpadmit's: the same contract on both stacks.
//
// Operations are named "METHOD route" with echo's route pattern
// (c.Path(), for example "GET /v1/items/:id").
//
// The httpadmit middleware's options hold on echo too: its WithIdentity
// function identifies callers unless an IdentifierExtractor is set, its
// WithRejectionHandler answers rejections unless a DenyHandler is set,
// WithRetryAfterMs adds Retry-After-Ms to the default answers, and a
// request admitted after a queue wait carries the Server-Timing entry.
// The limit headers follow httpadmit's rule (see its package doc).
package echoadmit

import (
	"errors"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/internal/bodywatch"
)

// Skipper reports whether a request bypasses admission.
type Skipper func(c echo.Context) bool

// Config configures the echo middleware. Every field is optional.
type Config struct {
	// Skipper exempts requests; paths exempted in the httpadmit middleware
	// (health, metrics) are exempt too.
	Skipper Skipper
	// IdentifierExtractor returns the validated identity of the caller;
	// what httpadmit.WithIdentity says of its function holds for it (every
	// field from validated credentials). The default is the httpadmit
	// middleware's (Snapshot.Identify): its WithIdentity function, else
	// an identity placed in the request context, else an API key from the
	// hashed table, else the anonymous tenant. An error is a 401 (it goes
	// to ErrorHandler matching httpadmit.ErrUnauthenticated, its text
	// never shown).
	IdentifierExtractor func(c echo.Context) (httpadmit.Identity, error)
	// Request completes the admission request (model, estimated tokens,
	// priority) before it is evaluated. An error goes to ErrorHandler as
	// httpadmit.Middleware.AdmitAs classifies it (413 for a body over the limit,
	// 408 for one too slow, else 400 with its text, which must not reveal
	// internals); amounts are then bounded by AdmitAs (a
	// negative one goes to ErrorHandler matching admission.ErrInvalidCost:
	// a 400).
	Request func(c echo.Context, r *admission.Request) error
	// DenyHandler answers a rejected request; err is a
	// *admission.Rejection and identifier the tenant. The default is the
	// httpadmit middleware's answer: its WithRejectionHandler function, or
	// the 429/403/503 contract. A WithRejectionHandler function's
	// httpadmit.SetRejectionHeaders honours the middleware's settings
	// (WithQuotaStatus, WithRetryAfterMs); called from a DenyHandler, it
	// knows none and uses the defaults, so a service that renders its own
	// body with the standard headers sets WithRejectionHandler rather
	// than a DenyHandler.
	DenyHandler func(c echo.Context, identifier string, err error) error
	// ErrorHandler answers a request that could not be evaluated: 401 for
	// identity errors, 413 for an oversized body, 408 for a body too slow,
	// 400 for an invalid cost or a Request error, 503 when admission
	// failed. The default writes httpadmit's responses.
	ErrorHandler func(c echo.Context, err error) error
}

// Middleware returns echo middleware admitting requests through m. The
// ticket is settled when the rest of the chain returns, also when it
// panics.
func Middleware(m *httpadmit.Middleware, cfg Config) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			// One snapshot decides and answers the request.
			s := m.Snapshot()
			if (cfg.Skipper != nil && cfg.Skipper(c)) || s.Exempt(r) {
				return next(c)
			}
			w := c.Response()
			deny := cfg.DenyHandler
			if deny == nil {
				deny = func(c echo.Context, _ string, err error) error {
					s.WriteError(c.Response(), c.Request(), err)
					return nil
				}
			}
			fail := cfg.ErrorHandler
			if fail == nil {
				fail = func(c echo.Context, err error) error {
					s.WriteError(c.Response(), c.Request(), err)
					return nil
				}
			}
			if err := s.LimitBody(w, r); err != nil {
				return fail(c, err)
			}
			if b, ok := r.Body.(*bodywatch.Body); ok {
				// What the chain leaves of the body is not drained.
				defer b.Abandon()
			}
			var tenant string
			caller := func() (admission.Request, error) {
				var id httpadmit.Identity
				var err error
				if cfg.IdentifierExtractor != nil {
					id, err = cfg.IdentifierExtractor(c)
				} else {
					id, err = s.Identify(r)
				}
				tenant = id.Tenant
				return admission.Request{
					Tenant: id.Tenant, KeyID: id.KeyID, User: id.User,
					Addr:      s.Identity().ClientAddr(r),
					Operation: m.OperationName(r.Method, c.Path()),
				}, err
			}
			var complete func(*admission.Request) error
			if cfg.Request != nil {
				complete = func(req *admission.Request) error { return cfg.Request(c, req) }
			}
			tk, err := m.AdmitAs(s, w, r, caller, complete)
			if err != nil {
				var rej *admission.Rejection
				if errors.As(err, &rej) {
					return deny(c, tenant, err)
				}
				return fail(c, err)
			}
			defer tk.Done()
			return next(c)
		}
	}
}
