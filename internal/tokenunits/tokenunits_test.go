package tokenunits

import (
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/weights"
)

func TestRequestAndUsage(t *testing.T) {
	u := weights.Usage{InputTokens: 3873, CachedInputTokens: 1800, CacheWriteInputTokens: 2048, OutputTokens: 89, ReasoningTokens: 40}
	r := admission.Request{Units: []admission.UnitAmount{{Unit: "images", Amount: 2}}}
	Request(&r, u.Units())
	if r.Tokens != 3962 {
		t.Errorf("Request: Tokens = %d; want 3962", r.Tokens)
	}
	for unit, want := range map[limits.Unit]int64{
		limits.UnitTokens: 3962, limits.UnitInputTokens: 2073, limits.UnitCachedInputTokens: 1800,
		limits.UnitOutputTokens: 89, "images": 2, limits.UnitRequests: 1,
	} {
		if got := r.Amount(unit); got != want {
			t.Errorf("Request: Amount(%s) = %d; want %d", unit, got, want)
		}
	}
	au := Usage(u.Units())
	want := admission.Usage{Tokens: 3962, TokensKnown: true, Units: []admission.UnitAmount{
		{Unit: limits.UnitInputTokens, Amount: 2073}, {Unit: limits.UnitOutputTokens, Amount: 89}, {Unit: limits.UnitCachedInputTokens, Amount: 1800},
	}}
	if au.Tokens != want.Tokens || !au.TokensKnown || len(au.Units) != 3 || au.Units[0] != want.Units[0] || au.Units[1] != want.Units[1] || au.Units[2] != want.Units[2] {
		t.Errorf("Usage = %+v; want %+v", au, want)
	}
}

func TestAppendWithoutAllocating(t *testing.T) {
	buf := make([]admission.UnitAmount, 0, 3)
	tu := weights.TokenUnits{Input: 1, Output: 2, CachedInput: 3}
	if n := testing.AllocsPerRun(100, func() { buf = Append(buf[:0], tu) }); n != 0 {
		t.Errorf("Append into a buffer with room: %.0f allocations; want 0", n)
	}
}
