package admission_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// stagedPolicies holds policies of every kind: those Begin decides (in
// earlyPolicies) and those that need the body.
func stagedPolicies() []admission.Policy {
	s := time.Second
	model := []limits.KeyPart{limits.KeyTenant, limits.KeyModel}
	return []admission.Policy{
		{Name: "tpm", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 400, Per: 10 * s},
		{Name: "rpm", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: 5, Per: 10 * s},
		{Name: "model-inflight", Key: []limits.KeyPart{limits.KeyModel}, Algorithm: limits.Concurrency, Limit: 4, MaxHold: 20 * s},
		{Name: "inflight", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 3, MaxHold: 30 * s},
		{Name: "model-rpm", Key: model, Algorithm: limits.SlidingWindow, Limit: 3, Per: 10 * s},
		{Name: "rpm-shadow", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 3, Per: 10 * s, Mode: limits.Shadow},
		{Name: "m1-rpm", Key: tenantKey, Match: limits.Match{Models: []string{"m1"}}, Algorithm: limits.FixedWindow, Limit: 4, Per: 10 * s},
		{Name: "global-inflight", Algorithm: limits.Concurrency, Limit: 6, MaxHold: 30 * s},
		{Name: "hourly-tokens", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.Quota, Period: limits.PeriodFixed, Per: time.Hour, Limit: 3000, Mode: limits.Shadow},
		{Name: "chat-rpm", Key: tenantKey, Match: limits.Match{Operations: []string{"chat"}}, Algorithm: limits.SlidingLog, Limit: 4, Per: 10 * s},
	}
}

var earlyPolicies = map[string]bool{"rpm": true, "inflight": true, "rpm-shadow": true, "global-inflight": true, "chat-rpm": true}

// TestEvaluationOrder: the policies Begin decides come first (request
// rates, then request concurrency), then the other rate checks, then
// concurrency, then the queued policies.
func TestEvaluationOrder(t *testing.T) {
	ps := stagedPolicies()
	ps = append(ps,
		admission.Policy{Name: "queued-inflight", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 1, Queue: limits.Queue{Size: 2}},
		admission.Policy{Name: "queued-rpm", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 1, Per: time.Second, Queue: limits.Queue{Size: 2}},
	)
	c := newController(t, admissiontest.NewClock(backendtest.Epoch), nil, ps...)
	var got []string
	for _, p := range c.Policies() {
		got = append(got, p.Name)
	}
	want := []string{"rpm", "rpm-shadow", "chat-rpm", "inflight", "global-inflight", "tpm", "model-rpm", "m1-rpm", "hourly-tokens",
		"model-inflight", "queued-rpm", "queued-inflight"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Policies() order = %q; want %q", got, want)
	}
}

// withoutBody is what a caller knows of r before reading its body.
func withoutBody(r admission.Request) admission.Request {
	r.Model, r.Tokens, r.Cost, r.Units = "", 0, 0, nil
	return r
}

// TestBeginRefusesBeforeBody: a tenant over its request rate or its
// concurrency is refused by Begin, which evaluates no policy that needs
// the body.
func TestBeginRefusesBeforeBody(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, stagedPolicies()...)
	ctx := context.Background()
	r := admission.Request{Tenant: "acme", Operation: "chat"}
	var held []admission.Ticket
	for i := 0; i < 3; i++ {
		tk, err := c.Begin(ctx, r)
		if err != nil {
			t.Fatalf("Begin %d: %v", i, err)
		}
		held = append(held, tk)
	}
	rec.mu.Lock()
	n := len(rec.decisions)
	rec.mu.Unlock()
	// Begin reports the shadow policy's verdicts at once, and the
	// admissions only once the request's fate is known.
	if n != 0 {
		t.Errorf("decisions after three Begins = %+v; want none", rec.decisions)
	}
	_, err := c.Begin(ctx, r)
	if !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("fourth Begin = %v; want ErrConcurrencyLimited", err)
	}
	var rej *admission.Rejection
	errors.As(err, &rej)
	var evaluated []string
	for _, s := range rej.Statuses {
		evaluated = append(evaluated, s.Policy)
	}
	if want := []string{"rpm", "rpm-shadow", "chat-rpm", "inflight"}; !reflect.DeepEqual(evaluated, want) {
		t.Errorf("policies evaluated by the refused Begin = %q; want %q", evaluated, want)
	}
	rec.mu.Lock()
	for _, d := range rec.decisions {
		if !earlyPolicies[d.Policy] {
			t.Errorf("Begin reported a decision of %s, which needs the body", d.Policy)
		}
	}
	rec.mu.Unlock()
	for _, tk := range held {
		tk.Done()
	}
	// The request rate: rpm allows 5 per window, 4 Begins went through
	// its check (the fourth was rolled back), so 2 more fit. (Not chats:
	// chat-rpm allows 4.)
	r.Operation = "embed"
	for i := 0; i < 2; i++ {
		tk, err := c.Begin(ctx, r)
		if err != nil {
			t.Fatalf("Begin after release %d: %v", i, err)
		}
		tk.Done()
	}
	if _, err := c.Begin(ctx, r); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("Begin over the request rate = %v; want ErrRateLimited", err)
	}
}

