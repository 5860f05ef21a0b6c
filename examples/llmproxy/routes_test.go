package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/limits"
)

// routeKind is what a route of the gateway is, for what the default
// policy must decide on it.
type routeKind int

const (
	probe       routeKind = iota // never limited
	byRequests                   // limited by the request rate
	ownRequests                  // limited by a request rate of its own
	llmCall                      // a priced LLM call
	generation                   // a priced LLM call that generates output
	batchCall                    // a batch, reserved until it ends
	mcpRoute                     // MCP: each tool call admitted, not the HTTP request
)

// gatewayRoutes classifies every route the gateway serves, as
// "METHOD pattern". A route the gateway serves that is not here fails
// TestDefaultPolicyGovernsEveryRoute: classify it, and give it its
// limits in default.yaml.
var gatewayRoutes = map[string]routeKind{
	"GET /healthz":                          probe,
	"GET /readyz":                           probe,
	"POST /v1/chat/completions":             generation,
	"POST /v1/completions":                  generation,
	"POST /v1/responses":                    generation,
	"POST /v1/messages":                     generation,
	"POST /model/{modelId}/converse":        generation,
	"POST /model/{modelId}/converse-stream": generation,
	"POST /v1/embeddings":                   llmCall,
	"POST /v1/batches":                      batchCall,
	"POST /v1/messages/batches":             batchCall,
	"GET /v1/messages/batches":              byRequests,
	"GET /v1/messages/batches/{id}":         byRequests,
	"DELETE /v1/messages/batches/{id}":      byRequests,
	"POST /v1/messages/batches/{id}/cancel": byRequests,
	"GET /v1/messages/batches/{id}/results": byRequests,
	"POST /v1/messages/count_tokens":        ownRequests,
	"GET /v1/models":                        byRequests,
	"GET /v1/models/{id}":                   byRequests,
	"POST /v1/files":                        byRequests,
	"GET /v1/files/{id}":                    byRequests,
	"GET /v1/files/{id}/content":            byRequests,
	"GET /v1/batches/{id}":                  byRequests,
	"POST /v1/batches/{id}/cancel":          byRequests,
	"GET /v1/responses/{id}":                byRequests,
	"DELETE /v1/responses/{id}":             byRequests,
	"GET /v1/responses/{id}/input_items":    byRequests,
	"POST /v1/responses/{id}/cancel":        byRequests,
	"POST /mcp":                             mcpRoute,
	"GET /mcp":                              mcpRoute,
	"DELETE /mcp":                           mcpRoute,
	"POST /mcp/{server}":                    mcpRoute,
	"GET /mcp/{server}":                     mcpRoute,
	"DELETE /mcp/{server}":                  mcpRoute,

	"POST /openai/deployments/{deployment}/chat/completions": generation,
	"POST /openai/deployments/{deployment}/completions":      generation,
	"POST /openai/deployments/{deployment}/responses":        generation,
	"POST /openai/deployments/{deployment}/embeddings":       llmCall,
	"POST /openai/v1/chat/completions":                       generation,
	"POST /openai/v1/completions":                            generation,
	"POST /openai/v1/responses":                              generation,
	"POST /openai/responses":                                 generation,
	"POST /openai/v1/embeddings":                             llmCall,
	"GET /openai/responses/{id}":                             byRequests,
	"DELETE /openai/responses/{id}":                          byRequests,
	"GET /openai/responses/{id}/input_items":                 byRequests,
	"POST /openai/responses/{id}/cancel":                     byRequests,
	"GET /openai/v1/responses/{id}":                          byRequests,
	"DELETE /openai/v1/responses/{id}":                       byRequests,
	"GET /openai/v1/responses/{id}/input_items":              byRequests,
	"POST /openai/v1/responses/{id}/cancel":                  byRequests,
}

