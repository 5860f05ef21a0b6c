// Package shadow is about trying limits without enforcing them: a
// decision log (Log) that writes what shadow policies would reject without
// flooding the log, and a Recorder whose Report tells, per policy, what
// share of the last window's requests it refused or would have refused,
// and from which tenants — the evidence for flipping a policy from shadow
// to enforce. Replay runs a request log (see Record for its JSON Lines
// format) through candidate configurations on a fake clock and compares
// what each would admit, reject and would reject.
//
// The Log and the Recorder are admission.Observers. Combine them with the metrics observer
// through Join.
package shadow

import "github.com/sluicehq/sluice/admission"

// Join returns an observer that passes every event to each of obs in
// order.
func Join(obs ...admission.Observer) admission.Observer { return multi(obs) }

type multi []admission.Observer

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

func (m multi) Reloaded(r admission.Reload) {
	for _, o := range m {
		o.Reloaded(r)
	}
}
