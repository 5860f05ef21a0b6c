package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// loopFile holds a loop policy in mode: 5 near-identical steps of a
// session in an hour, kept on the store named sessions; a response
// names the shadow policies that would have refused it.
func loopFile(mode string) string {
	return fmt.Sprintf(`
policies:
  - {name: loops, key: [tenant, session, fingerprint], algorithm: sliding_log, limit: 5, per: 1h, mode: %s,
     store: sessions, max_partitions: 1000, overflow: evict}
tenants:
  acme: {api_keys: [%s]}
identity: {anonymous: deny}
http: {shadow_header: true}
`, mode, apikey.Sum("sk-acme"))
}

// loopingAgent runs a simulated agent through the gateways gws (in
// turn) with openai-go at its default retries: 3 sound steps, then from
// step k = 4 the same call of get_weather with the same arguments (a
// fresh call id, spacing and key order varying) on the same result. It
// returns the first step refused (0: none), the refusal, and the first
// step served with a Sluice-Would-Reject header naming loops.
func loopingAgent(t *testing.T, gws []*sessionGateway, steps int) (refusedAt int, refusal *openai.Error, wouldRejectAt int) {
	t.Helper()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What should I wear in Paris?")}
	for i := 1; i <= steps; i++ {
		tool, args, result := "get_weather", []string{`{"city":"Paris","unit":"c"}`, `{ "unit": "c", "city": "Paris" }`}[i%2], "18 C, light rain"
		if i < 4 {
			tool, args, result = "search", fmt.Sprintf(`{"q":"paris step %d"}`, i), fmt.Sprintf("result %d", i)
		}
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
				ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: id, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tool, Arguments: args}}}}}},
			openai.ToolMessage(result, id))
		sg := gws[i%len(gws)]
		c := openai.NewClient(option.WithBaseURL(sg.url+"/v1"), option.WithAPIKey("sk-acme"), option.WithHeader("X-Session-Id", "agent-7"))
		var wouldReject string
		_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o", MaxTokens: openai.Int(5), Messages: msgs},
			option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
				res, err := next(r)
				if res != nil {
					wouldReject = res.Header.Get("Sluice-Would-Reject")
				}
				return res, err
			}))
		var apiErr *openai.Error
		switch {
		case err == nil:
			if wouldRejectAt == 0 && strings.Contains(wouldReject, "loops") {
				wouldRejectAt = i
			}
		case errors.As(err, &apiErr):
			return i, apiErr, wouldRejectAt
		default:
			t.Fatalf("step %d: %v", i, err)
		}
	}
	return 0, nil, wouldRejectAt
}

// TestLoopThroughGateway: a simulated agent that loops from step 4,
// through the gateway over HTTP with openai-go: in shadow every step is
// served and the 6th identical one (step 9) is the first marked
// Sluice-Would-Reject: loops; in enforce step 9 is refused with 403
// loop_detected, the evidence in the message, x-should-retry: false,
// and the SDK makes no retry. On Redis, two gateways sharing one
// redis-server count the session's steps as one.
func TestLoopThroughGateway(t *testing.T) {
	const k, limit, steps = 4, 5, 12
	srv := redistest.Start(t)
	store := func() *redisstore.Store { return sessionsOn(t, srv.Addr) }
	t.Run("shadow", func(t *testing.T) {
		gw := newSessionGateway(t, loopFile("shadow"), nil)
		refusedAt, _, wouldRejectAt := loopingAgent(t, []*sessionGateway{gw}, steps)
		t.Logf("shadow: loop from step %d: first would_reject at step %d, refused at %d", k, wouldRejectAt, refusedAt)
		if refusedAt != 0 || wouldRejectAt != k+limit {
			t.Errorf("shadow: refused at step %d, first would-reject at step %d; want none refused, would-reject at %d", refusedAt, wouldRejectAt, k+limit)
		}
		if n := gw.requests.Load(); n != steps {
			t.Errorf("shadow: the gateway saw %d requests for %d steps; want %d", n, steps, steps)
		}
	})
	for _, tc := range []struct {
		name string
		gws  func() []*sessionGateway
	}{
		{"enforce", func() []*sessionGateway { return []*sessionGateway{newSessionGateway(t, loopFile("enforce"), nil)} }},
		{"enforce on Redis, two gateways", func() []*sessionGateway {
			return []*sessionGateway{newSessionGateway(t, loopFile("enforce"), store()), newSessionGateway(t, loopFile("enforce"), store())}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gws := tc.gws()
			refusedAt, apiErr, _ := loopingAgent(t, gws, steps)
			t.Logf("%s: loop from step %d: refused at step %d", tc.name, k, refusedAt)
			if refusedAt != k+limit || apiErr == nil {
				t.Fatalf("refused at step %d; want %d", refusedAt, k+limit)
			}
			want := "Loop detected (policy loops): this session made the same step (tool get_weather) more than 5 times within 1h."
			if apiErr.StatusCode != 403 || apiErr.Code != "loop_detected" || !strings.Contains(apiErr.Message, want) ||
				apiErr.Response.Header.Get("X-Should-Retry") != "false" || apiErr.Response.Header.Get("Retry-After") != "" {
				t.Errorf("refusal = %d %s %q, x-should-retry %q, retry-after %q; want 403 loop_detected %q, false, none",
					apiErr.StatusCode, apiErr.Code, apiErr.Message, apiErr.Response.Header.Get("X-Should-Retry"), apiErr.Response.Header.Get("Retry-After"), want)
			}
			var seen int64
			for _, g := range gws {
				seen += g.requests.Load()
			}
			if seen != k+limit {
				t.Errorf("the gateways saw %d requests for %d steps; want %d (no retry)", seen, k+limit, k+limit)
			}
		})
	}
}

