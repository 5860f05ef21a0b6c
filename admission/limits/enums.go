package limits

import (
	"fmt"
	"strings"
)

// Mode says what a policy does with its decision.
type Mode uint8

const (
	// Enforce rejects or queues requests over the limit.
	Enforce Mode = iota
	// Shadow never blocks: it keeps the state enforcement would keep and
	// reports would-reject decisions.
	Shadow
	// Off disables the policy: it is not evaluated at all.
	Off
)

var modeNames = [...]string{Enforce: "enforce", Shadow: "shadow", Off: "off"}

// Algorithm is the limiting algorithm of a policy.
type Algorithm uint8

// The algorithms. See the package documentation for what each is for.
const (
	TokenBucket Algorithm = iota
	FixedWindow
	SlidingWindow
	SlidingLog
	Concurrency
	Quota
)

var algorithmNames = [...]string{
	TokenBucket:   "token_bucket",
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
	Concurrency:   "concurrency",
	Quota:         "quota",
}

// IsRate reports whether the algorithm limits a rate over time (everything
// but Concurrency). Among the policies Begin decides, and among the others,
// rate and quota checks run before concurrency; queues come last.
func (a Algorithm) IsRate() bool { return a != Concurrency }

// Order is the order in which a queue serves the waiters of one tenant.
type Order uint8

const (
	// OldestFirst serves waiters in arrival order.
	OldestFirst Order = iota
	// NewestFirst serves the most recent waiter first, which keeps latency
	// low for fresh requests when a backlog has built up.
	NewestFirst
)

var orderNames = [...]string{OldestFirst: "oldest_first", NewestFirst: "newest_first"}

// FailMode is what a policy does when its store cannot answer.
type FailMode uint8

const (
	// FailOpenMode admits the request.
	FailOpenMode FailMode = iota
	// FailClosedMode rejects it with ReasonStoreUnavailable.
	FailClosedMode
	// FailLocalMode evaluates the policy on an in-memory limiter whose limit
	// is divided by the policy's Replicas.
	FailLocalMode
)

var failModeNames = [...]string{FailOpenMode: "open", FailClosedMode: "closed", FailLocalMode: "local"}

// OverflowMode is what a policy does with a new partition when its table is
// full of partitions that cannot be evicted.
type OverflowMode uint8

const (
	// OverflowShared puts every request that has no room for its own
	// partition into one shared overflow partition with the policy's limit.
	OverflowShared OverflowMode = iota
	// OverflowReject rejects such requests with ReasonOverflow.
	OverflowReject
	// OverflowEvict gives every new key a partition of its own, dropping
	// the partition of a sample that loses the least (the one neutral
	// soonest, then the least recently used; never one holding
	// concurrency permits): a flood of new keys evicts its own
	// partitions, not those of active callers, and cannot exhaust a
	// shared one. A dropped partition starts again from nothing if its
	// key returns. When no partition can be dropped, new keys share the
	// overflow partition.
	OverflowEvict
)

var overflowNames = [...]string{OverflowShared: "shared", OverflowReject: "reject", OverflowEvict: "evict"}

// Period is the length of a quota's period.
type Period uint8

const (
	// PeriodFixed is a period of Policy.Per, aligned to the Unix epoch.
	PeriodFixed Period = iota
	// PeriodDay resets at midnight in the policy's location (UTC by default).
	PeriodDay
	// PeriodMonth resets at midnight on the first day of each calendar month.
	PeriodMonth
)

var periodNames = [...]string{PeriodFixed: "fixed", PeriodDay: "day", PeriodMonth: "month"}

// KeyPart is one component of a partition key.
type KeyPart uint8

const (
	// KeyGlobal puts every request in one partition: a shared cap.
	KeyGlobal KeyPart = iota
	// KeyTenant is the request's tenant.
	KeyTenant
	// KeyKeyID is the id of the credential used.
	KeyKeyID
	// KeyUser is the end user inside the tenant.
	KeyUser
	// KeyIP is the exact client address.
	KeyIP
	// KeyIPPrefix is the client address grouped: IPv4 /32, IPv6 /64.
	KeyIPPrefix
	// KeyModel is the model asked for.
	KeyModel
	// KeyOperation is the route or operation.
	KeyOperation
	// KeySession is the agent session the request belongs to, inside its
	// tenant: a policy keyed by session is always keyed by tenant too
	// (Validate), so a tenant's sessions are counted apart from another
	// tenant's and a tenant inventing sessions stays under its own
	// tenant-keyed policies. A request without a session is not counted
	// by a session-keyed policy at all (see Policy.AppliesTo).
	KeySession
	// KeyFingerprint is the fingerprint of the step a request makes in
	// its session (admission.Request.Fingerprint): the same tool called
	// with the same arguments on the same result gives the same
	// fingerprint. A policy keyed by it is a loop policy (see
	// Policy.DetectsLoops): always keyed by tenant and session too
	// (Validate), it counts how often a session repeats one step, and
	// its refusals have the reason loop. A request without a fingerprint
	// is not counted by it.
	KeyFingerprint
)

