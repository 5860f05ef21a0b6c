package admission_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// tokenUnits returns the amounts of a request or usage in the three token
// units.
func tokenUnits(in, out, cached int64) []admission.UnitAmount {
	return []admission.UnitAmount{
		{Unit: limits.UnitInputTokens, Amount: in},
		{Unit: limits.UnitOutputTokens, Amount: out},
		{Unit: limits.UnitCachedInputTokens, Amount: cached},
	}
}

// remaining returns the remaining figure of each policy a ticket passed,
// by name.
func remaining(tk admission.Ticket) map[string]int64 {
	m := map[string]int64{}
	for _, s := range tk.Statuses(nil) {
		m[s.Policy] = s.Remaining
	}
	return m
}

// TestAnthropicTokenLimits mirrors Anthropic's per-minute limits of one
// organisation: input tokens per minute (ITPM), which do not count prompt
// tokens read from the cache, and output tokens per minute (OTPM), which
// reserve max_tokens when a request starts and are adjusted to the actual
// output when it ends. Both are token buckets refilled continuously, as
// Anthropic documents its limits. A third policy counts the cache reads,
// and a fourth the whole (tokens = input + cached + output), to show that
// each unit settles to its own figure.
func TestAnthropicTokenLimits(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	bucket := func(name string, u limits.Unit, n int64) admission.Policy {
		return admission.Policy{Name: name, Key: tenantKey, Unit: u, Algorithm: limits.TokenBucket, Limit: n, Per: time.Minute}
	}
	c := newController(t, clock, nil,
		bucket("itpm", limits.UnitInputTokens, 30_000),
		bucket("otpm", limits.UnitOutputTokens, 8_000),
		bucket("cached", limits.UnitCachedInputTokens, 1_000_000),
		bucket("tpm", limits.UnitTokens, 1_000_000),
	)
	ctx := context.Background()
	// A request with a 20,000-token prompt and max_tokens 4,000: nothing is
	// known to be cached before the call, so the whole prompt is reserved
	// as input.
	req := func(prompt, maxTokens int64) admission.Request {
		return admission.Request{Tenant: "org", Tokens: prompt + maxTokens, Units: tokenUnits(prompt, maxTokens, 0)}
	}
	tk, err := c.TryAdmit(ctx, req(20_000, 4_000))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"itpm": 10_000, "otpm": 4_000, "cached": 1_000_000, "tpm": 976_000}
	if got := remaining(tk); !equalFigures(got, want) {
		t.Fatalf("admitted: remaining %v; want %v", got, want)
	}
	// The usage: 18,000 prompt tokens read from the cache, 2,000 not
	// (input_tokens plus cache_creation_input_tokens), 500 output.
	tk.Settle(admission.Usage{Tokens: 20_500, TokensKnown: true, Units: tokenUnits(2_000, 500, 18_000)})

	// Settled on the same instant: ITPM was refunded the cache reads, OTPM
	// the unused reservation.
	tk, err = c.TryAdmit(ctx, req(28_000, 7_500))
	if err != nil {
		t.Fatalf("second request (fits once cache reads are refunded): %v", err)
	}
	want = map[string]int64{"itpm": 0, "otpm": 0, "cached": 982_000, "tpm": 944_000}
	if got := remaining(tk); !equalFigures(got, want) {
		t.Fatalf("second request: remaining %v; want %v", got, want)
	}
	tk.Settle(admission.Usage{Units: tokenUnits(28_000, 7_500, 0)})

	// Both buckets are empty: an input-heavy request waits for ITPM, an
	// output-heavy one for OTPM, each its own time.
	for _, tc := range []struct {
		name       string
		r          admission.Request
		policy     string
		retryAfter time.Duration
	}{
		// 3,000 input tokens at 500 a second: 6 s.
		{"input", req(3_000, 0), "itpm", 6 * time.Second},
		// 400 output tokens at 8,000 a minute: 3 s.
		{"output", req(0, 400), "otpm", 3 * time.Second},
	} {
		_, err := c.TryAdmit(ctx, tc.r)
		var rej *admission.Rejection
		if !errors.As(err, &rej) || rej.Policy != tc.policy || rej.RetryAfter != tc.retryAfter {
			t.Errorf("%s: err = %v; want a %s rejection with retry-after %v", tc.name, err, tc.policy, tc.retryAfter)
		}
	}
	// Cache reads never wait on ITPM: a request whose prompt is all cached
	// (as settled) costs ITPM nothing. Anthropic still reserves the prompt
	// when it arrives, so it is refused now, admitted once the bucket holds
	// the prompt, and refunded at once.
	clock.Advance(6 * time.Second) // ITPM holds 3,000
	tk, err = c.TryAdmit(ctx, req(3_000, 0))
	if err != nil {
		t.Fatalf("after 6s: %v", err)
	}
	tk.Settle(admission.Usage{Units: tokenUnits(0, 0, 3_000)})
	tk, err = c.TryAdmit(ctx, req(3_000, 0))
	if err != nil {
		t.Fatalf("a prompt of cache reads is refunded to ITPM: %v", err)
	}
	// The large buckets refilled to their capacity in the 6 s; tokens,
	// settled without a total of their own, at the sum of the units.
	want = map[string]int64{"itpm": 0, "otpm": 800, "cached": 997_000, "tpm": 994_000}
	if got := remaining(tk); !equalFigures(got, want) {
		t.Errorf("after a cached prompt: remaining %v; want %v", got, want)
	}
	tk.Done()
}