// TestDefaultPolicyGovernsEveryRoute enumerates the routes the demo
// gateway serves and checks what the embedded default policy decides on
// each: every route but the probes has an enforced request rate; every
// LLM call an enforced token limit and the spend quota, one that
// generates an output-token limit and the per-tenant concurrency cap; a
// batch its tokens, spend and running batches; count_tokens a request
// rate of its own and no token budget.
func TestDefaultPolicyGovernsEveryRoute(t *testing.T) {
	s := startProxy(t)
	var served []string
	for _, op := range servedOperations(s.e.Routes()) {
		served = append(served, op)
		kind, ok := gatewayRoutes[op]
		if !ok {
			kind, ok = geminiRouteKinds[op]
		}
		if !ok {
			t.Errorf("%s: the gateway serves a route this test does not know: classify it in gatewayRoutes and limit it in default.yaml", op)
			continue
		}
		var names []string
		has := func(unit limits.Unit, alg ...limits.Algorithm) bool {
			for _, p := range s.file.Config.Policies {
				u := p.Unit
				if u == "" {
					u = limits.UnitRequests
				}
				if p.Matches(op, "gpt-4o-mini") && p.Mode == limits.Enforce && u == unit && (len(alg) == 0 || slices.Contains(alg, p.Algorithm)) {
					return true
				}
			}
			return false
		}
		for _, p := range s.file.Config.Policies {
			if p.Matches(op, "gpt-4o-mini") {
				names = append(names, p.Name)
			}
		}
		rate := []limits.Algorithm{limits.TokenBucket, limits.FixedWindow, limits.SlidingWindow, limits.SlidingLog}
		var missing []string
		need := func(ok bool, what string) {
			if !ok {
				missing = append(missing, what)
			}
		}
		switch kind {
		case probe:
			need(len(names) == 0, "no policy (a probe is never limited)")
		case ownRequests:
			need(has(limits.UnitRequests, rate...), "a request rate")
			need(!has(limits.UnitTokens) && !has(limits.UnitCost), "no token or cost budget")
			for _, p := range s.file.Config.Policies {
				if p.Matches(op, "") && (p.Matches("POST /v1/messages", "") || p.Matches("GET /v1/models", "")) {
					need(false, "a request rate of its own, not "+p.Name)
				}
			}
		case byRequests:
			need(has(limits.UnitRequests, rate...), "a request rate")
		case llmCall, generation:
			need(has(limits.UnitRequests, rate...), "a request rate")
			need(has(limits.UnitTokens, rate...), "a token rate")
			need(has(limits.UnitCost, limits.Quota), "a spend quota")
			need(has(limits.UnitRequests, limits.Concurrency), "a concurrency cap")
			if kind == generation {
				need(has(limits.UnitOutputTokens, rate...), "an output token rate")
			}
		case mcpRoute:
			need(len(names) == 0, "no policy on the HTTP request (its MCP requests are admitted one by one)")
			for _, tool := range []string{"search", "write_file", limits.OtherTool} {
				n := 0
				for _, p := range s.file.Config.Policies {
					if p.Matches(limits.MCPOperation("", limits.MCPToolsCall, tool), "") && p.Mode == limits.Enforce && slices.Contains(rate, p.Algorithm) {
						n++
					}
				}
				need(n > 0, "a rate on calls of "+tool)
				need(tool != "write_file" || n > 1, "a lower rate on the write tool")
			}
		case batchCall:
			need(has(limits.UnitRequests, rate...), "a request rate")
			need(has(limits.UnitTokens, limits.Quota), "a token quota")
			need(has(limits.UnitCost, limits.Quota), "a spend quota")
			need(has(limits.UnitRequests, limits.Concurrency), "a cap on running batches")
		}
		if len(missing) > 0 {
			t.Errorf("%s: decided by %v; want %s", op, names, strings.Join(missing, ", "))
		}
	}
	for op := range gatewayRoutes {
		if !slices.Contains(served, op) {
			t.Errorf("%s: in gatewayRoutes but not served by the gateway", op)
		}
	}
}

// demoClock freezes the demo's limits at an instant: no bucket refills
// while a test counts.
func demoClock() *admissiontest.Clock {
	return admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
}

// TestDefaultPolicyMetersMessages: on /v1/messages the default policy
// refuses a free tenant's request for 1e12 output tokens, and charges an
// admitted message to the tenant's tokens, output tokens and monthly
// spend.
func TestDefaultPolicyMetersMessages(t *testing.T) {
	s := startProxy(t, func(o *options) { o.clock = demoClock() })
	const msg = `{"model":"claude-sonnet-4-5","max_tokens":%d,"messages":[{"role":"user","content":"Write a long story."}]}`
	spent := remaining(t, s, "globex", "monthly-spend")
	resp, b := post(t, s, "/v1/messages", "sk-demo-globex", fmt.Sprintf(msg, int64(1e12)))
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), `"rate_limit_error"`) || resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("free tenant, max_tokens 1e12 on /v1/messages: %d %s; want 429 rate_limit_error that no retry helps", resp.StatusCode, b)
	}
	if got := remaining(t, s, "globex", "monthly-spend"); got != spent {
		t.Errorf("a refused message spent %d micro-dollars", spent-got)
	}
	tokens, output := remaining(t, s, "globex", "tokens-per-minute"), remaining(t, s, "globex", "output-tokens-per-minute")
	resp, b = post(t, s, "/v1/messages", "sk-demo-globex", fmt.Sprintf(msg, 64))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a small message: %d %s", resp.StatusCode, b)
	}
	var m struct {
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Usage.OutputTokens == 0 {
		t.Fatalf("message %s: no usage (%v)", b, err)
	}
	eventually(t, 5*time.Second, "the message settled on every budget", func() bool {
		return remaining(t, s, "globex", "monthly-spend") < spent &&
			tokens-remaining(t, s, "globex", "tokens-per-minute") == m.Usage.InputTokens+m.Usage.OutputTokens &&
			output-remaining(t, s, "globex", "output-tokens-per-minute") == m.Usage.OutputTokens
	})
}

