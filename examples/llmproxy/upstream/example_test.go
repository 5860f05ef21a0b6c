package upstream_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// The simulator answers like an OpenAI-compatible API, with a usage report.
func Example() {
	srv := httptest.NewServer(upstream.New(upstream.Config{OutputTokens: 5}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there"}]}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	fmt.Printf("%q\n", out.Choices[0].Message.Content)
	fmt.Println(out.Usage.PromptTokens, out.Usage.CompletionTokens)
	// Output:
	// " The quick brown fox jumps"
	// 9 5
}

// With Limits the simulator enforces a provider's limits per model and
// sends OpenAI's headers: here one request a minute.
func ExampleLimits() {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(upstream.New(upstream.Config{
		Limits: upstream.Limits{Requests: 1, Window: time.Minute},
	}, upstream.WithClock(admissiontest.NewClock(now))))
	defer srv.Close()
	for range 2 {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`))
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		h := resp.Header
		fmt.Printf("%d remaining %s, full in %s, retry after %q\n", resp.StatusCode,
			h.Get("X-Ratelimit-Remaining-Requests"), h.Get("X-Ratelimit-Reset-Requests"), h.Get("Retry-After"))
	}
	// Output:
	// 200 remaining 0, full in 1m0s, retry after ""
	// 429 remaining 0, full in 1m0s, retry after "60"
}
