package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// prioritySetup is the priority scenario: the four equal tenants of the
// provider scenario are interactive, and one batch tenant saturates the
// provider's budget in the background with larger requests.
type prioritySetup struct {
	providerSetup
	// Interactive is the load the four interactive tenants offer
	// together, over the provider's rate (Overload is not used).
	Interactive float64
	// BatchWorkers is the batch tenant's closed-loop senders.
	BatchWorkers int
	// BatchOutput is the output tokens of each batch request.
	BatchOutput int
	// Floor is the batch class's share, in percent; the interactive
	// class has the rest.
	Floor int
}

// A priorityMode is how the gateway's policy file treats the classes.
type priorityMode int

const (
	// noClasses: the upstream policy alone, every request of one class,
	// the queue served round robin by tenant.
	noClasses priorityMode = iota
	// strictPriority: classes (interactive above batch), no shares.
	strictPriority
	// withShares: classes with reserved shares (interactive 100-Floor
	// percent, batch Floor percent).
	withShares
)

func (m priorityMode) String() string {
	return [...]string{"no classes     ", "strict priority", "shares         "}[m]
}

// batchTenant is the batch tenant of the priority scenario.
const batchTenant = "batch"

// priorityPolicy is the gateway's policy file of the priority scenario:
// the provider's budget on an upstream store, queued; a per-tenant
// concurrency cap, so that no tenant holds more than its part of the
// queue's places; and, with classes, the batch tenant's key in the batch
// class, every other request interactive.
func priorityPolicy(s prioritySetup, mode priorityMode) string {
	var b strings.Builder
	b.WriteString("version: 1\nstores:\n  openai: {kind: upstream, group_by: model}\n")
	if mode != noClasses {
		b.WriteString("classes: {priorities: {interactive: 10, batch: 1}, default: interactive}\n")
	}
	shares := ""
	if mode == withShares {
		shares = fmt.Sprintf(", shares: [{class: interactive, percent: %d}, {class: batch, percent: %d}]", 100-s.Floor, s.Floor)
	}
	fmt.Fprintf(&b, `policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1M, per: 1m}
  - {name: tenant-concurrency, key: [tenant], algorithm: concurrency, limit: %d}
`, s.Queue/(len(tenants)+1))
	b.WriteString(providerTPM(s.providerSetup, shares))
	writeTenants(&b)
	class := ""
	if mode != noClasses {
		class = ", class: batch"
	}
	fmt.Fprintf(&b, "  %s: {api_keys: [{hash: %q%s}]}\n", batchTenant, apikey.Sum("sk-"+batchTenant).String(), class)
	b.WriteString("identity: {anonymous: deny}\n")
	return b.String()
}

// priorityClients are the four interactive tenants, open loop, and the
// batch tenant, closed loop.
func priorityClients(s prioritySetup) []client {
	cs := make([]client, 0, len(tenants)+1)
	for _, t := range tenants {
		cs = append(cs, client{Tenant: t, Rate: s.Interactive * s.requestRate(s.Output) / float64(len(tenants)), Output: s.Output})
	}
	return append(cs, client{Tenant: batchTenant, Workers: s.BatchWorkers, Output: s.BatchOutput})
}

// waits records the queue waits of the requests admitted by one policy,
// by tenant, with the instant each was admitted.
type waits struct {
	admission.NopObserver
	policy string
	mu     sync.Mutex
	by     map[string][]timedWait
}

type timedWait struct {
	at   time.Time
	wait time.Duration
}

// maxWaits bounds the waits recorded per tenant.
const maxWaits = 1 << 20

// Decision records an admitted request's queue wait.
func (w *waits) Decision(d *admission.Decision) {
	if d.Policy != w.policy || d.Outcome != admission.Admitted || d.RolledBack {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.by[d.Tenant]) < maxWaits {
		w.by[d.Tenant] = append(w.by[d.Tenant], timedWait{time.Now(), d.QueueWait})
	}
}

