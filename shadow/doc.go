// Package shadow is about trying limits without enforcing them. It holds
// what runs inside a live process next to the controller: a decision log
// (Log, FileObserver) that writes what shadow policies would reject
// without flooding the log, a slog handler that clips what clients sent
// (BoundedHandler), and a Recorder whose Report tells, per policy, what
// share of the last window's requests it refused or would have refused,
// and from which tenants — the evidence for flipping a policy from shadow
// to enforce. The Log and the Recorder are admission.Observers; combine
// them with the metrics observer and the status page through Join.
//
// A policy's figures have one form, Figures, wherever they come from: the
// Recorder's Report, the status page and a replay's report.
//
// Which package to open for what:
//
//   - shadow (this package): the decision log, the logging section of a
//     policy file (FileLogger, FileObserver), the live rollout report
//     (Recorder), Figures, and Join.
//   - shadow/status: the operator's live view of a controller, served at
//     /status and /status.json (status.Page).
//   - shadow/requestlog: the request log: its JSON Lines format
//     (requestlog.Record), reading it (requestlog.Reader) and writing it
//     from live traffic (requestlog.Writer).
//   - shadow/replay: the what-if engine: a request log replayed through
//     candidate configurations on a virtual clock (replay.Run,
//     replay.Replayer), its text and HTML reports, and the smallest limits
//     within a rejected share (replay.Suggest).
package shadow

import (
	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
)

// Join returns an observer that passes every event to each of obs in
// order. It is an admission.ReleaseObserver that passes failed releases
// to those of obs that are one (the metrics observer is). When some of
// obs are backend.CallObservers (the metrics observer is), so is the
// result, and it passes store calls to them.
func Join(obs ...admission.Observer) admission.Observer {
	var calls []backend.CallObserver
	for _, o := range obs {
		if c, ok := o.(backend.CallObserver); ok {
			calls = append(calls, c)
		}
	}
	if len(calls) == 0 {
		return multi(obs)
	}
	return multiCalls{multi(obs), calls}
}

type multi []admission.Observer

type multiCalls struct {
	multi
	calls []backend.CallObserver
}

func (m multiCalls) StoreCall(c backend.Call) {
	for _, o := range m.calls {
		o.StoreCall(c)
	}
}

func (m multi) Decision(d *admission.Decision) {
	for _, o := range m {
		o.Decision(d)
	}
}

func (m multi) Settled(s admission.Settlement) {
	for _, o := range m {
		o.Settled(s)
	}
}

func (m multi) LeaseExpired(policy string, n int) {
	for _, o := range m {
		o.LeaseExpired(policy, n)
	}
}

func (m multi) PartitionsEvicted(policy string, n int) {
	for _, o := range m {
		o.PartitionsEvicted(policy, n)
	}
}

func (m multi) StoreError(e admission.StoreEvent) {
	for _, o := range m {
		o.StoreError(e)
	}
}

// ReleaseRetry passes a failed concurrency release to the observers that
// want them (admission.ReleaseObserver).
func (m multi) ReleaseRetry(policy, outcome string) {
	for _, o := range m {
		if r, ok := o.(admission.ReleaseObserver); ok {
			r.ReleaseRetry(policy, outcome)
		}
	}
}

var _ admission.ReleaseObserver = multi(nil)