// TestTokenUnitsCharge charges a stream as it goes in output tokens: a
// charge past OTPM's limit is refused, and input tokens are untouched by
// it.
func TestTokenUnitsCharge(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil,
		admission.Policy{Name: "itpm", Key: tenantKey, Unit: limits.UnitInputTokens, Algorithm: limits.TokenBucket, Limit: 1_000, Per: time.Minute},
		admission.Policy{Name: "otpm", Key: tenantKey, Unit: limits.UnitOutputTokens, Algorithm: limits.TokenBucket, Limit: 600, Per: time.Minute},
	)
	tk, err := c.TryAdmit(context.Background(), admission.Request{Tenant: "org", Units: tokenUnits(100, 200, 0)})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		output     int64
		itpm, otpm int64
		refused    bool
	}{
		{150, 900, 400, false}, // below the reservation: nothing changes
		{450, 900, 150, false},
		{600, 900, 0, true}, // OTPM is spent: the caller may cut the stream
	}
	for _, s := range steps {
		err := tk.Charge(admission.Usage{Units: []admission.UnitAmount{{Unit: limits.UnitOutputTokens, Amount: s.output}}})
		got := remaining(tk)
		if got["itpm"] != s.itpm || got["otpm"] != s.otpm || (err != nil) != s.refused {
			t.Errorf("Charge(output %d): remaining %v, err %v; want itpm %d, otpm %d, refused %v", s.output, got, err, s.itpm, s.otpm, s.refused)
		}
	}
	tk.Settle(admission.Usage{Units: tokenUnits(80, 600, 20)})
	tk, err = c.TryAdmit(context.Background(), admission.Request{Tenant: "org", Units: tokenUnits(920, 0, 0)})
	if err != nil {
		t.Fatalf("ITPM was refunded the 20 cached tokens: %v", err)
	}
	tk.Done()
}

// TestTokensFromUnits: a request or a usage that gives token units but no
// Tokens counts their sum in tokens; a Tokens of its own wins.
func TestTokensFromUnits(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil,
		admission.Policy{Name: "tpm", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 10_000, Per: time.Minute},
	)
	steps := []struct {
		name      string
		req       admission.Request
		usage     admission.Usage
		admitted  int64 // remaining once admitted
		remaining int64 // remaining once settled
	}{
		{"units only", admission.Request{Units: tokenUnits(1_000, 500, 200)}, admission.Usage{Units: tokenUnits(300, 100, 900)}, 8_300, 8_700},
		{"tokens win", admission.Request{Tokens: 2_000, Units: tokenUnits(1_000, 500, 200)}, admission.Usage{Tokens: 1_000, Units: tokenUnits(1, 1, 1)}, 6_700, 7_700},
		{"known zero", admission.Request{Units: tokenUnits(700, 0, 0)}, admission.Usage{TokensKnown: true, Units: tokenUnits(700, 0, 0)}, 7_000, 7_700},
		{"other units", admission.Request{Units: []admission.UnitAmount{{Unit: "images", Amount: 3}}}, admission.Usage{}, 7_700, 7_700},
	}
	for _, s := range steps {
		s.req.Tenant = "org"
		tk, err := c.TryAdmit(context.Background(), s.req)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := remaining(tk)["tpm"]; got != s.admitted {
			t.Errorf("%s: admitted with %d remaining; want %d", s.name, got, s.admitted)
		}
		tk.Settle(s.usage)
		tk, err = c.TryAdmit(context.Background(), admission.Request{Tenant: "org"})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := remaining(tk)["tpm"]; got != s.remaining {
			t.Errorf("%s: settled with %d remaining; want %d", s.name, got, s.remaining)
		}
		tk.Done()
	}
	// A sum above MaxAmount is MaxAmount: more than the bucket can ever
	// hold, refused for good rather than wrapped.
	_, err := c.TryAdmit(context.Background(), admission.Request{Tenant: "org", Units: tokenUnits(limits.MaxAmount, limits.MaxAmount, 0)})
	var rej *admission.Rejection
	if !errors.As(err, &rej) || rej.RetryAfter != limits.Never {
		t.Errorf("a sum of MaxAmounts: err = %v; want a rejection that waiting cannot fix", err)
	}
}

func equalFigures(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// BenchmarkTokenUnitsAdmit admits and settles requests under an input and
// an output tokens policy, each amount found among the request's token
// units: the admitted path stays allocation-free.
func BenchmarkTokenUnitsAdmit(b *testing.B) {
	big := func(name string, u limits.Unit) admission.Policy {
		return admission.Policy{Name: name, Key: tenantKey, Unit: u, Algorithm: limits.TokenBucket, Limit: limits.MaxAmount, Per: time.Second}
	}
	c, err := admission.New(admission.Config{Policies: []admission.Policy{big("itpm", limits.UnitInputTokens), big("otpm", limits.UnitOutputTokens)}})
	if err != nil {
		b.Fatal(err)
	}
	names := tenants(100)
	units := tokenUnits(1200, 400, 0)
	used := tokenUnits(300, 120, 900)
	serialAndParallel(b, func(i int) error {
		tk, err := c.TryAdmit(context.Background(), admission.Request{Tenant: names[i%len(names)], Tokens: 1600, Units: units})
		if err != nil {
			return err
		}
		tk.Settle(admission.Usage{Tokens: 1320, TokensKnown: true, Units: used})
		return nil
	})
}
