package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/labstack/echo/v4"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/weights"
)

// sessionFile gives each session of a tenant a budget of steps (model
// calls), kept on the store named sessions, and each tenant a quota of
// its own.
func sessionFile(steps, tenantCalls int) string {
	return fmt.Sprintf(`
policies:
  - {name: session-steps, key: [tenant, session], unit: steps, algorithm: quota, per: 7d, limit: %d,
     budget: true, store: sessions, max_partitions: 1000, overflow: reject}
  - {name: tenant-calls, key: [tenant], algorithm: quota, per: 7d, limit: %d}
tenants:
  acme: {api_keys: [%s]}
  globex: {api_keys: [%s]}
identity: {anonymous: deny}
`, steps, tenantCalls, apikey.Sum("sk-acme"), apikey.Sum("sk-globex"))
}

// sessionGateway is a gateway in front of the simulated upstream (both
// API shapes), counting the requests it receives.
type sessionGateway struct {
	url      string
	requests atomic.Int64
}

// newSessionGateway starts a gateway for src whose sessions store is
// store (nil: in memory).
func newSessionGateway(t *testing.T, src string, store *redisstore.Store, tune ...func(*gateway.Config, *upstream.Config)) *sessionGateway {
	t.Helper()
	f, err := config.Parse("sessions.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var sessions backend.Store = memstore.Store{}
	if store != nil {
		sessions = store
	}
	ctl, err := admission.New(f.Config, admission.WithStore("sessions", sessions))
	if err != nil {
		t.Fatal(err)
	}
	est, _ := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	var simCfg upstream.Config
	cfg := gateway.Config{ForwardHeaders: []string{"X-Sim-*"}}
	for _, f := range tune {
		f(&cfg, &simCfg)
	}
	up := httptest.NewServer(upstream.New(simCfg))
	t.Cleanup(up.Close)
	cfg.Upstream, cfg.Anthropic.Upstream = up.URL+"/v1", up.URL+"/v1"
	gw, err := gateway.New(ctl, est, f, cfg, gateway.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	sg := &sessionGateway{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sg.requests.Add(1)
		e.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	sg.url = srv.URL
	return sg
}

// call sends a chat completion as key with body fields extra (JSON,
// without braces) and headers hdr (name, value pairs), and returns the
// status, the error code and the answer's headers.
func (sg *sessionGateway) call(t *testing.T, key, extra string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	body := `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]`
	if extra != "" {
		body += "," + extra
	}
	req, _ := http.NewRequest(http.MethodPost, sg.url+"/v1/chat/completions", strings.NewReader(body+"}"))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error.Code, resp.Header
}

// TestSessionIdentity: where a session comes from (header first, then
// the body), that a refused id is a 400 and not an authentication
// failure, that a session is counted under its tenant, that a request
// without a session is bounded by its tenant's limits alone, and that a
// tenant inventing sessions gets no more than its own quota.
func TestSessionIdentity(t *testing.T) {
	sg := newSessionGateway(t, sessionFile(2, 12), nil)
	long := strings.Repeat("s", 129)
	for i, s := range []struct {
		key, extra string
		hdr        []string
		status     int
		code       string
	}{
		{"sk-acme", "", []string{"X-Session-Id", "run-1"}, 200, ""},
		{"sk-acme", `"metadata":{"session_id":"run-1"}`, nil, 200, ""},                               // the same session, from the body
		{"sk-acme", `"metadata":{"session_id":"run-1"}`, nil, 403, "session_budget_exceeded"},        // its budget of 2 is spent
		{"sk-acme", `"metadata":{"session_id":"run-1"}`, []string{"X-Session-Id", "run-2"}, 200, ""}, // the header wins
		{"sk-globex", "", []string{"Mcp-Session-Id", "run-1"}, 200, ""},                              // another tenant's run-1
		{"sk-acme", `"user":"run-1"`, nil, 200, ""},                                                  // user is not a source by default: no session
		{"sk-acme", `"Metadata":{"session_id":"run-1"}`, nil, 200, ""},                               // field names match exactly: no session
		{"sk-acme", "", []string{"X-Session-Id", "run 3"}, 400, "invalid_session"},
		{"sk-acme", "", []string{"X-Session-Id", long}, 400, "invalid_session"},
		{"sk-acme", "", []string{"X-Session-Id", "a", "X-Session-Id", "b"}, 400, "invalid_session"},
		{"sk-acme", `"metadata":{"session_id":"` + long + `"}`, nil, 400, "invalid_session"},
		{"sk-acme", `"metadata":{"session_id":"a\u0000b"}`, nil, 400, "invalid_session"},
		{"sk-acme", `"metadata":{"session_id":7}`, nil, 400, "invalid_session"},
	} {
		status, code, _ := sg.call(t, s.key, s.extra, s.hdr...)
		if status != s.status || code != s.code {
			t.Errorf("request %d (%s %v): %d %s; want %d %s", i, s.extra, s.hdr, status, code, s.status, s.code)
		}
	}
	// acme has spent 8 of its 12 calls: 5 admitted, and the 3 whose body
	// named a refused session (the request policies are decided before
	// the body is read, as for any refused body; the other refusals took
	// nothing). A flood of invented sessions gets the other 4, no more.
	admitted := 0
	for i := range 50 {
		status, code, _ := sg.call(t, "sk-acme", "", "X-Session-Id", fmt.Sprintf("invented-%d", i))
		switch {
		case status == 200:
			admitted++
		case status == 403 && code == "quota_exceeded":
		default:
			t.Fatalf("invented session %d: %d %s", i, status, code)
		}
	}
	if admitted != 4 {
		t.Errorf("invented sessions admitted %d; want the 4 calls left of the tenant's quota", admitted)
	}
}

// sessionsOn returns a Redis store named sessions on the redis-server at
// addr, with a client of its own, as each replica of a fleet has.
func sessionsOn(t *testing.T, addr string) *redisstore.Store { return redisOn(t, addr, "sessions") }

// redisOn returns a Redis store named name on the redis-server at addr,
// with a client of its own, as each replica of a fleet has.
func redisOn(t *testing.T, addr, name string) *redisstore.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	st, err := redisstore.New(c, redisstore.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSessionBudgetExactUnderConcurrency: parallel calls of one session
// against a budget of B steps admit exactly B, with the budget in memory
// and on a real redis-server shared by two gateways; the others get the
// budget refusal, which says not to retry.
func TestSessionBudgetExactUnderConcurrency(t *testing.T) {
	const budget, calls = 7, 60
	srv := redistest.Start(t)
	store := func() *redisstore.Store { return sessionsOn(t, srv.Addr) }
	for _, tc := range []struct {
		name string
		gws  func() []*sessionGateway
	}{
		{"in memory", func() []*sessionGateway {
			return []*sessionGateway{newSessionGateway(t, sessionFile(budget, 1000), nil)}
		}},
		{"on Redis, two gateways", func() []*sessionGateway {
			return []*sessionGateway{newSessionGateway(t, sessionFile(budget, 1000), store()), newSessionGateway(t, sessionFile(budget, 1000), store())}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gws := tc.gws()
			var ok, refused atomic.Int64
			var wg sync.WaitGroup
			for i := range calls {
				wg.Go(func() {
					status, code, h := gws[i%len(gws)].call(t, "sk-acme", "", "X-Session-Id", "agent-"+tc.name[:2])
					switch {
					case status == 200:
						ok.Add(1)
					case status == 403 && code == "session_budget_exceeded" && h.Get("X-Should-Retry") == "false" && h.Get("Retry-After") == "":
						refused.Add(1)
					default:
						t.Errorf("call %d: %d %s, x-should-retry %q, retry-after %q", i, status, code, h.Get("X-Should-Retry"), h.Get("Retry-After"))
					}
				})
			}
			wg.Wait()
			t.Logf("%s: %d parallel calls against a budget of %d steps: %d admitted, %d refused", tc.name, calls, budget, ok.Load(), refused.Load())
			if ok.Load() != budget || refused.Load() != calls-budget {
				t.Errorf("admitted %d, refused %d; want exactly %d admitted", ok.Load(), refused.Load(), budget)
			}
		})
	}
}

// TestSessionBudgetSDKs: the official OpenAI and Anthropic SDKs, with
// their default retries, make no retry of a budget refusal: the gateway
// sees one request per call. The refusal is in each API's own error
// shape and names the budget.
func TestSessionBudgetSDKs(t *testing.T) {
	ctx := context.Background()
	t.Run("openai-go", func(t *testing.T) {
		sg := newSessionGateway(t, sessionFile(1, 1000), nil)
		c := openai.NewClient(option.WithBaseURL(sg.url+"/v1"), option.WithAPIKey("sk-acme"), option.WithMaxRetries(2))
		params := openai.ChatCompletionNewParams{
			Model:     "gpt-4o",
			MaxTokens: openai.Int(5),
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			Metadata:  shared.Metadata{"session_id": "sdk-run"},
		}
		if _, err := c.Chat.Completions.New(ctx, params); err != nil {
			t.Fatalf("first call: %v", err)
		}
		_, err := c.Chat.Completions.New(ctx, params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("second call: %v; want an API error", err)
		}
		if apiErr.StatusCode != 403 || apiErr.Type != "insufficient_quota" || apiErr.Code != "session_budget_exceeded" ||
			!strings.Contains(apiErr.Message, "Session budget of 1 steps used (policy session-steps)") {
			t.Errorf("refusal = %d %s %s %q; want 403 insufficient_quota session_budget_exceeded naming the budget", apiErr.StatusCode, apiErr.Type, apiErr.Code, apiErr.Message)
		}
		if n := sg.requests.Load(); n != 2 {
			t.Errorf("the gateway saw %d requests for 2 calls; want 2 (no retry)", n)
		}
	})
	t.Run("anthropic-sdk-go", func(t *testing.T) {
		sg := newSessionGateway(t, sessionFile(1, 1000), nil)
		c := anthropic.NewClient(aoption.WithBaseURL(sg.url+"/"), aoption.WithAPIKey("sk-acme"), aoption.WithMaxRetries(2))
		params := anthropic.MessageNewParams{
			Model:     "claude-sonnet-4-5",
			MaxTokens: 5,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
			Metadata:  anthropic.MetadataParam{UserID: anthropic.String("sdk-run")},
		}
		if _, err := c.Messages.New(ctx, params); err != nil {
			t.Fatalf("first call: %v", err)
		}
		_, err := c.Messages.New(ctx, params)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("second call: %v; want an API error", err)
		}
		var body struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(apiErr.RawJSON()), &body); err != nil {
			t.Fatalf("refusal body %q: %v", apiErr.RawJSON(), err)
		}
		if apiErr.StatusCode != 403 || body.Type != "error" || body.Error.Type != "permission_error" ||
			!strings.Contains(body.Error.Message, "Session budget of 1 steps used (policy session-steps)") {
			t.Errorf("refusal = %d %+v; want 403 permission_error naming the budget", apiErr.StatusCode, body)
		}
		if n := sg.requests.Load(); n != 2 {
			t.Errorf("the gateway saw %d requests for 2 calls; want 2 (no retry)", n)
		}
	})
}

// TestSessionBudgetCutsStream: a stream whose session runs out of its
// output-token budget as it goes is cut with a final error event naming
// the budget, and the session's next call is refused.
func TestSessionBudgetCutsStream(t *testing.T) {
	src := fmt.Sprintf(`
policies:
  - {name: session-output, key: [tenant, session], unit: output_tokens, algorithm: quota, per: 7d, limit: 4,
     budget: true, store: sessions}
tenants:
  acme: {api_keys: [%s]}
identity: {anonymous: deny}
`, apikey.Sum("sk-acme"))
	sg := newSessionGateway(t, src, nil, func(g *gateway.Config, u *upstream.Config) {
		g.ChargeInterval, g.MaxOutputReserve, u.TokensPerSecond = time.Millisecond, 1, 200
	})
	// The OpenAI shape carries the budget's code, Anthropic's the type of
	// its 403 (permission_error, which the SDKs do not retry; never
	// rate_limit_error).
	for _, tt := range []struct{ path, model, session, want string }{
		{"/v1/chat/completions", "gpt-4o", "streaming-run", `"code":"session_budget_exceeded"`},
		{"/v1/messages", "claude-sonnet-4-5", "streaming-messages", `"type":"permission_error"`},
	} {
		body := `{"model":"` + tt.model + `","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
		req, _ := http.NewRequest(http.MethodPost, sg.url+tt.path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-acme")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("X-Session-Id", tt.session)
		req.Header.Set("X-Sim-Tokens", "40")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s stream: %d, %v", tt.path, resp.StatusCode, err)
		}
		events := strings.Split(strings.TrimSpace(string(data)), "\n\n")
		last := events[len(events)-1]
		if !strings.Contains(last, tt.want) || !strings.Contains(last, "Session budget of 4 output_tokens used (policy session-output)") {
			t.Errorf("%s: last event %q; want the budget's error event with %s", tt.path, last, tt.want)
		}
	}
	if status, code, _ := sg.call(t, "sk-acme", "", "X-Session-Id", "streaming-run"); status != 403 || code != "session_budget_exceeded" {
		t.Errorf("next call of the session: %d %s; want 403 session_budget_exceeded", status, code)
	}
}
