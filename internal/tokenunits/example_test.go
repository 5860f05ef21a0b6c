package tokenunits_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/tokenunits"
	"github.com/sluicehq/sluice/weights"
)

// An Anthropic Messages API request admitted under limits that mirror
// Anthropic's own (input tokens per minute without cache reads, output
// tokens per minute), then settled with the usage of its response.
func Example() {
	est, err := weights.NewEstimator(weights.Config{})
	if err != nil {
		panic(err)
	}
	e, err := est.Estimate("/v1/messages", []byte(`{
		"model": "claude-sonnet-4-5",
		"max_tokens": 1024,
		"system": [{"type": "text", "text": "You are a patient tutor.", "cache_control": {"type": "ephemeral"}}],
		"messages": [{"role": "user", "content": "Why is the sky blue?"}]
	}`))
	if err != nil {
		panic(err)
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
		panic(err)
	}
	r := admission.Request{Tenant: "acme", Model: e.Model}
	tokenunits.Request(&r, e.Units())
	tk, err := c.Admit(context.Background(), r)
	if err != nil {
		panic(err)
	}
	show := func(when string, tk admission.Ticket) {
		fmt.Print(when)
		for _, s := range tk.Statuses(nil) {
			fmt.Printf(" %s %d/%d", s.Policy, s.Remaining, s.Limit)
		}
		fmt.Println()
	}
	fmt.Println("estimate:", e.InputTokens, "in,", e.OutputTokens, "out")
	show("admitted:", tk)

	rep, err := weights.ReadUsage([]byte(`{"type":"message","usage":{"input_tokens":14,"cache_creation_input_tokens":0,"cache_read_input_tokens":8,"output_tokens":180}}`))
	if err != nil {
		panic(err)
	}
	u, _ := e.CheckUsage(rep)
	tk.Settle(tokenunits.Usage(nil, u.Units()))

	tk, err = c.Admit(context.Background(), admission.Request{Tenant: "acme"})
	if err != nil {
		panic(err)
	}
	show("settled: ", tk)
	tk.Done()
	// Output:
	// estimate: 25 in, 1024 out
	// admitted: itpm 29975/30000 otpm 6976/8000
	// settled:  itpm 29986/30000 otpm 7820/8000
}
