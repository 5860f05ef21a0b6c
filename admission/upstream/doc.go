// Package upstream keeps what a gateway sends a provider inside what the
// provider will accept. A provider's own limits (requests and tokens per
// minute, per model or deployment) are shared by every tenant of the
// gateway: once they run out the provider answers 429, and the refusal
// lands on whichever tenant comes next.
//
// Parse reads the limit figures of a provider response (OpenAI, Azure
// OpenAI and Anthropic headers, and retry-after on a 429 or 503) into a
// Report. Store is a limit store whose policies carry the provider's
// published budget as their static limit; Observe feeds it each Report,
// and what it learns only tightens that budget: a group the provider
// refused is paused until its retry-after, and a request the provider's
// remaining figure cannot hold waits for its reset. With a queue on the
// policy, such requests wait in the controller's fair queue instead of
// failing.
//
// A policy on the store is an ordinary policy:
//
//	ctl, _ := admission.New(cfg, admission.WithStore("openai", store))
//	// policies: {Name: "openai-tpm", Store: "openai", Key: [model],
//	//            Unit: tokens, Algorithm: fixed_window,
//	//            Limit: 2_000_000, Per: time.Minute,
//	//            Queue: {Size: 1000, Timeout: 30 * time.Second}}
//	...
//	resp, err := client.Do(req)
//	store.Observe(model, upstream.Parse(resp.Header.Get, resp.StatusCode, time.Now()))
package upstream
