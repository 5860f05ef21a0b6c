package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"google.golang.org/genai"

	"github.com/sluicehq/sluice/admission/admissiontest"
)

// geminiRouteKinds classifies the Gemini API's operations for
// TestDefaultPolicyGovernsEveryRoute, as gatewayRoutes does the others.
var geminiRouteKinds = map[string]routeKind{
	"POST /v1beta/models/{model}:generateContent":       generation,
	"POST /v1beta/models/{model}:streamGenerateContent": generation,
	"POST /v1beta/models/{model}:countTokens":           ownRequests,
}

// servedOperations returns the operations of the gateway's routes, as
// "METHOD pattern": one per route, but three for the one route that
// serves the Gemini API's methods.
func servedOperations(routes []*echo.Route) []string {
	var ops []string
	for _, r := range routes {
		if r.Path == "/v1beta/models/:call" {
			for op := range geminiRouteKinds {
				ops = append(ops, op)
			}
			continue
		}
		ops = append(ops, r.Method+" "+strings.NewReplacer(":id", "{id}", ":server", "{server}", ":deployment", "{deployment}", ":modelId", "{modelId}").Replace(r.Path))
	}
	return ops
}

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

// TestDefaultPolicyMetersGemini: on generateContent the default policy
// refuses a free tenant's request for 1e12 output tokens in Google's
// shape, and charges an admitted call to the tenant's tokens, output
// tokens and monthly spend.
func TestDefaultPolicyMetersGemini(t *testing.T) {
	s := startProxy(t, func(o *options) { o.clock = demoClock() })
	const path = "/v1beta/models/gemini-2.5-flash:generateContent"
	const body = `{"contents":[{"role":"user","parts":[{"text":"Write a long story."}]}],"generationConfig":{"maxOutputTokens":%d}}`
	spent := remaining(t, s, "globex", "monthly-spend")
	resp, b := post(t, s, path, "", fmt.Sprintf(body, int64(1e12)), "X-Goog-Api-Key", "sk-demo-globex")
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), `"RESOURCE_EXHAUSTED"`) || resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("free tenant, maxOutputTokens 1e12: %d %s; want 429 RESOURCE_EXHAUSTED that no retry helps", resp.StatusCode, b)
	}
	tokens, output := remaining(t, s, "globex", "tokens-per-minute"), remaining(t, s, "globex", "output-tokens-per-minute")
	resp, b = post(t, s, path+"?key=sk-demo-globex", "", fmt.Sprintf(body, 64))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a small call: %d %s", resp.StatusCode, b)
	}
	var r struct {
		UsageMetadata struct{ PromptTokenCount, CandidatesTokenCount int64 }
	}
	if err := json.Unmarshal(b, &r); err != nil || r.UsageMetadata.CandidatesTokenCount == 0 {
		t.Fatalf("answer %s: no usage (%v)", b, err)
	}
	u := r.UsageMetadata
	eventually(t, 5*time.Second, "the call settled on every budget", func() bool {
		return remaining(t, s, "globex", "monthly-spend") < spent &&
			tokens-remaining(t, s, "globex", "tokens-per-minute") == u.PromptTokenCount+u.CandidatesTokenCount &&
			output-remaining(t, s, "globex", "output-tokens-per-minute") == u.CandidatesTokenCount
	})
}
