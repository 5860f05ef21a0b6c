package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
)

// remainingConfig has a request rate, a cap in flight, a daily token
// quota, a per-model window and a shadow rate, a pro plan and a tenant
// with its own override.
func remainingConfig() admission.Config {
	tenant := []limits.KeyPart{limits.KeyTenant}
	return admission.Config{
		Policies: []admission.Policy{
			{Name: "rpm", Key: tenant, Algorithm: limits.TokenBucket, Limit: 10, Per: time.Minute},
			{Name: "inflight", Key: tenant, Algorithm: limits.Concurrency, Limit: 3, MaxHold: time.Hour},
			{Name: "daily", Key: tenant, Unit: limits.UnitTokens, Algorithm: limits.Quota, Limit: 100_000, Period: limits.PeriodDay},
			{Name: "gpt4", Key: tenant, Algorithm: limits.FixedWindow, Limit: 5, Per: time.Minute, Match: limits.Match{Models: []string{"gpt-4"}}},
			{Name: "candidate", Key: tenant, Algorithm: limits.SlidingLog, Limit: 4, Per: time.Minute, Mode: limits.Shadow},
		},
		Plans: limits.Plans{
			Plans: map[string]map[string]limits.Override{"pro": {"rpm": {Limit: 100}, "daily": {Limit: 1_000_000}}},
			Tenants: map[string]limits.TenantPlan{
				"acme":    {Plan: "pro"},
				"initech": {Overrides: map[string]limits.Override{"rpm": {Limit: 2}, "inflight": {Limit: 1}}},
			},
		},
	}
}

// counter counts the decisions it observes.
type counter struct {
	admission.NopObserver
	decisions atomic.Int64
}

func (c *counter) Decision(*admission.Decision) { c.decisions.Add(1) }

// format prints statuses one a line: name, mode, limit, remaining, reset.
func format(ss []admission.Status) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "%s %s limit=%d remaining=%d reset=%v\n", s.Policy, s.Mode, s.Limit, s.Remaining, s.Reset)
	}
	return b.String()
}

// TestRemaining reads what tenants have left under their plans and
// overrides, before and after admissions, as time passes: the figures
// are those the next admission's Statuses show, the policies those that
// match the request, and reading reports no decision.
func TestRemaining(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	obs := &counter{}
	ctl, err := admission.New(remainingConfig(), admission.WithClock(clock), admission.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ctx := context.Background()
	remaining := func(r admission.Request) string {
		t.Helper()
		before := obs.decisions.Load()
		ss, err := ctl.Remaining(ctx, r, nil)
		if err != nil {
			t.Fatalf("Remaining(%+v): %v", r, err)
		}
		if n := obs.decisions.Load() - before; n != 0 {
			t.Errorf("Remaining(%+v) reported %d decisions; want none", r, n)
		}
		return format(ss)
	}
	check := func(what string, r admission.Request, want string) {
		t.Helper()
		if got := remaining(r); got != want {
			t.Errorf("%s: Remaining(%s, model %q) =\n%s\nwant\n%s", what, r.Tenant, r.Model, got, want)
		}
	}
	check("fresh, policies' own limits", admission.Request{Tenant: "globex"}, ""+
		"rpm enforce limit=10 remaining=10 reset=0s\n"+
		"candidate shadow limit=4 remaining=4 reset=0s\n"+
		"inflight enforce limit=3 remaining=3 reset=0s\n"+
		"daily enforce limit=100000 remaining=100000 reset=12h0m0s\n")
	check("fresh, pro plan, a model with a policy of its own", admission.Request{Tenant: "acme", Model: "gpt-4"}, ""+
		"rpm enforce limit=100 remaining=100 reset=0s\n"+
		"candidate shadow limit=4 remaining=4 reset=0s\n"+
		"inflight enforce limit=3 remaining=3 reset=0s\n"+
		"daily enforce limit=1000000 remaining=1000000 reset=12h0m0s\n"+
		"gpt4 enforce limit=5 remaining=5 reset=1m0s\n")
	check("fresh, overrides", admission.Request{Tenant: "initech"}, ""+
		"rpm enforce limit=2 remaining=2 reset=0s\n"+
		"candidate shadow limit=4 remaining=4 reset=0s\n"+
		"inflight enforce limit=1 remaining=1 reset=0s\n"+
		"daily enforce limit=100000 remaining=100000 reset=12h0m0s\n")

	// Two requests of globex in flight, 1500 tokens each; then 30
	// seconds pass.
	var held []admission.Ticket
	for range 2 {
		tk, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "globex", Tokens: 1500})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, tk)
	}
	clock.Advance(30 * time.Second)
	want := "" +
		"rpm enforce limit=10 remaining=10 reset=0s\n" + // 2 taken, 5 refilled in 30s: full
		"candidate shadow limit=4 remaining=2 reset=30s\n" +
		"inflight enforce limit=3 remaining=1 reset=0s\n" +
		"daily enforce limit=100000 remaining=97000 reset=11h59m30s\n"
	check("two in flight, 30s later", admission.Request{Tenant: "globex"}, want)
	check("read again: reading took nothing", admission.Request{Tenant: "globex"}, want)

	// The next admission's figures, less its own cost, are the ones read.
	tk, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "globex", Tokens: 0})
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, tk)
	if got, want := format(tk.Statuses(nil)), ""+
		"rpm enforce limit=10 remaining=9 reset=6s\n"+
		"candidate shadow limit=4 remaining=1 reset=1m0s\n"+
		"inflight enforce limit=3 remaining=0 reset=1s\n"+
		"daily enforce limit=100000 remaining=97000 reset=11h59m30s\n"; got != want {
		t.Errorf("the next admission's Statuses =\n%s\nwant\n%s", got, want)
	}
	// At capacity, a concurrency limit's reset is its retry hint, as in
	// an admission's headers.
	check("at capacity", admission.Request{Tenant: "globex"}, ""+
		"rpm enforce limit=10 remaining=9 reset=6s\n"+
		"candidate shadow limit=4 remaining=1 reset=1m0s\n"+
		"inflight enforce limit=3 remaining=0 reset=1s\n"+
		"daily enforce limit=100000 remaining=97000 reset=11h59m30s\n")
	for _, tk := range held {
		tk.Done()
	}

	// The emergency switch shows in the modes read.
	ctl.SetAllShadow(true)
	if got := remaining(admission.Request{Tenant: "initech"}); !strings.HasPrefix(got, "rpm shadow limit=2 ") {
		t.Errorf("all shadow: Remaining(initech) =\n%s\nwant rpm in shadow first", got)
	}
}

