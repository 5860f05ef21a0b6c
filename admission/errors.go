package admission

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// Sentinel errors matched by errors.Is against a *Rejection.
var (
	ErrRateLimited        = errors.New("rate limited")
	ErrQuotaExceeded      = errors.New("quota exceeded")
	ErrConcurrencyLimited = errors.New("concurrency limit reached")
	ErrQueueFull          = errors.New("queue full")
	ErrQueueTimeout       = errors.New("queue timeout")
	ErrStoreUnavailable   = errors.New("limit store unavailable")
	ErrOverflow           = errors.New("partition table full")
	// ErrClosed is returned by a closed Controller.
	ErrClosed = errors.New("admission controller closed")
	// ErrInvalidCost is matched by the error Admit and TryAdmit return for
	// a request whose Tokens, Cost or Units amount is negative or above
	// MaxAmount. It is the caller's error (an HTTP edge answers 400), not
	// a *Rejection: no policy is evaluated, nothing is taken and no
	// decision is reported.
	ErrInvalidCost = errors.New("invalid cost")
)

var reasonErrors = [...]error{
	ReasonRate:             ErrRateLimited,
	ReasonQuota:            ErrQuotaExceeded,
	ReasonConcurrency:      ErrConcurrencyLimited,
	ReasonQueueFull:        ErrQueueFull,
	ReasonQueueTimeout:     ErrQueueTimeout,
	ReasonStoreUnavailable: ErrStoreUnavailable,
	ReasonOverflow:         ErrOverflow,
}

// A Rejection is the error Admit returns when an enforcing policy refuses a
// request. It is a decision, not a failure: the caller should answer with
// 429 (or 403, 503) and the figures it carries.
type Rejection struct {
	// Policy is the name of the policy that refused.
	Policy string
	// Reason says why.
	Reason Reason
	// RetryAfter is how long to wait before the same request can succeed;
	// Never when it cannot succeed. For quotas it reaches the period's end.
	// With ReasonRate or ReasonQuota it never exceeds the horizon of the
	// partition's limit (Limit.Horizon), however much debt reconciliation
	// left.
	RetryAfter time.Duration
	// Status holds the refusing policy's figures for response headers.
	Status Status
	// Statuses holds the figures of every policy evaluated for the request,
	// the refusing one included, so a response can carry all its limits
	// (policies evaluated after the refusal are not included).
	Statuses []Status
	// Held says the refusing queue holds a place for the request's retry
	// from RetryAfter on, for two seconds (see Request.Retry): a client
	// should come back then, not later.
	Held bool
}

// Error describes the rejection: the reason, the policy and the wait.
func (r *Rejection) Error() string {
	if r.RetryAfter == limits.Never {
		return fmt.Sprintf("admission: %s by policy %q: cost exceeds the limit", r.Reason, r.Policy)
	}
	return fmt.Sprintf("admission: %s by policy %q, retry after %v", r.Reason, r.Policy, r.RetryAfter)
}

// Is matches the sentinel error of the rejection's reason.
func (r *Rejection) Is(target error) bool {
	return int(r.Reason) < len(reasonErrors) && reasonErrors[r.Reason] == target && target != nil
}

// Status is a partition's standing under one policy, as response headers
// report it.
type Status struct {
	// Policy is the policy name.
	Policy string
	Mode   limits.Mode
	Unit   limits.Unit
	// Algorithm of the policy.
	Algorithm limits.Algorithm
	// FailedOpen reports that the policy's store failed and the policy
	// admitted without it (on_store_error open): Remaining and Reset are
	// not known and are zero, so limit headers leave the policy out.
	FailedOpen bool
	// Limit is the policy's quota in the header sense: the capacity of a
	// bucket, the limit of a window or quota, the concurrency cap.
	Limit int64
	// Window is the time window Limit applies to (zero for concurrency).
	Window time.Duration
	// Remaining is what is left now, never negative.
	Remaining int64
	// Reset is how long until the partition is fully available again,
	// never more than Window: a fixed window's or quota period's end; the
	// time a token bucket takes to refill to its capacity; the time the
	// newest admission of a sliding log leaves the window; for a sliding
	// window counter, the time the previous window's weight has decayed,
	// or Window while the current window counts anything (the counter
	// remembers it into the next window, but the policy promises one
	// window). A token bucket in debt also reports Window. A concurrency
	// limit has no window: Reset is 0 while it has room, and its retry
	// hint (Policy.RetryHint) once it is at capacity or refused, so that
	// "Remaining 0" never comes with "retry now".
	Reset time.Duration
}
