package limits

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Defaults applied by the controller to zero Policy fields.
const (
	DefaultMaxPartitions = 100_000
	DefaultIdleTimeout   = 10 * time.Minute
	DefaultMaxHold       = 30 * time.Second // a lost permit costs seconds, not minutes
	DefaultRetryHint     = time.Second
)

// A Policy is one limit: which requests it applies to (Match), how they are
// grouped into partitions (Key), what it counts (Unit), how (Algorithm and
// its parameters), whether excess work waits (Queue), and whether it is
// enforced (Mode).
type Policy struct {
	// Name identifies the policy in decisions, metrics and headers.
	Name string
	// Match selects the requests the policy applies to. The zero Match
	// matches every request.
	Match Match
	// Key lists the request fields whose values form a partition key. Empty
	// or [KeyGlobal] means one partition for everyone.
	Key []KeyPart
	// Unit is what the policy counts; empty means UnitRequests.
	Unit Unit
	// Algorithm and its parameters.
	Algorithm Algorithm
	// Limit is the amount allowed: tokens refilled per Per (TokenBucket),
	// per window (FixedWindow, SlidingWindow, SlidingLog), per period
	// (Quota), or in flight at once (Concurrency).
	Limit int64
	// Per is the refill period of a token bucket, the window of the window
	// algorithms, and the length of a PeriodFixed quota.
	Per time.Duration
	// Burst is a token bucket's capacity; zero means Limit.
	Burst int64
	// Period is a quota's period kind.
	Period Period
	// Location is where PeriodDay and PeriodMonth quotas reset; nil means UTC.
	Location *time.Location
	// MaxCost, when positive, is the largest single cost the policy must be
	// able to admit; Validate checks the limit can hold it.
	MaxCost int64
	// Queue, when Size is positive, lets requests that do not fit wait.
	Queue Queue
	// Mode is Enforce, Shadow or Off.
	Mode Mode
	// MaxPartitions bounds the number of partitions kept in memory;
	// zero means DefaultMaxPartitions.
	MaxPartitions int
	// Overflow says what happens to new partitions when the table is full.
	Overflow OverflowMode
	// IdleTimeout is how long an unused partition is kept once its state is
	// back to neutral; zero means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxHold is the lease of a Concurrency permit: the controller renews
	// it every third of MaxHold while its ticket lives, and a permit whose
	// process crashed (or whose release never landed) returns MaxHold after
	// its last renewal; zero means DefaultMaxHold.
	MaxHold time.Duration
	// RetryHint is the retry-after given for concurrency rejections, where
	// the wait cannot be computed; zero means DefaultRetryHint.
	RetryHint time.Duration
	// Store names the store that holds the policy's state (registered with
	// WithStore); empty means in memory.
	Store string
	// OnStoreError is what happens when the store fails.
	OnStoreError FailMode
	// Replicas divides the limit of the local fallback limiter used with
	// FailLocalMode; zero means 1.
	Replicas int
}

// Match selects requests by operation and model. An empty list matches
// everything.
type Match struct {
	Operations []string
	Models     []string
}

// Queue configures waiting for a policy.
type Queue struct {
	// Size is the maximum number of waiters per partition; 0 disables queuing.
	Size int
	// PerTenant, when positive, is the most waiters one tenant may have
	// in a partition's queue, so that on a policy shared by tenants (a
	// global concurrency cap, a provider's budget) one tenant's backlog
	// cannot take every place and leave the others queue_full. Zero means
	// Size.
	PerTenant int
	// Timeout is the longest a request waits; zero means it waits until its
	// context ends.
	Timeout time.Duration
	// Order is the order within one tenant's waiters. Across tenants the
	// queue is served round robin, by priority first.
	Order Order
	// Shares, when set, replace strict priority between classes (a
	// class is the requests of one Request.Priority) with guaranteed
	// shares: see Share.
	Shares []Share
}

// MaxShares bounds the classes a queue reserves shares for.
const MaxShares = 16

