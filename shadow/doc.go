// Package shadow is about trying limits without enforcing them: a
// decision log (Log) that writes what shadow policies would reject without
// flooding the log, and a Recorder whose Report tells, per policy, what
// share of the last window's requests it refused or would have refused,
// and from which tenants — the evidence for flipping a policy from shadow
// to enforce. Replay runs a request log (see Record for its JSON Lines
// format) through candidate configurations on a fake clock and compares
// what each would admit, reject and would reject, queues simulated;
// ReplayReport.WriteHTML draws it as a self-contained page and Suggest
// finds the smallest limits within a rejected share. A RequestLog writes
// the request log from live traffic, and a StatusPage serves the
// operator's live view of a controller (/status, /status.json).
//
// The Log and the Recorder are admission.Observers. Combine them with the metrics observer
// through Join.
package shadow

import (
	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
)

// Join returns an observer that passes every event to each of obs in
// order. When some of obs are admission.StoreCallObservers (the metrics
// observer is), so is the result, and it passes store calls to them.
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