// TestContinueRejectionGivesBack: when a policy Continue evaluates
// rejects, what Begin took is given back, the ticket is inert and Begin's
// policies report rolled-back admissions.
func TestContinueRejectionGivesBack(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, stagedPolicies()...)
	ctx := context.Background()
	r := admission.Request{Tenant: "acme", Operation: "embed", Model: "m0", Tokens: 500}
	tk, err := c.Begin(ctx, withoutBody(r))
	if err != nil {
		t.Fatal(err)
	}
	err = tk.Continue(ctx, r)
	if !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("Continue over the token rate = %v; want ErrRateLimited", err)
	}
	var rej *admission.Rejection
	if errors.As(err, &rej); rej.Policy != "tpm" || rej.RetryAfter != limits.Never {
		t.Errorf("rejection = %+v; want tpm, never", rej)
	}
	if tk.Valid() {
		t.Error("ticket valid after Continue rejected")
	}
	if err := tk.Continue(ctx, r); !errors.Is(err, admission.ErrNotBegun) {
		t.Errorf("Continue again = %v; want ErrNotBegun", err)
	}
	tk.Done() // harmless
	got := map[string]string{}
	rec.mu.Lock()
	for _, d := range rec.decisions {
		got[d.Policy] = fmt.Sprintf("%v rolledback=%v model=%q", d.Outcome, d.RolledBack, d.Model)
	}
	rec.mu.Unlock()
	want := map[string]string{
		"rpm":             `admitted rolledback=true model="m0"`,
		"rpm-shadow":      `admitted rolledback=true model="m0"`,
		"inflight":        `admitted rolledback=true model="m0"`,
		"global-inflight": `admitted rolledback=true model="m0"`,
		"tpm":             `rejected rolledback=false model="m0"`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decisions = %v; want %v", got, want)
	}
	for _, s := range c.Stats() {
		if s.InFlight != 0 {
			t.Errorf("%s: %d in flight after the rejection; want 0", s.Name, s.InFlight)
		}
	}
	// rpm's permit came back: five requests fit in the window.
	small := r
	small.Tokens = 10
	for i := 0; i < 5; i++ {
		tk, err := c.Begin(ctx, withoutBody(small))
		if err == nil {
			small.Model = fmt.Sprintf("m%d", i+2) // spread over model-rpm's partitions
			err = tk.Continue(ctx, small)
		}
		if err != nil {
			t.Fatalf("request %d after the rollback: %v", i, err)
		}
		tk.Done()
	}
}

// TestContinueMisuse: Continue only continues a live ticket from Begin,
// once, with Begin's tenant, operation and priority.
func TestContinueMisuse(t *testing.T) {
	c := newController(t, admissiontest.NewClock(backendtest.Epoch), nil, stagedPolicies()...)
	ctx := context.Background()
	r := admission.Request{Tenant: "acme", Operation: "chat", Model: "m0", Tokens: 10}
	if err := (admission.Ticket{}).Continue(ctx, r); !errors.Is(err, admission.ErrNotBegun) {
		t.Errorf("zero Ticket: Continue = %v; want ErrNotBegun", err)
	}
	admitted, err := c.Admit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := admitted.Continue(ctx, r); !errors.Is(err, admission.ErrNotBegun) {
		t.Errorf("ticket from Admit: Continue = %v; want ErrNotBegun", err)
	}
	admitted.Done()
	tk, err := c.Begin(ctx, withoutBody(r))
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []admission.Request{
		{Tenant: "initech", Operation: "chat"},
		{Tenant: "acme", Operation: "embed"},
		{Tenant: "acme", Operation: "chat", Priority: 1},
	} {
		if err := tk.Continue(ctx, other); err == nil || errors.Is(err, admission.ErrNotBegun) {
			t.Errorf("Continue(%+v) = %v; want an error about another request", other, err)
		}
	}
	if err := tk.Continue(ctx, r); err != nil {
		t.Fatalf("Continue after refused misuse = %v", err)
	}
	if err := tk.Continue(ctx, r); !errors.Is(err, admission.ErrNotBegun) {
		t.Errorf("second Continue = %v; want ErrNotBegun", err)
	}
	if got := len(tk.Statuses(nil)); got != 9 {
		t.Errorf("statuses after Continue: %d; want 9 (every matching policy)", got)
	}
	tk.Done()
	tk2, _ := c.Begin(ctx, withoutBody(r))
	tk2.Done()
	if err := tk2.Continue(ctx, r); !errors.Is(err, admission.ErrNotBegun) {
		t.Errorf("Continue after Done = %v; want ErrNotBegun", err)
	}
}