// A Share guarantees one priority class part of a policy while its queue
// is contended. On a rate policy, waiting classes are served in
// proportion to their percents of the cost admitted (tokens for a tokens
// policy); on a concurrency policy, the class holding the least of the
// permits for its percent is served next, so a class of long requests
// cannot keep the permits a class of short ones frees. Either way each
// waiting class gets at least its percent, and a class with nobody
// waiting leaves its share to the others, which borrow it (no permit is
// taken back from a running request). The priorities no Share names
// form one class whose share is what the percents leave (100 minus their
// sum); when they add up to 100, those requests are served only when no
// class with a share waits. For example {Priority: 10, Percent: 70} alone
// gives interactive traffic (priority 10) at least 70% and everything
// else at least 30% when both wait. Among the priorities without a share,
// higher ones go first; within a priority, tenants are served round
// robin. A partition's queue takes the shares its policy has when the
// queue forms: a reload that changes them applies from the next time the
// queue forms.
type Share struct {
	Priority int
	Percent  int
}

// Override replaces some of a policy's limits for the tenants of a plan.
// Zero fields keep the policy's value.
type Override struct {
	Limit int64
	Burst int64
	Per   time.Duration
}

// Base returns the policy's own Limit, with defaults applied: the figures
// of every partition whose tenant no plan overrides.
func (p *Policy) Base() Limit {
	l := Limit{
		Algorithm: p.Algorithm,
		Period:    p.Period,
		Amount:    p.Limit,
		Burst:     p.Burst,
		Per:       p.Per,
		MaxHold:   p.MaxHold,
		Location:  p.Location,
	}
	if l.Burst == 0 {
		l.Burst = l.Amount
	}
	if l.MaxHold == 0 {
		l.MaxHold = DefaultMaxHold
	}
	return l.withWindow()
}

// Apply returns l with the non-zero fields of o.
func (o Override) Apply(l Limit) Limit {
	burstFollows := l.Burst == l.Amount
	if o.Limit > 0 {
		l.Amount = o.Limit
		if burstFollows {
			l.Burst = o.Limit
		}
	}
	if o.Burst > 0 {
		l.Burst = o.Burst
	}
	if o.Per > 0 {
		l.Per = o.Per
	}
	return l.withWindow()
}

// DecidedAtBegin reports whether admission.Controller.Begin decides the
// policy: it needs nothing a request body tells (no model in its match or
// key, no session in its key, a cost of one request) and never waits (no
// queue).
func (p *Policy) DecidedAtBegin() bool {
	return len(p.Match.Models) == 0 && !slices.Contains(p.Key, KeyModel) && !p.KeyedBySession() && !p.DetectsLoops() &&
		(p.Unit == "" || p.Unit == UnitRequests) && p.Queue.Size == 0
}

// KeyedBySession reports whether the policy's key holds KeySession.
func (p *Policy) KeyedBySession() bool { return slices.Contains(p.Key, KeySession) }

// DetectsLoops reports whether the policy is a loop policy: its key holds
// KeyFingerprint, so each of its partitions counts the repetitions of one
// step of one session, and a request it refuses has the reason loop
// rather than rate or quota.
func (p *Policy) DetectsLoops() bool { return slices.Contains(p.Key, KeyFingerprint) }

// AppliesTo reports whether the policy evaluates a request for operation
// and model that belongs to a session (hasSession): it Matches them, and
// a policy keyed by session applies only to requests of a session. A
// request without one is not counted under an invented session (which
// every sessionless request of the tenant would share, so that a session
// budget would become a tenant budget): the tenant's own policies bound
// it.
func (p *Policy) AppliesTo(operation, model string, hasSession bool) bool {
	return (hasSession || !p.KeyedBySession()) && p.Matches(operation, model)
}

// Matches reports whether the policy applies to a request for operation
// and model: it is not Off, and each non-empty list of its Match holds the
// request's value.
func (p *Policy) Matches(operation, model string) bool {
	if p.Mode == Off {
		return false
	}
	if len(p.Match.Operations) > 0 && !slices.Contains(p.Match.Operations, operation) {
		return false
	}
	if len(p.Match.Models) > 0 && !slices.Contains(p.Match.Models, model) {
		return false
	}
	return true
}