// TestDefaultPolicyLimitsCountTokensApart: count_tokens has its own
// request rate (100 a minute on the free plan), and spends neither the
// request rate nor the token budget of the Messages API.
func TestDefaultPolicyLimitsCountTokensApart(t *testing.T) {
	s := startProxy(t, func(o *options) { o.clock = demoClock() })
	const body = `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"How many tokens is this?"}]}`
	tokens := remaining(t, s, "globex", "tokens-per-minute")
	for i := range 100 {
		if resp, b := post(t, s, "/v1/messages/count_tokens", "sk-demo-globex", body); resp.StatusCode != http.StatusOK {
			t.Fatalf("count_tokens call %d of the 100 a minute allowed: %d %s", i+1, resp.StatusCode, b)
		}
	}
	resp, b := post(t, s, "/v1/messages/count_tokens", "sk-demo-globex", body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("RateLimit-Policy") == "" || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"count-tokens-per-minute"`) {
		t.Errorf("count_tokens call 101: %d %s (RateLimit-Policy %q); want 429 from count-tokens-per-minute", resp.StatusCode, b, resp.Header.Get("RateLimit-Policy"))
	}
	if got := remaining(t, s, "globex", "tokens-per-minute"); got != tokens {
		t.Errorf("count_tokens spent %d of the Messages token budget", tokens-got)
	}
	// The request rate of the Messages API lost only the two probes above
	// and the message itself.
	resp, b = post(t, s, "/v1/messages", "sk-demo-globex", `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
	if rl := resp.Header.Get("RateLimit"); resp.StatusCode != http.StatusOK || !strings.Contains(rl, `"requests-per-minute";r=57;`) {
		t.Errorf("a message after count_tokens ran out: %d %s, RateLimit %q; want 200 with 57 of 60 requests left", resp.StatusCode, b, rl)
	}
}

// batchLines is a batch input file of n chat requests for gpt-4o, each
// reserving 100,000 output tokens ($0.50 at gpt-4o's batch price, half
// its $10 per million output tokens).
func batchLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o","max_tokens":100000,"messages":[{"role":"user","content":"Write a novel."}]}}`+"\n", i)
	}
	return b.String()
}

// createBatch uploads jsonl through the proxy as key and creates a batch
// from it.
func createBatch(t testing.TB, s *server, key, jsonl string) (*http.Response, []byte) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "input.jsonl")
	_, _ = io.WriteString(fw, jsonl)
	_ = mw.Close()
	resp, b := post(t, s, "/v1/files", key, body.String(), "Content-Type", mw.FormDataContentType())
	var f struct{ ID string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &f) != nil || f.ID == "" {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	return post(t, s, "/v1/batches", key, `{"input_file_id":"`+f.ID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`)
}

// TestDefaultPolicyReservesBatches: a batch reserves its spend on the
// tenant's month when it is created; a batch beyond what is left of the
// month ($3 reserved of $5, another $3) is refused, and one beyond the
// whole month ($16 of output at gpt-4o's list price, $8 at its batch
// price) can never be admitted.
func TestDefaultPolicyReservesBatches(t *testing.T) {
	s := startProxy(t, func(o *options) { o.clock = demoClock() })
	month := remaining(t, s, "globex", "monthly-spend")
	if resp, b := createBatch(t, s, "sk-demo-globex", batchLines(16)); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"batch_too_large"`) || !strings.Contains(string(b), "monthly-spend") {
		t.Errorf("an $8 batch for a $5 month: %d %s; want 400 batch_too_large naming monthly-spend", resp.StatusCode, b)
	}
	if resp, b := createBatch(t, s, "sk-demo-globex", batchLines(6)); resp.StatusCode != http.StatusOK {
		t.Fatalf("a $3 batch: %d %s", resp.StatusCode, b)
	}
	if got := month - remaining(t, s, "globex", "monthly-spend"); got < 3_000_000 || got > 3_100_000 {
		t.Errorf("a $3 batch reserved %d micro-dollars of the month; want about 3,000,000", got)
	}
	resp, b := createBatch(t, s, "sk-demo-globex", batchLines(6))
	var e apiError
	if resp.StatusCode != http.StatusTooManyRequests || json.Unmarshal(b, &e) != nil || deref(e.Error.Code) != "quota_exceeded" {
		t.Errorf("a second $3 batch with $2 left: %d %s; want 429 quota_exceeded", resp.StatusCode, b)
	}
	if tk, err := s.ctl.TryAdmit(t.Context(), admission.Request{Tenant: "globex", Operation: "POST /v1/batches"}); err == nil {
		for _, st := range tk.Statuses(nil) {
			if st.Policy == "batches-running" && st.Remaining != 5-1-1 {
				t.Errorf("batches-running: %d left with one batch running and this probe; want 3", st.Remaining)
			}
		}
		tk.Done()
	} else {
		t.Errorf("probe of the batch policies: %v", err)
	}
}
