package main

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/sluicehq/sluice/admission/admissiontest"
)

// llmproxy with its built-in simulator serves the Gemini API to the
// official SDK: a call and a stream are admitted on a tokens policy and
// settled at their usageMetadata, which CountTokens (priced nothing)
// shows on the fake clock.
func TestGeminiSDKThroughLLMProxy(t *testing.T) {
	s := startProxy(t, withPolicy(t, `
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 1M, per: 1h}
`, []string{"a"}, ""), func(o *options) { o.clock = admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) })
	ctx := ctxT(t, 20*time.Second)
	c, err := genai.NewClient(ctx, &genai.ClientConfig{APIKey: testKey("a"), Backend: genai.BackendGeminiAPI, HTTPOptions: genai.HTTPOptions{BaseURL: s.URL}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &genai.GenerateContentConfig{MaxOutputTokens: 64}
	r, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("hi"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last *genai.GenerateContentResponse
	for chunk, err := range c.Models.GenerateContentStream(ctx, "gemini-2.5-flash", genai.Text("hi"), cfg) {
		if err != nil {
			t.Fatal(err)
		}
		last = chunk
	}
	u, su := r.UsageMetadata, last.UsageMetadata
	if u.CandidatesTokenCount != 20 || su.CandidatesTokenCount != 20 || u.PromptTokenCount == 0 || su.PromptTokenCount != u.PromptTokenCount {
		t.Fatalf("usage %+v and streamed %+v; want the simulator's 20 tokens out and equal prompts", u, su)
	}
	n, err := c.Models.CountTokens(ctx, "gemini-2.5-flash", genai.Text("hi"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(1_000_000 - 2*int(u.PromptTokenCount+u.CandidatesTokenCount))
	if got := n.SDKHTTPResponse.Headers.Get("X-Ratelimit-Remaining-Tokens"); got != want {
		t.Errorf("tokens remaining = %q; want %s", got, want)
	}
}

func TestGeminiFlags(t *testing.T) {
	t.Setenv(GeminiKeyEnv, "gemini-x")
	o, err := parseFlags([]string{"--gemini-upstream", "https://generativelanguage.googleapis.com/v1beta"}, nil)
	if err != nil || o.gw.Gemini.Upstream != "https://generativelanguage.googleapis.com/v1beta" || o.gw.Gemini.Key != "gemini-x" {
		t.Errorf("parseFlags = %+v, %v; want the Gemini upstream and the key from $%s", o.gw.Gemini, err, GeminiKeyEnv)
	}
}