// TestBeginSettledWithoutContinue: a ticket from Begin settled without
// Continue reports its admissions then, releases its permits, and its
// policies count it as one admitted request.
func TestBeginSettledWithoutContinue(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, stagedPolicies()...)
	tk, err := c.Begin(context.Background(), admission.Request{Tenant: "acme", Operation: "embed"})
	if err != nil {
		t.Fatal(err)
	}
	if n := rec.count(admission.Admitted); n != 0 {
		t.Fatalf("%d admitted decisions before the ticket's fate is known; want 0", n)
	}
	tk.Done()
	if n := rec.count(admission.Admitted); n != 4 {
		t.Errorf("%d admitted decisions after Done; want 4 (rpm, rpm-shadow, inflight, global-inflight)", n)
	}
	rec.mu.Lock()
	for _, d := range rec.decisions {
		if d.RolledBack {
			t.Errorf("%s reported rolled back", d.Policy)
		}
	}
	if len(rec.settled) != 4 {
		t.Errorf("%d settlements; want 4", len(rec.settled))
	}
	rec.mu.Unlock()
	for _, s := range c.Stats() {
		if s.InFlight != 0 {
			t.Errorf("%s: %d in flight after Done; want 0", s.Name, s.InFlight)
		}
	}
}

// TestStagedSameAsAdmit replays random traffic through Admit on one
// controller and Begin (without the body's fields) then Continue on
// another, each on its own fake clock at the same instants, with random
// settlements, renewals and clock steps: every answer, figure, decision,
// settlement and expiry is the same, but for one field: Begin reports the
// decisions it makes at once (the shadow policy's would-rejects, and all
// of a request it refuses) with the model it was given, none.
func TestStagedSameAsAdmit(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { stagedSameAsAdmit(t, seed, 3000) })
	}
}

