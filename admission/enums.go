package admission

// Reason says why a request was (or would have been) rejected.
type Reason uint8

// The reasons, a closed set used as a metric label.
const (
	ReasonNone Reason = iota
	ReasonRate
	ReasonQuota
	ReasonConcurrency
	ReasonQueueFull
	ReasonQueueTimeout
	ReasonStoreUnavailable
	ReasonOverflow
	// ReasonLoop: a loop policy (limits.Policy.DetectsLoops) saw the
	// session repeat the same step more often than its limit allows.
	ReasonLoop
	numReasons
)

var reasonNames = [...]string{
	ReasonNone:             "none",
	ReasonRate:             "rate",
	ReasonQuota:            "quota",
	ReasonConcurrency:      "concurrency",
	ReasonQueueFull:        "queue_full",
	ReasonQueueTimeout:     "queue_timeout",
	ReasonStoreUnavailable: "store_unavailable",
	ReasonOverflow:         "overflow",
	ReasonLoop:             "loop",
}

// NumReasons is the number of Reason values, for observers that precompute
// one cell per reason.
const NumReasons = int(numReasons)

// Outcome is what happened to a request at one policy.
type Outcome uint8

// The outcomes, a closed set used as a metric label.
const (
	// Admitted: the policy let the request through (possibly after a queue).
	Admitted Outcome = iota
	// Rejected: an enforcing policy refused the request.
	Rejected
	// WouldReject: a shadow policy would have refused it; it went through.
	WouldReject
	// Queued: the request started waiting in the policy's queue.
	Queued
	// Canceled: the caller gave up (its context ended) while waiting, or
	// during a store call (which is then no store error).
	Canceled
	// Timeout: the request waited the queue's maximum time, or its deadline
	// would pass before it could be admitted.
	Timeout
	// FailOpen: the store failed and the policy admitted without it.
	FailOpen
	// FailClosed: the store failed and the policy rejected.
	FailClosed
	numOutcomes
)

var outcomeNames = [...]string{
	Admitted:    "admitted",
	Rejected:    "rejected",
	WouldReject: "would_reject",
	Queued:      "queued",
	Canceled:    "canceled",
	Timeout:     "timeout",
	FailOpen:    "fail_open",
	FailClosed:  "fail_closed",
}

// NumOutcomes is the number of Outcome values.
const NumOutcomes = int(numOutcomes)

// String returns the name used in metric labels and logs.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// String returns the name used in metric labels and logs.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}
