package admission_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// A tokens-per-minute limit priced by an estimate and reconciled with the
// actual usage.
func Example() {
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant},
		Unit: limits.UnitTokens, Algorithm: limits.TokenBucket,
		Limit: 1000, Per: time.Minute,
	}}}, admission.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// Reserve 800 tokens (prompt + output reservation), use only 300.
	t, err := ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 800})
	if err != nil {
		panic(err)
	}
	t.Settle(admission.Usage{Tokens: 300})

	// 700 tokens are left: a 900-token request waits for 200 more.
	_, err = ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 900})
	var rej *admission.Rejection
	if errors.As(err, &rej) {
		fmt.Println(rej.Policy, rej.Reason, "retry after", rej.RetryAfter, "remaining", rej.Status.Remaining)
	}
	fmt.Println(errors.Is(err, admission.ErrRateLimited))
	// Output:
	// tpm rate retry after 12s remaining 700
	// true
}

// A candidate limit runs in shadow mode: it never blocks but reports what
// it would reject.
func Example_shadow() {
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "candidate-rpm", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.FixedWindow, Limit: 2, Per: time.Minute,
		Mode: limits.Shadow,
	}}}, admission.WithClock(clock))
	for i := 1; i <= 3; i++ {
		t, err := ctl.TryAdmit(context.Background(), admission.Request{Tenant: "acme"})
		fmt.Println(i, err, t.WouldReject(nil))
		t.Done()
	}
	// Output:
	// 1 <nil> []
	// 2 <nil> []
	// 3 <nil> [candidate-rpm]
}

// A per-tenant concurrency cap with a queue: the second request waits for
// the first to finish.
func Example_queue() {
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.Concurrency, Limit: 1,
		Queue: limits.Queue{Size: 10, Timeout: time.Minute},
	}}})
	ctx := context.Background()
	first, _ := ctl.Admit(ctx, admission.Request{Tenant: "acme"})
	done := make(chan struct{})
	go func() {
		second, err := ctl.Admit(ctx, admission.Request{Tenant: "acme"})
		fmt.Println("second admitted:", err == nil)
		second.Done()
		close(done)
	}()
	for ctl.Stats()[0].Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("queued:", ctl.Stats()[0].Queued)
	first.Done()
	<-done
	// Output:
	// queued: 1
	// second admitted: true
}

// Plans give tenants different limits for the same policy.
func ExamplePlans() {
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, _ := admission.New(admission.Config{
		Policies: []admission.Policy{{
			Name: "rpm", Key: []limits.KeyPart{limits.KeyTenant},
			Algorithm: limits.FixedWindow, Limit: 60, Per: time.Minute,
		}},
		Plans: limits.Plans{
			Plans:   map[string]map[string]limits.Override{"premium": {"rpm": {Limit: 600}}},
			Tenants: map[string]limits.TenantPlan{"bigco": {Plan: "premium"}},
		},
	}, admission.WithClock(clock))
	for _, tenant := range []string{"acme", "bigco"} {
		t, _ := ctl.TryAdmit(context.Background(), admission.Request{Tenant: tenant})
		s := t.Statuses(nil)[0]
		fmt.Printf("%s: %d per %v, %d left\n", tenant, s.Limit, s.Window, s.Remaining)
		t.Done()
	}
	// Output:
	// acme: 60 per 1m0s, 59 left
	// bigco: 600 per 1m0s, 599 left
}

// Staged admission: a tenant over its request rate is refused before its
// body is read; the token limit, which needs the body's estimate, is
// decided once it is. A refusal after the body gives back the request
// Begin counted.
func Example_staged() {
	clock := admissiontest.NewClock(backendtest.Epoch)
	tenant := []limits.KeyPart{limits.KeyTenant}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "rpm", Key: tenant, Algorithm: limits.FixedWindow, Limit: 2, Per: time.Minute},
		{Name: "tpm", Key: tenant, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Minute},
	}}, admission.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i, tokens := range []int64{800, 800, 100, 100} {
		// The route and the caller's credentials are known: the body is
		// not read yet.
		t, err := ctl.Begin(ctx, admission.Request{Tenant: "acme", Operation: "chat"})
		if err != nil {
			fmt.Println(i, "refused before reading the body:", err)
			continue
		}
		// Read the body (bounded), estimate its tokens.
		err = t.Continue(ctx, admission.Request{Tenant: "acme", Operation: "chat", Model: "gpt-4o", Tokens: tokens})
		if err != nil {
			fmt.Println(i, "refused after reading the body:", err)
			continue
		}
		fmt.Println(i, "admitted")
		t.Done()
	}
	// Output:
	// 0 admitted
	// 1 refused after reading the body: admission: rate by policy "tpm", retry after 36s
	// 2 admitted
	// 3 refused before reading the body: admission: rate by policy "rpm", retry after 1m0s
}

// The controller's lease keeper renews the concurrency leases of live
// tickets, so a long stream keeps its permit past MaxHold whatever its
// client does; once its process stops renewing (Close here, a crash in
// production), the permit returns MaxHold after the last renewal, and
// Renew tells the ticket its lease was lost.
func ExampleTicket_Renew() {
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.Concurrency, Limit: 1, MaxHold: time.Minute,
	}}}, admission.WithClock(clock))
	ctx := context.Background()
	stream, _ := ctl.Admit(ctx, admission.Request{Tenant: "acme"})
	clock.Advance(90 * time.Second) // the stream runs, its client silent
	_, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "acme"})
	fmt.Println("after 90s:", err)
	ctl.Close() // the process stops renewing
	clock.Advance(time.Minute)
	t, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "acme"})
	fmt.Println("a minute later:", err)
	t.Done()
	fmt.Println(errors.Is(stream.Renew(), admission.ErrLeaseExpired))
	// Output:
	// after 90s: admission: concurrency by policy "inflight", retry after 1s
	// a minute later: <nil>
	// true
}

// What a customer has left, read without taking or creating anything: a
// status page or a billing view asks, no admission is made.
func ExampleController_Remaining() {
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, err := admission.New(admission.Config{
		Policies: []admission.Policy{{
			Name: "daily-tokens", Key: []limits.KeyPart{limits.KeyTenant},
			Unit: limits.UnitTokens, Algorithm: limits.Quota,
			Limit: 100_000, Period: limits.PeriodDay,
		}},
		Plans: limits.Plans{
			Plans:   map[string]map[string]limits.Override{"pro": {"daily-tokens": {Limit: 1_000_000}}},
			Tenants: map[string]limits.TenantPlan{"acme": {Plan: "pro"}},
		},
	}, admission.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer ctl.Close()
	ctx := context.Background()
	t, err := ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 2500})
	if err != nil {
		panic(err)
	}
	t.Done()

	for _, tenant := range []string{"acme", "globex"} {
		ss, err := ctl.Remaining(ctx, admission.Request{Tenant: tenant}, nil)
		if err != nil {
			panic(err)
		}
		for _, s := range ss {
			fmt.Printf("%s: %s %d of %d %s left, resets in %v\n", tenant, s.Policy, s.Remaining, s.Limit, s.Unit, s.Reset)
		}
	}
	// Output:
	// acme: daily-tokens 997500 of 1000000 tokens left, resets in 12h0m0s
	// globex: daily-tokens 100000 of 100000 tokens left, resets in 12h0m0s
}