func stagedSameAsAdmit(t *testing.T, seed uint64, steps int) {
	clockA, clockB := admissiontest.NewClock(backendtest.Epoch), admissiontest.NewClock(backendtest.Epoch)
	recA, recB := &recorder{}, &recorder{}
	ctlA := newController(t, clockA, recA, stagedPolicies()...)
	ctlB := newController(t, clockB, recB, stagedPolicies()...)
	// Without a lease keeper (closed controllers, as processes that stopped
	// renewing), leases not renewed expire: a path the traffic must take.
	ctlA.Close()
	ctlB.Close()
	rng := rand.New(rand.NewPCG(seed, 12))
	ctx := context.Background()
	type pair struct{ a, b admission.Ticket }
	var open []pair
	seen, settled := 0, 0
	admitted, rejected, begunRejected, expired := 0, 0, 0, 0
	// beginOnly is set when Begin refused the request: its every
	// decision was reported then.
	beginOnly := false
	checkDecisions := func(step int) {
		t.Helper()
		recA.mu.Lock()
		recB.mu.Lock()
		defer recA.mu.Unlock()
		defer recB.mu.Unlock()
		want := append([]admission.Decision(nil), recA.decisions[seen:]...)
		for i := range want {
			if earlyPolicies[want[i].Policy] && (beginOnly || want[i].Outcome != admission.Admitted) {
				want[i].Model = ""
			}
		}
		got := recB.decisions[seen:]
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: staged decisions\n%+v\nwant\n%+v", step, got, want)
		}
		if len(recA.decisions) != len(recB.decisions) {
			t.Fatalf("step %d: %d decisions staged; want %d", step, len(recB.decisions), len(recA.decisions))
		}
		seen = len(recA.decisions)
		if !slices.Equal(recB.settled[settled:], recA.settled[settled:]) || recA.expired != recB.expired {
			t.Fatalf("step %d: staged settlements %+v, %d expired\nwant %+v, %d expired", step, recB.settled[settled:], recB.expired, recA.settled[settled:], recA.expired)
		}
		settled = len(recA.settled)
	}
	for step := 0; step < steps; step++ {
		beginOnly = false
		switch x := rng.IntN(10); {
		case x < 5:
			r := admission.Request{
				Tenant:    fmt.Sprintf("t%d", rng.IntN(3)),
				Operation: []string{"chat", "embed"}[rng.IntN(2)],
				Model:     fmt.Sprintf("m%d", rng.IntN(3)),
				Tokens:    1 + rng.Int64N(150),
			}
			ta, errA := ctlA.Admit(ctx, r)
			tb, errB := ctlB.Begin(ctx, withoutBody(r))
			if errB == nil {
				errB = tb.Continue(ctx, r)
			} else {
				begunRejected++
				beginOnly = true
			}
			if !reflect.DeepEqual(errA, errB) {
				t.Fatalf("step %d: %+v: staged error %v; want %v", step, r, errB, errA)
			}
			if errA != nil {
				if !errors.As(errA, new(*admission.Rejection)) {
					t.Fatalf("step %d: %v", step, errA)
				}
				rejected++
				if tb.Valid() {
					t.Fatalf("step %d: staged ticket valid after a rejection", step)
				}
				break
			}
			admitted++
			if a, b := ta.Statuses(nil), tb.Statuses(nil); !reflect.DeepEqual(a, b) {
				t.Fatalf("step %d: staged statuses %+v; want %+v", step, b, a)
			}
			if a, b := ta.WouldReject(nil), tb.WouldReject(nil); !reflect.DeepEqual(a, b) {
				t.Fatalf("step %d: staged would-reject %q; want %q", step, b, a)
			}
			open = append(open, pair{ta, tb})
		case x < 7 && len(open) > 0:
			i := rng.IntN(len(open))
			p := open[i]
			open = append(open[:i], open[i+1:]...)
			if rng.IntN(3) == 0 {
				p.a.Done()
				p.b.Done()
			} else {
				u := admission.Usage{Tokens: rng.Int64N(200), TokensKnown: true}
				p.a.Settle(u)
				p.b.Settle(u)
			}
		case x < 8 && len(open) > 0:
			p := open[rng.IntN(len(open))]
			errA, errB := p.a.Renew(), p.b.Renew()
			if !reflect.DeepEqual(errA, errB) {
				t.Fatalf("step %d: staged Renew = %v; want %v", step, errB, errA)
			}
			if errors.Is(errA, admission.ErrLeaseExpired) {
				expired++
			}
		default:
			d := time.Duration(rng.Int64N(int64(3 * time.Second)))
			clockA.Advance(d)
			clockB.Advance(d)
		}
		checkDecisions(step)
	}
	if a, b := ctlA.Stats(), ctlB.Stats(); !reflect.DeepEqual(a, b) {
		t.Fatalf("staged stats %+v; want %+v", b, a)
	}
	checkDecisions(steps)
	// The traffic must exercise every path.
	if admitted == 0 || rejected == 0 || begunRejected == 0 || begunRejected == rejected || expired == 0 {
		t.Fatalf("admitted %d, rejected %d (%d by Begin), leases lost %d: the traffic misses a path", admitted, rejected, begunRejected, expired)
	}
	t.Logf("admitted %d, rejected %d (%d by Begin), leases lost %d", admitted, rejected, begunRejected, expired)
}

// TestContinueWaitsInQueue: a policy with a queue is decided by Continue,
// which waits for a permit as Admit does; a caller that gives up while
// waiting gets everything Begin took given back.
func TestContinueWaitsInQueue(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil,
		admission.Policy{Name: "rpm", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: 100, Per: time.Minute},
		admission.Policy{Name: "upstream", Algorithm: limits.Concurrency, Limit: 1, Queue: limits.Queue{Size: 4}},
	)
	ctx := context.Background()
	r := admission.Request{Tenant: "acme", Model: "m0", Tokens: 10}
	first, err := c.Admit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Begin(ctx, withoutBody(r))
	if err != nil {
		t.Fatalf("Begin with the queued cap full = %v; want admitted (Begin does not decide it)", err)
	}
	done := make(chan error, 1)
	go func() { done <- second.Continue(ctx, r) }()
	waitFor(t, "Continue to queue", func() bool { return c.Stats()[1].Queued == 1 })
	first.Done()
	if err := receive(t, "Continue to be served", done); err != nil {
		t.Fatalf("Continue after the permit was released = %v", err)
	}
	if s := c.Stats()[1]; s.InFlight != 1 {
		t.Errorf("upstream in flight = %d; want 1", s.InFlight)
	}

	// A caller who gives up while its Continue waits.
	third, err := c.Begin(ctx, withoutBody(r))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- third.Continue(cctx, r) }()
	waitFor(t, "Continue to queue", func() bool { return c.Stats()[1].Queued == 1 })
	cancel()
	if err := receive(t, "the canceled Continue", done); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Continue = %v; want context.Canceled", err)
	}
	if third.Valid() {
		t.Error("ticket valid after its Continue was canceled")
	}
	second.Done()
	// rpm counted first, second and (given back) third: 98 left.
	tk, err := c.Admit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Statuses(nil)[0]; got.Policy != "rpm" || got.Remaining != 97 {
		t.Errorf("rpm after two requests and a canceled one = %+v; want 97 left after this one", got)
	}
	tk.Done()
}
