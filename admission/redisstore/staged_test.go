package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestStagedAdmission: on Redis, Begin decides the request rate and the
// concurrency cap in one call, Continue the token rate in one more, and a
// refusal by Continue gives back what Begin took.
func TestStagedAdmission(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Timeout: time.Second})
	ctl := newController(t, st, threePolicies()...)
	ctx := context.Background()
	// Load the scripts of these shapes.
	warm, err := ctl.Begin(ctx, admission.Request{Tenant: "warm"})
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Continue(ctx, admission.Request{Tenant: "warm", Tokens: 10}); err != nil {
		t.Fatal(err)
	}
	warm.Done()

	before := scriptCalls(t, srv.Addr)
	tk, err := ctl.Begin(ctx, admission.Request{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if n := scriptCalls(t, srv.Addr) - before; n != 1 {
		t.Errorf("Begin with two policies: %d script calls; want 1", n)
	}
	err = tk.Continue(ctx, admission.Request{Tenant: "acme", Tokens: 5000})
	if !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("Continue(5000 tokens) = %v; want ErrRateLimited", err)
	}
	if tk.Valid() {
		t.Error("ticket valid after Continue rejected")
	}
	// The refused request's permits came back: the cap of 2 admits two.
	var held []admission.Ticket
	for i := 0; i < 2; i++ {
		tk, err := ctl.Begin(ctx, admission.Request{Tenant: "acme"})
		if err == nil {
			before = scriptCalls(t, srv.Addr)
			err = tk.Continue(ctx, admission.Request{Tenant: "acme", Tokens: 10})
			if n := scriptCalls(t, srv.Addr) - before; n != 1 {
				t.Errorf("Continue with one policy left: %d script calls; want 1", n)
			}
		}
		if err != nil {
			t.Fatalf("request %d after the refusal: %v (the refusal leaked a permit)", i, err)
		}
		held = append(held, tk)
	}
	if _, err := ctl.Begin(ctx, admission.Request{Tenant: "acme"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("third concurrent Begin = %v; want ErrConcurrencyLimited", err)
	}
	for _, tk := range held {
		tk.Settle(admission.Usage{Tokens: 5})
	}
	tk, err = ctl.Begin(ctx, admission.Request{Tenant: "acme"})
	if err != nil {
		t.Fatalf("Begin after the settlements: %v", err)
	}
	tk.Done()
}
