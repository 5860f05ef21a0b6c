package tokenunits

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
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
	au := Usage(nil, u.Units())
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

func TestUsageIntoABufferWithoutAllocating(t *testing.T) {
	var buf [3]admission.UnitAmount
	tu := weights.TokenUnits{Input: 1, Output: 2, CachedInput: 3}
	var u admission.Usage
	if n := testing.AllocsPerRun(100, func() { u = Usage(buf[:0], tu) }); n != 0 {
		t.Errorf("Usage into a buffer with room: %.0f allocations; want 0", n)
	}
	if u.Tokens != 6 || len(u.Units) != 3 || &u.Units[0] != &buf[0] {
		t.Errorf("Usage = %+v; want 6 tokens in three units, in the buffer given", u)
	}
}

// TestAnthropicStream admits a streamed Messages API request under ITPM
// and OTPM mirrors, charges it as it streams, and settles it with the
// usage the stream reported: ITPM keeps only the prompt tokens not read
// from the cache, OTPM the output.
func TestAnthropicStream(t *testing.T) {
	est, err := weights.NewEstimator(weights.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := est.Estimate("/v1/messages", []byte(`{"model":"claude-haiku-4-5","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":"Write a haiku about rivers."}]}`))
	if err != nil {
		t.Fatal(err)
	}
	clock := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	perMinute := func(name string, u limits.Unit, n int64) limits.Policy {
		return limits.Policy{Name: name, Key: []limits.KeyPart{limits.KeyTenant}, Unit: u, Algorithm: limits.TokenBucket, Limit: n, Per: time.Minute}
	}
	c, err := admission.New(admission.Config{Policies: []limits.Policy{
		perMinute("itpm", limits.UnitInputTokens, 30_000),
		perMinute("otpm", limits.UnitOutputTokens, 8_000),
	}}, admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	r := admission.Request{Tenant: "acme"}
	Request(&r, e.Units())
	tk, err := c.Admit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	remaining := func() map[string]int64 {
		m := map[string]int64{}
		for _, s := range tk.Statuses(nil) {
			m[s.Policy] = s.Remaining
		}
		return m
	}
	if got := remaining(); got["itpm"] != 30_000-e.InputTokens || got["otpm"] != 4_000 {
		t.Fatalf("admitted: %v; want itpm %d, otpm 4000", got, 30_000-e.InputTokens)
	}
	stream := "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-haiku-4-5","usage":{"input_tokens":14,"cache_creation_input_tokens":0,"cache_read_input_tokens":2000,"output_tokens":1}}}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Water finds its way"}}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":300}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
	sr := est.NewStreamReader(strings.NewReader(stream), e, false)
	if _, err := io.Copy(io.Discard, sr); err != nil {
		t.Fatal(err)
	}
	// Charged as it went: the streamed text is below the reservation.
	if err := tk.Charge(Usage(nil, weights.Usage{InputTokens: e.InputTokens, OutputTokens: sr.StreamedTokens()}.Units())); err != nil {
		t.Fatalf("Charge: %v", err)
	}
	res := sr.Result()
	if !res.Completed || res.Fallback != weights.FallbackNone {
		t.Fatalf("stream result %+v", res)
	}
	tk.Settle(Usage(nil, res.Usage.Units()))
	tk, err = c.Admit(context.Background(), admission.Request{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if got := remaining(); got["itpm"] != 30_000-14 || got["otpm"] != 8_000-300 {
		t.Errorf("settled: %v; want itpm %d, otpm %d", got, 30_000-14, 8_000-300)
	}
	tk.Done()
}
