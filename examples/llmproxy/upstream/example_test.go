package upstream_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

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