var keyPartNames = [...]string{
	KeyGlobal:      "global",
	KeyTenant:      "tenant",
	KeyKeyID:       "key_id",
	KeyUser:        "user",
	KeyIP:          "ip",
	KeyIPPrefix:    "ip_prefix",
	KeyModel:       "model",
	KeyOperation:   "operation",
	KeySession:     "session",
	KeyFingerprint: "fingerprint",
}

// String returns the name used in configuration files and metric labels.
func (m Mode) String() string { return enumString(modeNames[:], int(m)) }

// String returns the name used in configuration files and metric labels.
func (a Algorithm) String() string { return enumString(algorithmNames[:], int(a)) }

// String returns the name used in configuration files and metric labels.
func (o Order) String() string { return enumString(orderNames[:], int(o)) }

// String returns the name used in configuration files and metric labels.
func (f FailMode) String() string { return enumString(failModeNames[:], int(f)) }

// String returns the name used in configuration files and metric labels.
func (o OverflowMode) String() string { return enumString(overflowNames[:], int(o)) }

// String returns the name used in configuration files and metric labels.
func (p Period) String() string { return enumString(periodNames[:], int(p)) }

// String returns the name used in configuration files and metric labels.
func (k KeyPart) String() string { return enumString(keyPartNames[:], int(k)) }

// MarshalText encodes the name returned by String.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// MarshalText encodes the name returned by String.
func (a Algorithm) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// MarshalText encodes the name returned by String.
func (o Order) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// MarshalText encodes the name returned by String.
func (f FailMode) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// MarshalText encodes the name returned by String.
func (o OverflowMode) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// MarshalText encodes the name returned by String.
func (p Period) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// MarshalText encodes the name returned by String.
func (k KeyPart) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses "enforce", "shadow" or "off".
func (m *Mode) UnmarshalText(b []byte) error { return parseEnum(modeNames[:], "mode", b, m) }

// UnmarshalText parses an algorithm name such as "token_bucket".
func (a *Algorithm) UnmarshalText(b []byte) error {
	return parseEnum(algorithmNames[:], "algorithm", b, a)
}

// UnmarshalText parses "oldest_first" or "newest_first".
func (o *Order) UnmarshalText(b []byte) error { return parseEnum(orderNames[:], "queue order", b, o) }

// UnmarshalText parses "open", "closed" or "local".
func (f *FailMode) UnmarshalText(b []byte) error {
	return parseEnum(failModeNames[:], "store failure mode", b, f)
}

// UnmarshalText parses "shared", "reject" or "evict".
func (o *OverflowMode) UnmarshalText(b []byte) error {
	return parseEnum(overflowNames[:], "overflow mode", b, o)
}

// UnmarshalText parses "fixed", "day" or "month".
func (p *Period) UnmarshalText(b []byte) error { return parseEnum(periodNames[:], "period", b, p) }

// UnmarshalText parses a key part name such as "tenant" or "ip_prefix".
func (k *KeyPart) UnmarshalText(b []byte) error { return parseEnum(keyPartNames[:], "key", b, k) }

func enumString(names []string, i int) string {
	if i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("unknown(%d)", i)
}

func parseEnum[T ~uint8](names []string, what string, b []byte, dst *T) error {
	for i, n := range names {
		if n == string(b) {
			*dst = T(i)
			return nil
		}
	}
	return fmt.Errorf("unknown %s %q (want one of %s)", what, b, strings.Join(names, ", "))
}

// A Unit names what a policy counts. Requests are always worth 1; every other
// unit is an amount the caller estimates before the work starts (tokens,
// micro-dollars, operation cost units) and may reconcile when it ends.
type Unit string

// The units every caller can use. Any other non-empty string is a named unit
// whose amount the caller supplies in Request.Units.
//
// The token units split a request's tokens the way providers limit and
// bill them, so that a policy can mirror a provider's own limit exactly:
// UnitInputTokens counts the prompt tokens not read from a prompt cache
// (cache writes included), which is what Anthropic's input-tokens-per-minute
// limit counts; UnitCachedInputTokens the prompt tokens read from the
// cache; UnitOutputTokens the completion, hidden reasoning included, as
// every provider bills it (Anthropic's output-tokens-per-minute limit).
// UnitTokens stays the whole: input + cached input + output (a request or
// usage that gives the three but no tokens of its own counts their sum).
// The caller supplies the three in Request.Units (before the call nothing
// is known to be cached: the whole prompt is input_tokens) and in
// Usage.Units once the provider reported them.
const (
	UnitRequests          Unit = "requests"
	UnitTokens            Unit = "tokens"
	UnitCost              Unit = "cost"
	UnitInputTokens       Unit = "input_tokens"
	UnitOutputTokens      Unit = "output_tokens"
	UnitCachedInputTokens Unit = "cached_input_tokens"
	// UnitSteps counts the steps of an agent session: each model call is
	// one step, and so is each tool call, so that one budget bounds both.
	// The caller supplies it in Request.Units (an amount of 1 for a
	// step); a step is spent once the call is admitted, whatever it
	// produced.
	UnitSteps Unit = "steps"
)

// Fingerprint is a fixed-size hash of one step of an agent session, the
// value of KeyFingerprint (see admission.Request.Fingerprint). The zero
// value means no fingerprint.
type Fingerprint [16]byte

// IsZero reports whether f is the zero Fingerprint (none).
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }
