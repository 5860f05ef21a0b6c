package httpadmit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

// ProblemTypeBase starts every problem type URI. The types are stable: a
// client may switch on them.
const ProblemTypeBase = "urn:sluice:problem:"

// The problem types that are not rejections.
const (
	ProblemUnauthenticated = ProblemTypeBase + "unauthenticated"
	ProblemBodyTooLarge    = ProblemTypeBase + "body-too-large"
	ProblemBodyTimeout     = ProblemTypeBase + "body-timeout"
	ProblemUnavailable     = ProblemTypeBase + "unavailable"
	// ProblemInvalidCost: the request's estimated cost is outside what
	// the controller accepts (admission.ErrInvalidCost); answered 400.
	ProblemInvalidCost = ProblemTypeBase + "invalid-cost"
)

var reasonTypes = [admission.NumReasons]string{
	admission.ReasonNone:             ProblemTypeBase + "rejected",
	admission.ReasonRate:             ProblemTypeBase + "rate-limited",
	admission.ReasonQuota:            ProblemTypeBase + "quota-exceeded",
	admission.ReasonConcurrency:      ProblemTypeBase + "concurrency-limited",
	admission.ReasonQueueFull:        ProblemTypeBase + "queue-full",
	admission.ReasonQueueTimeout:     ProblemTypeBase + "queue-timeout",
	admission.ReasonStoreUnavailable: ProblemTypeBase + "store-unavailable",
	admission.ReasonOverflow:         ProblemTypeBase + "overloaded",
}

// ProblemType returns the stable problem type URI of a rejection reason,
// for example "urn:sluice:problem:rate-limited".
func ProblemType(r admission.Reason) string {
	if int(r) < len(reasonTypes) {
		return reasonTypes[r]
	}
	return reasonTypes[admission.ReasonNone]
}

// StatusCode returns the HTTP status of a rejection: 429 for the caller's
// own rate, concurrency and queue limits, quotaStatus (403 or 429; 0 means
// 403) for an exhausted quota, 503 when the limit store is unavailable or
// the partition table is full.
func StatusCode(rej *admission.Rejection, quotaStatus int) int {
	switch rej.Reason {
	case admission.ReasonQuota:
		if quotaStatus == 0 {
			return http.StatusForbidden
		}
		return quotaStatus
	case admission.ReasonStoreUnavailable, admission.ReasonOverflow:
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}

// Problem is an RFC 9457 problem details object with the extension
// members the middleware adds.
type Problem struct {
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

// WriteProblem writes p as application/problem+json with status p.Status.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	body, _ := json.Marshal(p)
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	h["Cache-Control"] = []string{"no-store"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// RejectionProblem returns the problem for a rejection. It names the
// policy and the wait, and nothing else: no backend error, no other
// tenant's figures.
func RejectionProblem(rej *admission.Rejection, quotaStatus int) *Problem {
	code := StatusCode(rej, quotaStatus)
	p := &Problem{
		Type: ProblemType(rej.Reason), Title: http.StatusText(code), Status: code,
		Policy: rej.Policy, Reason: rej.Reason.String(),
	}
	wait := max(1, Seconds(rej.RetryAfter))
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
	}
	if rej.RetryAfter == limits.Never {
		p.Detail += " The request costs more than the limit allows at once; retrying cannot succeed."
	} else {
		p.RetryAfter = wait
		p.Detail += fmt.Sprintf(" Retry after %d s.", wait)
	}
	return p
}

// WriteRejection answers a rejected request: the status of StatusCode,
// Retry-After, the limit headers of the refusing policy and a problem+json
// body.
func WriteRejection(w http.ResponseWriter, rej *admission.Rejection, quotaStatus int) {
	writeRejectionProblem(w, rej, RejectionProblem(rej, quotaStatus))
}

// writeRejectionProblem writes the headers of rej and the problem p.
func writeRejectionProblem(w http.ResponseWriter, rej *admission.Rejection, p *Problem) {
	h := w.Header()
	SetRetryAfter(h, rej.RetryAfter)
	// A store failure or a full partition table has no figures worth
	// showing: they would describe the service, not the caller.
	if rej.Status.Policy != "" && rej.Reason != admission.ReasonStoreUnavailable && rej.Reason != admission.ReasonOverflow {
		SetLimitHeaders(h, []admission.Status{rej.Status})
	}
	WriteProblem(w, p)
}

// ErrBodyTooLarge is returned by Decide when the declared body is larger
// than the limit, or when the WithRequest function failed reading a body
// over it.
var ErrBodyTooLarge = errors.New("request body too large")

// ErrBodyTimeout is returned by Decide when the WithRequest function
// failed reading a body the client did not send within the body timeout.
var ErrBodyTimeout = errors.New("request body not received in time")
