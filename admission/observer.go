package admission

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// An Observer receives every decision the controller makes. Implementations
// (metrics, decision logs) must be safe for concurrent use and cheap: the
// controller calls them on the request path. Events are passed by value,
// except the most frequent, Decision, which points into the request's own
// state: calling an observer never allocates. An observer must not keep
// the *Decision past the call (copy what it needs).
//
// Embed NopObserver to implement only some methods.
type Observer interface {
	// Decision is called once per policy evaluated for a request. d is
	// valid only during the call.
	Decision(d *Decision)
	// Settled is called once per policy when a ticket is settled (also when
	// its lease expired instead).
	Settled(Settlement)
	// LeaseExpired is called when n concurrency permits of a policy were
	// reclaimed because their ticket was not settled within MaxHold.
	LeaseExpired(policy string, n int)
	// PartitionsEvicted is called when idle partitions were dropped.
	PartitionsEvicted(policy string, n int)
	// StoreError is called when a store call failed or timed out.
	StoreError(StoreEvent)
}

// Decision is one policy's verdict on one request.
type Decision struct {
	// Status holds the policy's name, mode, unit and the partition's
	// figures after the decision.
	Status
	Outcome Outcome
	// Reason is set for Rejected, WouldReject, Timeout and the Fail outcomes.
	Reason Reason
	// Tenant, Operation and Model come from the request.
	Tenant    string
	Operation string
	Model     string
	// Session is the request's agent session (Request.Session), empty
	// for none: as its caller validated it, and unbounded, so never a
	// metric label.
	Session string
	// Cost is the request's cost in the policy's unit.
	Cost int64
	// QueueWait is how long the request waited in the policy's queue.
	QueueWait time.Duration
	// RetryAfter is the wait a rejection (or would-reject) advises.
	RetryAfter time.Duration
	// RolledBack is set on an Admitted decision whose permits were given
	// back because another policy rejected the request.
	RolledBack bool
	// Context is the context the request was admitted with (Admit's,
	// Begin's or Continue's ctx), so that an observer finds the request's
	// trace span in it and records the decision there, or gives a
	// histogram's exemplar the trace's id. Like d, it is valid only during
	// the call: an observer must not keep it.
	Context context.Context
}

// Settlement reports how a ticket's reservation under one policy ended.
type Settlement struct {
	Policy string
	Mode   limits.Mode
	Unit   limits.Unit
	Tenant string
	Model  string
	// Session is the request's session when the policy is keyed by
	// session, so that the partition (and Limit and Remaining) is the
	// session's own; empty for any other policy.
	Session string
	// Estimated is what was reserved at admission, Actual what was charged
	// in the end (equal when the actual amount was not known).
	Estimated int64
	Actual    int64
	// Admitted is when the request was admitted; the hold time is the time
	// from then to now (an observer that wants it reads its own clock, so
	// that settling costs no clock read when nobody needs one).
	Admitted time.Time
	// Algorithm is the policy's.
	Algorithm limits.Algorithm
	// Limit, Remaining and Window are the partition's figures after the
	// settlement, as Status has them, so an observer sees an overrun push
	// a tenant towards its limit without waiting for the tenant's next
	// request. Remaining is what the partition had left when the request
	// was admitted, less what the ticket charged since (its overruns,
	// Ticket.Charge included) plus what it gave back, clamped to
	// [0, Limit]. No store call makes it: it ignores what other requests
	// took meanwhile, so Limit-Remaining is a lower bound on the
	// partition's use, never above Limit, as long as nothing was given
	// back in between (others' refunds and releases, a bucket's refill, a
	// window's passing, which it ignores too). It is exact for a quota no
	// other request touched in between.
	// For a quota it is the figure of the grant's period, even when that
	// period has ended since. Limit is 0 when the policy admitted without
	// its store (it failed open): there are no figures then.
	Limit     int64
	Remaining int64
	Window    time.Duration
	// Context is the request's context when the settlement has one
	// (Ticket.SettleContext, Controller.Charge), nil otherwise, so that
	// an observer gives a histogram's exemplar the request's trace. It is
	// valid only during the call: an observer must not keep it.
	Context context.Context
}

// StoreEvent reports a store failure and what the policy did about it.
type StoreEvent struct {
	Policy string
	Store  string
	// Err is the store's error; never shown to clients.
	Err error
	// Action is what the policy did instead: admitted, rejected or used the
	// local fallback limiter.
	Action limits.FailMode
}

// NopObserver ignores everything. Embed it to implement part of Observer.
type NopObserver struct{}

// Decision ignores the decision.
func (NopObserver) Decision(*Decision) {}

// Settled ignores the settlement.
func (NopObserver) Settled(Settlement) {}

// LeaseExpired ignores the expiry.
func (NopObserver) LeaseExpired(string, int) {}

// PartitionsEvicted ignores the eviction.
func (NopObserver) PartitionsEvicted(string, int) {}

// StoreError ignores the failure.
func (NopObserver) StoreError(StoreEvent) {}

var _ Observer = NopObserver{}
