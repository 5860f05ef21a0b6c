package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/upstream"
)

// A gateway guards a provider's budget of 2,000,000 tokens a minute per
// model, and feeds the store each response's headers: after the
// provider's 429, requests for that model are refused (or, with a queue,
// wait) until its retry-after.
func Example() {
	store, _ := upstream.New(upstream.Config{})
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "openai-tpm", Store: "openai", Key: []limits.KeyPart{limits.KeyModel},
		Unit: limits.UnitTokens, Algorithm: limits.FixedWindow, Limit: 2_000_000, Per: time.Minute,
	}}}, admission.WithStore("openai", store))

	ctx := context.Background()
	req := admission.Request{Tenant: "acme", Model: "gpt-4o", Tokens: 1200}
	t, err := ctl.Admit(ctx, req)
	fmt.Println("first:", err)
	t.Done()

	// The provider refused anyway (another gateway shares the account).
	resp := http.Header{"Retry-After": {"20"}, "X-Ratelimit-Remaining-Tokens": {"0"}}
	store.Observe(req.Model, upstream.Parse(resp.Get, http.StatusTooManyRequests, time.Now()))

	_, err = ctl.Admit(ctx, req)
	var rej *admission.Rejection
	if errors.As(err, &rej) {
		fmt.Println("second:", rej.Reason, "retry in", rej.RetryAfter.Round(time.Second))
	}
	// Output:
	// first: <nil>
	// second: rate retry in 20s
}
