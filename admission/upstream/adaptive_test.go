package upstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/upstream"
)

// The adaptive cap of a concurrency policy on the store follows the
// provider's time to first byte: the requests in flight fall when it
// rises, and come back to the policy's limit when it falls again. Each
// round admits as many requests as the cap lets through at once, then
// settles them, each with its time to first byte.
func TestAdaptiveConcurrency(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store, err := upstream.New(upstream.Config{Adaptive: &upstream.Adaptive{Min: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "cap", Store: "upstream", Algorithm: limits.Concurrency, Limit: 32,
	}}}, admission.WithStore("upstream", store), admission.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// round returns how many requests were in flight at once, after
	// which each is answered with ttfb.
	round := func(ttfb time.Duration) int {
		var held []admission.Ticket
		for len(held) < 100 {
			tk, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "acme"})
			if err != nil {
				break
			}
			held = append(held, tk)
		}
		clk.Advance(ttfb)
		for _, tk := range held {
			store.ObserveLatency("", ttfb, clk.Now())
			tk.Done()
		}
		return len(held)
	}
	phases := []struct {
		ttfb   time.Duration
		rounds int
		check  func(first, low, last int) bool
		want   string
	}{
		{100 * time.Millisecond, 20, func(f, l, z int) bool { return f == 32 && l == 32 && z == 32 }, "32 throughout: a steady provider keeps the policy's limit"},
		{400 * time.Millisecond, 20, func(f, l, z int) bool { return l <= 8 }, "at most 8 at the lowest: the provider slowed down fourfold"},
		{100 * time.Millisecond, 40, func(f, l, z int) bool { return z == 32 }, "32 at the end: the provider is fast again"},
	}
	for i, ph := range phases {
		first, low, last := 0, 1<<30, 0
		for r := range ph.rounds {
			n := round(ph.ttfb)
			if r == 0 {
				first = n
			}
			low, last = min(low, n), n
		}
		t.Logf("phase %d (ttfb %v): in flight first %d, lowest %d, last %d", i, ph.ttfb, first, low, last)
		if !ph.check(first, low, last) {
			t.Errorf("phase %d (ttfb %v): in flight first %d, lowest %d, last %d; want %s", i, ph.ttfb, first, low, last, ph.want)
		}
		st := store.Groups(clk.Now())
		if len(st) != 1 || st[0].Concurrency < 2 || st[0].Concurrency > 32 || st[0].TTFB <= 0 {
			t.Errorf("phase %d: Groups = %+v; want one group with a cap in [2, 32] and a time to first byte", i, st)
		}
	}
}

// The cap never falls below Min, however slow the provider becomes;
// without Adaptive, latency is not recorded; bad settings are refused.
func TestAdaptiveBounds(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store, _ := upstream.New(upstream.Config{Adaptive: &upstream.Adaptive{Min: 3, Smoothing: 1}})
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "cap", Store: "upstream", Key: []limits.KeyPart{limits.KeyModel}, Algorithm: limits.Concurrency, Limit: 16,
	}}}, admission.WithStore("upstream", store), admission.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := admission.Request{Tenant: "acme", Model: "gpt-4o"}
	tk, err := ctl.TryAdmit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	tk.Done()
	for i := range 200 {
		ttfb := 100 * time.Millisecond
		if i >= 10 {
			ttfb = time.Duration(i) * time.Minute
		}
		store.ObserveLatency("gpt-4o", ttfb, clk.Now())
	}
	var held []admission.Ticket
	for {
		tk, err := ctl.TryAdmit(ctx, req)
		if err != nil {
			break
		}
		held = append(held, tk)
	}
	if len(held) != 3 {
		t.Errorf("in flight after the provider slowed down without end = %d; want Min 3", len(held))
	}
	for _, tk := range held {
		tk.Done()
	}
	if g := store.Groups(clk.Now()); len(g) != 1 || g[0].Concurrency != 3 {
		t.Errorf("Groups = %+v; want the cap at 3", g)
	}
	plain, _ := upstream.New(upstream.Config{})
	if plain.ObserveLatency("gpt-4o", time.Second, clk.Now()) {
		t.Error("ObserveLatency kept a sample without Adaptive")
	}
	for _, a := range []upstream.Adaptive{{Min: -1}, {Tolerance: 0.5}, {Smoothing: 2}, {Window: -1}} {
		if _, err := upstream.New(upstream.Config{Adaptive: &a}); err == nil {
			t.Errorf("New with Adaptive %+v: nil error; want one", a)
		}
	}
}
