package httpadmit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

// problemTypeBase starts every problem type URI. The types are stable: a
// client may switch on them.
const problemTypeBase = "urn:sluice:problem:"

// The problem types that are not rejections.
const (
	problemUnauthenticated = problemTypeBase + "unauthenticated"
	problemBodyTooLarge    = problemTypeBase + "body-too-large"
	problemBodyTimeout     = problemTypeBase + "body-timeout"
	problemUnavailable     = problemTypeBase + "unavailable"
	// problemInvalidCost: the request's estimated cost is outside what
	// the controller accepts (admission.ErrInvalidCost); answered 400.
	problemInvalidCost = problemTypeBase + "invalid-cost"
	// problemInvalidSession: the request's session id is not one
	// apikey.ValidSession accepts (apikey.ErrInvalidSession); answered
	// 400.
	problemInvalidSession = problemTypeBase + "invalid-session"
)

var reasonTypes = [admission.NumReasons]string{
	admission.ReasonNone:             problemTypeBase + "rejected",
	admission.ReasonRate:             problemTypeBase + "rate-limited",
	admission.ReasonQuota:            problemTypeBase + "quota-exceeded",
	admission.ReasonConcurrency:      problemTypeBase + "concurrency-limited",
	admission.ReasonQueueFull:        problemTypeBase + "queue-full",
	admission.ReasonQueueTimeout:     problemTypeBase + "queue-timeout",
	admission.ReasonStoreUnavailable: problemTypeBase + "store-unavailable",
	admission.ReasonOverflow:         problemTypeBase + "overloaded",
	admission.ReasonLoop:             problemTypeBase + "loop-detected",
}

// problemType returns the stable problem type URI of a rejection reason,
// for example "urn:sluice:problem:rate-limited".
func problemType(r admission.Reason) string {
	if int(r) < len(reasonTypes) {
		return reasonTypes[r]
	}
	return reasonTypes[admission.ReasonNone]
}

// problem is an RFC 9457 problem details object with the extension
// members the middleware adds.
type problem struct {
	Type   string `json:"type"`             // stable URI per reason, e.g. urn:sluice:problem:rate-limited
	Title  string `json:"title"`            // the status text
	Status int    `json:"status"`           // the HTTP status
	Detail string `json:"detail,omitempty"` // a sentence for humans
	// Policy names the policy that refused, when one did.
	Policy string `json:"policy,omitempty"`
	// Reason is the rejection reason (rate, quota, ...).
	Reason string `json:"reason,omitempty"`
	// RetryAfter repeats the Retry-After header in seconds.
	RetryAfter int64 `json:"retry_after,omitempty"`
	// RetryAfterMs is the precise wait in milliseconds, rounded up
	// (with WithRetryAfterMs).
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
}

// writeProblem writes p as application/problem+json with status p.Status.
func writeProblem(w http.ResponseWriter, p *problem) {
	body, _ := json.Marshal(p)
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	h["Cache-Control"] = []string{"no-store"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// rejectionProblem returns the problem for a rejection answered with
// status code. It names the policy and the wait, and nothing else: no
// backend error, no other tenant's figures.
func rejectionProblem(rej *admission.Rejection, code int) *problem {
	p := &problem{
		Type: problemType(rej.Reason), Title: http.StatusText(code), Status: code,
		Policy: rej.Policy, Reason: rej.Reason.String(),
	}
	wait := max(1, limitheaders.Seconds(rej.RetryAfter))
	switch rej.Reason {
	case admission.ReasonRate:
		p.Detail = fmt.Sprintf("Rate limit %q exceeded.", rej.Policy)
	case admission.ReasonQuota:
		p.Detail = fmt.Sprintf("Quota %q is used up for this period.", rej.Policy)
	case admission.ReasonConcurrency:
		p.Detail = fmt.Sprintf("Too many requests in flight under %q.", rej.Policy)
	case admission.ReasonQueueFull:
		p.Detail = fmt.Sprintf("The queue of %q is full.", rej.Policy)
	case admission.ReasonQueueTimeout:
		p.Detail = fmt.Sprintf("The request waited too long in the queue of %q.", rej.Policy)
	case admission.ReasonStoreUnavailable:
		p.Detail = "The service cannot check limits right now."
	case admission.ReasonOverflow:
		p.Detail = "The service is overloaded."
	case admission.ReasonLoop:
		p.Detail = fmt.Sprintf("The session repeats the same step more often than %q allows.", rej.Policy)
	}
	if rej.RetryAfter == limits.Never {
		p.Detail += " The request costs more than the limit allows at once; retrying cannot succeed."
	} else {
		p.RetryAfter = wait
		p.Detail += fmt.Sprintf(" Retry after %d s.", wait)
	}
	return p
}

// ErrBodyTooLarge is returned by AdmitAs (after LimitBody) when the declared body is larger
// than the limit, or when the WithRequest function failed reading a body
// over it.
var ErrBodyTooLarge = errors.New("request body too large")

// ErrBodyTimeout is returned by AdmitAs when the WithRequest function
// failed reading a body the client did not send within the body timeout.
var ErrBodyTimeout = errors.New("request body not received in time")