// validateShares checks the shares: each percent in [1, 100], each
// priority once, at most MaxShares of them adding up to at most 100, on a
// queue.
func (q *Queue) validateShares(path string) error {
	if len(q.Shares) == 0 {
		return nil
	}
	var errs []error
	bad := func(p, format string, args ...any) {
		errs = append(errs, &FieldError{Path: p, Msg: fmt.Sprintf(format, args...)})
	}
	if q.Size == 0 {
		bad(path, "set without a queue (queue.size is 0)")
	}
	if len(q.Shares) > MaxShares {
		bad(path, "at most %d classes, got %d", MaxShares, len(q.Shares))
	}
	sum := 0
	seen := map[int]int{}
	for i, s := range q.Shares {
		at := fmt.Sprintf("%s[%d]", path, i)
		if s.Percent < 1 || s.Percent > 100 {
			bad(at+".percent", "must be in [1, 100], got %d", s.Percent)
		} else {
			sum += s.Percent
		}
		if j, dup := seen[s.Priority]; dup {
			bad(at+".priority", "%d already has a share at %s[%d]", s.Priority, path, j)
		}
		seen[s.Priority] = i
	}
	if sum > 100 {
		bad(path, "percents add up to %d, more than 100", sum)
	}
	return errors.Join(errs...)
}

// maxLogLimit bounds a sliding log's limit, its own or a plan's: the
// entries one partition keeps.
const maxLogLimit = 1_000_000

// maxDuration bounds every duration of a policy: an instant plus it never
// overflows (a lease's expiry, a period's end) for centuries to come.
const maxDuration = 100 * 365 * 24 * time.Hour

// FieldError is one problem found by Validate, with the path of the field.
type FieldError struct {
	Path string
	Msg  string
}

// Error returns "path: message".
func (e *FieldError) Error() string { return e.Path + ": " + e.Msg }