// TestRemainingCreatesNothing reads what a thousand tenants never seen
// have left: each reads full, and no policy holds one partition more.
func TestRemainingCreatesNothing(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, err := admission.New(remainingConfig(), admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ctx := context.Background()
	tk, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "acme", Model: "gpt-4", Tokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Done()
	partitions := func() map[string]int {
		out := map[string]int{}
		for _, s := range ctl.Stats() {
			out[s.Name] = s.Partitions
		}
		return out
	}
	before := partitions()
	var ss []admission.Status
	for i := range 1000 {
		clock.Advance(time.Second)
		r := admission.Request{Tenant: fmt.Sprintf("stranger-%d", i), Model: "gpt-4"}
		if ss, err = ctl.Remaining(ctx, r, ss[:0]); err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			if s.Remaining != s.Limit {
				t.Fatalf("Remaining(%s): %s has %d of %d; want full", r.Tenant, s.Policy, s.Remaining, s.Limit)
			}
		}
	}
	if after := partitions(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("partitions after reading 1000 unknown tenants = %v; want %v as before", after, before)
	}
}

// blindStore is an in-memory store whose limiters cannot peek.
type blindStore struct{}

type blindLimiter struct{ backend.Limiter }

func (blindStore) Limiter(p *limits.Policy) (backend.Limiter, error) {
	l, err := memstore.Store{}.Limiter(p)
	return blindLimiter{l}, err
}

// TestRemainingUnknown: a policy on a store that cannot read without
// writing reads as full, and the error says so and names it; the other
// policies' figures are read.
func TestRemainingUnknown(t *testing.T) {
	cfg := remainingConfig()
	cfg.Policies[0].Store = "blind"
	ctl, err := admission.New(cfg, admission.WithStore("blind", blindStore{}), admission.WithClock(admissiontest.NewClock(backendtest.Epoch)))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ctx := context.Background()
	for range 3 {
		if _, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "globex"}); err != nil {
			t.Fatal(err)
		}
	}
	ss, err := ctl.Remaining(ctx, admission.Request{Tenant: "globex"}, nil)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(fmt.Sprint(err), `"rpm"`) {
		t.Errorf("Remaining error = %v; want one naming rpm, matching errors.ErrUnsupported", err)
	}
	if got, want := format(ss), ""+
		"rpm enforce limit=10 remaining=10 reset=0s\n"+
		"candidate shadow limit=4 remaining=1 reset=1m0s\n"+
		"inflight enforce limit=3 remaining=0 reset=1s\n"+
		"daily enforce limit=100000 remaining=100000 reset=12h0m0s\n"; got != want {
		t.Errorf("Remaining =\n%s\nwant\n%s", got, want)
	}
}

// TestRemainingOfASet: a request naming a compiled set reads that set's
// limits and plans (here none: acme's pro plan is gone), not the
// installed one's; a set of another controller is refused.
func TestRemainingOfASet(t *testing.T) {
	ctl, err := admission.New(remainingConfig(), admission.WithClock(admissiontest.NewClock(backendtest.Epoch)))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	cfg := remainingConfig()
	cfg.Policies[0].Limit = 7
	cfg.Plans = limits.Plans{}
	set, err := ctl.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ss, err := ctl.Remaining(ctx, admission.Request{Tenant: "acme", Policies: set}, nil)
	if got, want := format(ss), "rpm enforce limit=7 remaining=7 reset=0s\n"; err != nil || !strings.HasPrefix(got, want) {
		t.Errorf("Remaining under the compiled set = %q, %v; want %q", got, err, want)
	}
	other, err := admission.New(remainingConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if ss, err := other.Remaining(ctx, admission.Request{Tenant: "globex", Policies: set}, nil); err == nil || len(ss) != 0 {
		t.Errorf("Remaining under another controller's set = %d statuses, %v; want none and an error", len(ss), err)
	}
}