// TestLoopAnthropicShape: a loop on the Messages API (tool_use and
// tool_result blocks with fresh ids) is refused at its 6th step in
// Anthropic's error shape: 403 permission_error, the evidence in the
// message, x-should-retry: false.
func TestLoopAnthropicShape(t *testing.T) {
	gw := newSessionGateway(t, loopFile("enforce"), nil)
	for i := 1; i <= 6; i++ {
		id := fmt.Sprintf("toolu_%d", i)
		body := `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"Weather?"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"` + id + `","name":"get_weather","input":{"city":"Paris"}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":"Rain"}]}]}`
		req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/messages", strings.NewReader(body))
		req.Header.Set("X-Api-Key", "sk-acme")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-Id", "claude-run")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		switch {
		case i < 6 && resp.StatusCode != 200:
			t.Fatalf("step %d: %d %+v; want 200", i, resp.StatusCode, e)
		case i == 6 && (resp.StatusCode != 403 || e.Type != "error" || e.Error.Type != "permission_error" ||
			!strings.Contains(e.Error.Message, "Loop detected (policy loops): this session made the same step (tool get_weather) more than 5 times") ||
			resp.Header.Get("X-Should-Retry") != "false"):
			t.Errorf("step 6: %d %+v, x-should-retry %q; want 403 permission_error with the loop's evidence", resp.StatusCode, e, resp.Header.Get("X-Should-Retry"))
		}
	}
}

// TestRequestLogKeepsSteps: with a request log written and no loop policy
// in force, each model call of a session is logged with its step's
// fingerprint, the same for the same step, so a replay can try a loop
// policy on the traffic; a call without a session has none.
func TestRequestLogKeepsSteps(t *testing.T) {
	s, rl, path := responsesStack(t, responsesPolicy, nil)
	send := func(session, content string) {
		t.Helper()
		body := `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"` + content + `"}]}`
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if session != "" {
			req.Header.Set("X-Session-Id", session)
		}
		if resp, b := s.do(t, req, keyA); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	send("run-1", "list the files")
	send("run-1", "list  the FILES") // the same step, normalised
	send("run-1", "read main.go")
	send("", "list the files")
	recs := logged(t, rl, path, "POST /v1/chat/completions", s.srv)
	if len(recs) != 4 {
		t.Fatalf("%d records; want 4", len(recs))
	}
	if recs[0].Fingerprint.IsZero() || recs[0].Fingerprint != recs[1].Fingerprint || recs[2].Fingerprint == recs[0].Fingerprint || !recs[3].Fingerprint.IsZero() {
		t.Errorf("fingerprints %x %x %x %x; want the first two equal, the third another, the sessionless one none",
			recs[0].Fingerprint, recs[1].Fingerprint, recs[2].Fingerprint, recs[3].Fingerprint)
	}
}
