package weights_test

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/weights"
)

func ExampleEstimator_Estimate() {
	prices, err := weights.NewPrices(map[string]weights.Price{
		"gpt-4o-mini": {Input: 0.15, Output: 0.60},
	})
	if err != nil {
		panic(err)
	}
	est, err := weights.NewEstimator(weights.Config{Prices: prices})
	if err != nil {
		panic(err)
	}
	body := []byte(`{
		"model": "gpt-4o-mini",
		"max_completion_tokens": 200,
		"n": 2,
		"messages": [
			{"role": "system", "content": "You are a helpful assistant."},
			{"role": "user", "content": "Why is the sky blue?"}
		]
	}`)
	e, err := est.Estimate("/v1/chat/completions", body)
	if err != nil {
		panic(err)
	}
	fmt.Println("encoding:", e.Encoding)
	fmt.Println("input:", e.InputTokens, "output:", e.OutputTokens, "total:", e.TotalTokens())
	fmt.Println("cost (micro-dollars):", e.CostMicros)
	// Output:
	// encoding: o200k_base
	// input: 23 output: 400 total: 423
	// cost (micro-dollars): 244
}

// An HTTP handler maps estimation errors to status codes.
func ExampleEstimator_Estimate_errors() {
	est, err := weights.NewEstimator(weights.Config{MaxBodyBytes: 1 << 10})
	if err != nil {
		panic(err)
	}
	status := func(err error) int {
		switch {
		case err == nil:
			return http.StatusOK
		case errors.Is(err, weights.ErrTooLarge):
			return http.StatusRequestEntityTooLarge
		case errors.Is(err, weights.ErrMalformed):
			return http.StatusBadRequest
		case errors.Is(err, weights.ErrUnsupportedEndpoint):
			return http.StatusNotFound
		}
		return http.StatusInternalServerError
	}
	for _, body := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":`,
		`{"model":"gpt-4o","messages":"hi"}`,
		`{"input":"` + string(make([]byte, 2000)) + `"}`,
	} {
		_, err := est.Estimate("/v1/chat/completions", []byte(body))
		fmt.Println(status(err), err)
	}
	// Output:
	// 200 <nil>
	// 400 weights: malformed /v1/chat/completions body: invalid JSON at byte 55: unexpected end of JSON input
	// 400 weights: malformed /v1/chat/completions body: messages: want an array, got string
	// 413 weights: request body of 2012 bytes exceeds the 1024-byte limit
}

// An Anthropic Messages API request priced before the call, and the units
// its usage settles: cache reads apart from the input that Anthropic's
// input-tokens-per-minute limit counts.
func ExampleEstimator_Estimate_messages() {
	est, err := weights.NewEstimator(weights.Config{})
	if err != nil {
		panic(err)
	}
	e, err := est.Estimate("/v1/messages", []byte(`{
		"model": "claude-sonnet-4-5",
		"max_tokens": 1024,
		"messages": [{"role": "user", "content": "Hello, Claude"}]
	}`))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %d in, %d out, %+v\n", e.Encoding, e.InputTokens, e.OutputTokens, e.Units())
	rep, err := weights.ReadUsage([]byte(`{"type":"message","usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":6,"output_tokens":12}}`))
	if err != nil {
		panic(err)
	}
	u, _ := e.CheckUsage(rep)
	fmt.Printf("usage: %d in (%d cached), %d out, %+v\n", u.InputTokens, u.CachedInputTokens, u.OutputTokens, u.Units())
	// Output:
	// cl100k_base: 11 in, 1024 out, {Input:11 Output:1024 CachedInput:0}
	// usage: 10 in (6 cached), 12 out, {Input:4 Output:12 CachedInput:6}
}