// Validate reports every problem with p at once, each as a *FieldError
// whose path starts with prefix (for example "policies[2]"). Among them:
// a limit, burst or max cost above MaxAmount, and a duration above 100
// years (an instant plus it could overflow).
func (p *Policy) Validate(prefix string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Path: prefix + "." + field, Msg: fmt.Sprintf(format, args...)})
	}
	if p.Name == "" {
		bad("name", "must not be empty")
	}
	if int(p.Algorithm) >= len(algorithmNames) {
		bad("algorithm", "unknown algorithm %d", p.Algorithm)
	}
	if int(p.Mode) >= len(modeNames) {
		bad("mode", "unknown mode %d", p.Mode)
	}
	if p.Limit <= 0 {
		bad("limit", "must be > 0, got %d", p.Limit)
	}
	if p.Limit > MaxAmount {
		bad("limit", "must be <= %d (MaxAmount), got %d", MaxAmount, p.Limit)
	}
	if p.Burst < 0 {
		bad("burst", "must be >= 0, got %d", p.Burst)
	}
	if p.Burst > MaxAmount {
		bad("burst", "must be <= %d (MaxAmount), got %d", MaxAmount, p.Burst)
	}
	if p.Burst > 0 && p.Algorithm != TokenBucket {
		bad("burst", "only a token_bucket has a burst")
	}
	switch p.Algorithm {
	case TokenBucket, FixedWindow, SlidingWindow, SlidingLog:
		if p.Per <= 0 {
			bad("per", "must be > 0 for %s", p.Algorithm)
		}
	case Quota:
		if p.Period == PeriodFixed && p.Per <= 0 {
			bad("per", "a fixed quota period must be > 0")
		}
		if p.Period != PeriodFixed && p.Per != 0 {
			bad("per", "must be empty for a %s quota", p.Period)
		}
	case Concurrency:
		if p.Per != 0 {
			bad("per", "a concurrency limit has no period")
		}
	}
	if p.Algorithm == SlidingLog && p.Limit > maxLogLimit {
		bad("limit", "a sliding_log keeps one entry per admission: at most %d, got %d", maxLogLimit, p.Limit)
	}
	if p.MaxCost < 0 {
		bad("max_cost", "must be >= 0")
	}
	if p.MaxCost > MaxAmount {
		bad("max_cost", "must be <= %d (MaxAmount), got %d", MaxAmount, p.MaxCost)
	}
	if p.MaxCost > 0 {
		capacity := p.Limit
		if p.Algorithm == TokenBucket && p.Burst > 0 {
			capacity = p.Burst
		}
		if capacity < p.MaxCost {
			bad("burst", "%d is smaller than max_cost %d: the largest request could never be admitted", capacity, p.MaxCost)
		}
	}
	if p.Queue.Size < 0 {
		bad("queue.size", "must be >= 0")
	}
	if p.Queue.Timeout < 0 {
		bad("queue.timeout", "must be >= 0")
	}
	if p.Queue.PerTenant < 0 || p.Queue.PerTenant > p.Queue.Size {
		bad("queue.per_tenant", "%d must be between 0 and queue.size (%d)", p.Queue.PerTenant, p.Queue.Size)
	}
	if p.Queue.Timeout > 0 && p.Queue.Size == 0 {
		bad("queue.timeout", "set without a queue (queue.size is 0)")
	}
	errs = append(errs, p.Queue.validateShares(prefix+".queue.shares"))
	if p.Queue.Size > 0 && p.Algorithm == Quota {
		bad("queue.size", "a quota cannot queue: its period is too long to wait for")
	}
	if p.MaxPartitions < 0 {
		bad("max_partitions", "must be >= 0")
	}
	if p.IdleTimeout < 0 {
		bad("idle_timeout", "must be >= 0")
	}
	if p.MaxHold < 0 {
		bad("max_hold", "must be >= 0")
	}
	if p.Replicas < 0 {
		bad("replicas", "must be >= 0")
	}
	if p.RetryHint < 0 {
		bad("retry_hint", "must be >= 0")
	}
	for _, d := range [...]struct {
		field string
		v     time.Duration
	}{{"per", p.Per}, {"queue.timeout", p.Queue.Timeout}, {"idle_timeout", p.IdleTimeout}, {"max_hold", p.MaxHold}, {"retry_hint", p.RetryHint}} {
		if d.v > maxDuration {
			bad(d.field, "must be at most 100 years, got %v", d.v)
		}
	}
	seen := map[KeyPart]bool{}
	for i, k := range p.Key {
		if int(k) >= len(keyPartNames) {
			bad(fmt.Sprintf("key[%d]", i), "unknown key part %d", k)
		}
		if seen[k] {
			bad(fmt.Sprintf("key[%d]", i), "%s appears twice", k)
		}
		seen[k] = true
	}
	if seen[KeyGlobal] && len(p.Key) > 1 {
		bad("key", "global cannot be combined with other key parts")
	}
	if seen[KeySession] && !seen[KeyTenant] {
		bad("key", "session must be combined with tenant: a session is counted under its tenant")
	}
	errs = append(errs, p.validateLoop(prefix, seen))
	return errors.Join(errs...)
}

// validateLoop checks a loop policy (DetectsLoops): a fingerprint is a
// step of a session, counted under its tenant; the policy counts steps
// (requests or steps), never waits (a repeated step that waits its turn
// is still a loop), is not a concurrency limit, and evicts a partition
// when its table is full (a forgotten count only delays a detection; a
// shared partition would refuse sound steps).
func (p *Policy) validateLoop(prefix string, seen map[KeyPart]bool) error {
	if !seen[KeyFingerprint] {
		return nil
	}
	var errs []error
	bad := func(field, msg string) { errs = append(errs, &FieldError{Path: prefix + "." + field, Msg: msg}) }
	if !seen[KeyTenant] || !seen[KeySession] {
		bad("key", "fingerprint must be combined with tenant and session: a loop is one session's repeated step")
	}
	if !p.Algorithm.IsRate() {
		bad("algorithm", "a loop policy counts repeated steps over time: use sliding_window, sliding_log, fixed_window, token_bucket or quota")
	}
	if p.Unit != "" && p.Unit != UnitRequests && p.Unit != UnitSteps {
		bad("unit", "a loop policy counts steps: use requests or steps")
	}
	if p.Queue.Size > 0 {
		bad("queue.size", "a loop policy cannot queue: a repeated step that waits its turn is still a loop")
	}
	if p.Overflow != OverflowEvict {
		bad("overflow", "a loop policy needs overflow: evict: with its table full, shared would count the new steps of every session as one step and refuse them as a loop, reject would refuse them all")
	}
	return errors.Join(errs...)
}