// quantiles returns the qs quantiles of the waits of tenants admitted
// from from on.
func (w *waits) quantiles(tenants []string, from time.Time, qs ...float64) []time.Duration {
	w.mu.Lock()
	var all []time.Duration
	for _, t := range tenants {
		for _, tw := range w.by[t] {
			if !tw.at.Before(from) {
				all = append(all, tw.wait)
			}
		}
	}
	w.mu.Unlock()
	slices.Sort(all)
	out := make([]time.Duration, len(qs))
	if len(all) == 0 {
		return out
	}
	for i, q := range qs {
		out[i] = all[min(len(all)-1, int(q*float64(len(all))))]
	}
	return out
}

// priorityRun is what one run of the priority scenario measured.
type priorityRun struct {
	Mode priorityMode
	providerRun
	// P50 and P99 are the interactive requests' queue waits at the
	// upstream policy.
	P50, P99 time.Duration
	// Interactive and Batch are the classes' shares of the tokens
	// answered in the interval; BatchMin is the batch class's smallest
	// share in a slot.
	Interactive, Batch, BatchMin float64
}

func (r priorityRun) String() string {
	return fmt.Sprintf("%v  interactive queue wait p50 %6.0f ms p99 %6.0f ms  tokens: interactive %5.1f%% batch %5.1f%% (lowest %v slot %5.1f%%)  goodput %5.1f%%  provider 429s to clients %d  gateway refusals %d %v",
		r.Mode, ms(r.P50), ms(r.P99), 100*r.Interactive, 100*r.Batch, slot, 100*r.BatchMin, 100*r.Goodput, r.ProviderRefusals, r.Refused, r.Codes)
}

// runPriority runs the priority scenario once under mode.
func runPriority(s prioritySetup, mode priorityMode) (priorityRun, error) {
	r := priorityRun{Mode: mode}
	w := &waits{policy: "provider-tpm", by: map[string][]timedWait{}}
	err := withGateway(s.providerSetup, priorityPolicy(s, mode), w, func(gwURL string, _ *upstream.Server) {
		from := time.Now().Add(s.Window)
		r.providerRun = offer(gwURL, s.providerSetup, priorityClients(s))
		q := w.quantiles(tenants, from, 0.5, 0.99)
		r.P50, r.P99 = q[0], q[1]
	})
	if err != nil {
		return r, err
	}
	r.Interactive, r.Batch, r.BatchMin = classShares(r.Tokens, r.Slots)
	return r, nil
}

// classShares returns the shares of the interactive clients (all but
// the last) and of the batch client (the last) in tokens, and the batch
// client's smallest share in a slot that answered anything.
func classShares(tokens []int64, slots [][]int64) (interactive, batch, batchMin float64) {
	last := len(tokens) - 1
	var sum int64
	for _, n := range tokens {
		sum += n
	}
	if sum == 0 {
		return 0, 0, 0
	}
	batch = float64(tokens[last]) / float64(sum)
	batchMin = 1
	for i := range slots[last] {
		var all int64
		for c := range slots {
			all += slots[c][i]
		}
		if all > 0 {
			batchMin = min(batchMin, float64(slots[last][i])/float64(all))
		}
	}
	return 1 - batch, batch, batchMin
}

// runPriorityRounds measures rounds runs of each mode, alternating, and
// prints each.
func runPriorityRounds(s prioritySetup, rounds int) error {
	fmt.Printf("priority scenario: %d tokens per %v (%d TPM) for gpt-4o-mini; four interactive tenants offering together %.1fx, open loop, %d output tokens a request; one batch tenant saturating with %d closed-loop workers, %d output tokens a request; batch floor %d%%; one in four streamed, callers' deadline %v, queue %d; %v measured after a %v warm-up, %d rounds\n",
		s.Tokens, s.Window, int64(float64(s.Tokens)*float64(time.Minute)/float64(s.Window)), s.Interactive, s.Output, s.BatchWorkers, s.BatchOutput, s.Floor, s.Deadline, s.Queue, s.Duration, s.Window, rounds)
	for round := range rounds {
		for _, mode := range []priorityMode{noClasses, strictPriority, withShares} {
			r, err := runPriority(s, mode)
			if err != nil {
				return err
			}
			fmt.Printf("round %d  %v\n", round+1, r)
		}
	}
	return nil
}
