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
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/mcpadmit"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/shadow/requestlog"
	"github.com/sluicehq/sluice/weights"
)

// mcpFile declares the simulated server's tools, a write tool with a
// lower limit than the reads, and a budget of steps per session that
// model calls and tool calls share.
var mcpFile = fmt.Sprintf(`
tools:
  - {name: search}
  - {name: write_file, cost: 3, write: true}
policies:
  - {name: writes, match: {tools: ['@writes']}, key: [tenant], algorithm: token_bucket, limit: 1, per: 1h}
  - {name: session-steps, key: [tenant, session], unit: steps, algorithm: quota, per: 7d, limit: 5, budget: true,
     max_partitions: 1000, overflow: reject}
tenants:
  acme: {api_keys: [%s]}
  globex: {api_keys: [%s]}
identity: {anonymous: deny}
`, apikey.Sum("sk-acme"), apikey.Sum("sk-globex"))

// mcpGateway is a gateway in front of the simulated model API and the
// simulated MCP server (the go-sdk's), recording what reaches the MCP
// server.
type mcpGateway struct {
	url       string
	route     string           // the MCP route: empty for gateway.OpMCP
	srv       *httptest.Server // the gateway's
	upstream  atomic.Int64     // requests that reached the MCP server
	gets      chan struct{}
	getsOnce  sync.Once
	modelsURL string
}

func newMCPGateway(t *testing.T, opts ...gateway.Option) *mcpGateway {
	t.Helper()
	return newMCPGatewayFile(t, mcpFile, opts...)
}

// newMCPGatewayFile is newMCPGateway under the policy file src.
func newMCPGatewayFile(t *testing.T, src string, opts ...gateway.Option) *mcpGateway {
	t.Helper()
	mg := &mcpGateway{gets: make(chan struct{})}
	mcpUp := countingMCP(t, &mg.upstream, func() { mg.getsOnce.Do(func() { close(mg.gets) }) })
	mg.srv, _ = mcpReplica(t, src, mcpUp.URL+"/mcp", nil, nil, opts...)
	mg.url = mg.srv.URL
	return mg
}

// countingMCP serves the simulated MCP server (the go-sdk's), counting
// the requests that reach it in n and calling onGet (when not nil) for
// each GET.
func countingMCP(t *testing.T, n *atomic.Int64, onGet func()) *httptest.Server {
	t.Helper()
	tools := upstream.NewMCP()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.Method == http.MethodGet && onGet != nil {
			onGet()
		}
		tools.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// mcpReplica serves a gateway under the policy file src in front of the
// MCP server at mcpURL (empty: none at /mcp) and a simulated model API,
// and returns its server and the gateway: the store named sessions is
// sessions (nil: in memory), the session ids it hands out are signed
// with secret (nil: its own).
func mcpReplica(t *testing.T, src, mcpURL string, sessions backend.Store, secret []byte, opts ...gateway.Option) (*httptest.Server, *gateway.Gateway) {
	t.Helper()
	f, err := config.Parse("mcp.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if sessions == nil {
		sessions = memstore.Store{}
	}
	ctl, err := admission.New(f.Config, admission.WithStore("sessions", sessions))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	est, _ := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	models := httptest.NewServer(upstream.New(upstream.Config{}))
	t.Cleanup(models.Close)
	cfg := gateway.Config{Upstream: models.URL + "/v1", MCP: gateway.MCP{Upstream: mcpURL, SessionSecret: secret}}
	gw, err := gateway.New(ctl, est, f, cfg, append(opts, gateway.WithLogger(slog.New(slog.DiscardHandler)))...)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, gw
}

// connect opens an MCP session through the gateway with the go-sdk's
// client, as the holder of key (its standalone event stream on).
func (mg *mcpGateway) connect(t *testing.T, key string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: mg.endpoint(), HTTPClient: &http.Client{Transport: bearer{key}}, MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// endpoint returns the URL of the gateway's MCP route.
func (mg *mcpGateway) endpoint() string {
	if mg.route == "" {
		return mg.url + gateway.OpMCP
	}
	return mg.url + mg.route
}

// bearer adds an API key to each request.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// callTool calls tool through cs and returns the error.
func callTool(cs *mcp.ClientSession, tool string) error {
	args := map[string]any{"query": "q"}
	if tool == upstream.MCPWriteTool {
		args = map[string]any{"path": "a.txt", "content": "hello"}
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err == nil && res.IsError {
		b, _ := json.Marshal(res.Content)
		return fmt.Errorf("tool error: %s", b)
	}
	return err
}

// post sends body to the MCP route as key, in session sid (when not
// empty), and returns the status, the headers and the body.
func (mg *mcpGateway) post(t *testing.T, key, sid string, body io.Reader, length int64) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, mg.endpoint(), body)
	req.ContentLength = length
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// rpcError is a JSON-RPC error response.
type rpcError struct {
	ID    json.RawMessage `json:"id"`
	Error struct {
		Code    int                `json:"code"`
		Message string             `json:"message"`
		Data    mcpadmit.ErrorData `json:"data"`
	} `json:"error"`
}

// TestMCPGateway: the go-sdk's client connects through the gateway
// (initialize, tools/list, tools/call, its GET event stream); a write
// tool over its lower limit is refused with 429 while a read passes;
// the session's budget of steps counts its tool calls and a model call
// made in the same session together, and refuses with 403 and a final
// JSON-RPC error; another tenant cannot use the session.
func TestMCPGateway(t *testing.T) {
	mg := newMCPGateway(t)
	cs := mg.connect(t, "sk-acme")
	sid := cs.ID()
	if !apikey.ValidSession(sid, apikey.DefaultMaxSessionLength) || !strings.Contains(sid, ".") {
		t.Fatalf("session id %q; want the upstream's, signed for the tenant", sid)
	}
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(list.Tools) != 2 {
		t.Fatalf("ListTools = %v, %v; want the two simulated tools", list, err)
	}
	<-mg.gets // the client's event stream reached the server through the gateway
	if err := callTool(cs, upstream.MCPSearchTool); err != nil {
		t.Fatalf("step 1, search: %v", err)
	}
	if err := callTool(cs, upstream.MCPWriteTool); err != nil {
		t.Fatalf("step 2, write_file: %v", err)
	}
	// The second write is over the writes limit (1 an hour): 429, which
	// the go-sdk's client reports as a rejected, transient call.
	before := mg.upstream.Load()
	err = callTool(cs, upstream.MCPWriteTool)
	if err == nil || !strings.Contains(err.Error(), "Too Many Requests") {
		t.Fatalf("second write = %v; want 429 Too Many Requests", err)
	}
	// The same refusal seen on the wire: 429, Retry-After, the JSON-RPC
	// error with the request's id and the retry hint in data.
	status, h, body := mg.post(t, "sk-acme", sid, strings.NewReader(`{"jsonrpc":"2.0","id":"w-7","method":"tools/call","params":{"name":"write_file","arguments":{"path":"b","content":"x"}}}`), -1)
	var re rpcError
	if err := json.Unmarshal(body, &re); err != nil {
		t.Fatalf("refusal body %s: %v", body, err)
	}
	d := re.Error.Data
	if status != http.StatusTooManyRequests || h.Get("Retry-After") == "" || string(re.ID) != `"w-7"` || re.Error.Code != mcpadmit.CodeLimited ||
		d.Policy != "writes" || d.Reason != "rate" || !d.Retryable || d.RetryAfterMs <= 0 {
		t.Errorf("raw write = %d, Retry-After %q, %s; want 429 with a retry hint and CodeLimited by writes", status, h.Get("Retry-After"), body)
	}
	if n := mg.upstream.Load() - before; n != 0 {
		t.Errorf("%d refused calls reached the MCP server", n)
	}
	if err := callTool(cs, upstream.MCPSearchTool); err != nil {
		t.Fatalf("step 3, search after the refused write: %v", err)
	}
	// Step 4: a model call in the same session.
	req, _ := http.NewRequest(http.MethodPost, mg.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer sk-acme")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("model call in the session = %d; want 200", resp.StatusCode)
	}
	if err := callTool(cs, upstream.MCPSearchTool); err != nil {
		t.Fatalf("step 5, search: %v", err)
	}
	// Step 6 is over the budget of 5: 403, a final JSON-RPC error that
	// the go-sdk's client decodes.
	err = callTool(cs, upstream.MCPSearchTool)
	var je *jsonrpc.Error
	if !errors.As(err, &je) {
		t.Fatalf("step 6 = %v; want the budget's JSON-RPC error", err)
	}
	var bd mcpadmit.ErrorData
	_ = json.Unmarshal(je.Data, &bd)
	if je.Code != mcpadmit.CodeFinal || bd.Policy != "session-steps" || bd.Reason != "budget" || bd.Retryable || bd.RetryAfterMs != 0 ||
		je.Message != "Budget of 5 steps used (policy session-steps): this session can make no more calls." {
		t.Errorf("step 6 = %d %q %+v; want CodeFinal, the session budget, not retryable", je.Code, je.Message, bd)
	}
	status, h, _ = mg.post(t, "sk-acme", sid, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"search"}}`), -1)
	if status != http.StatusForbidden || h.Get("X-Should-Retry") != "false" || h.Get("Retry-After") != "" {
		t.Errorf("raw step 6 = %d, x-should-retry %q, Retry-After %q; want 403, false, none", status, h.Get("X-Should-Retry"), h.Get("Retry-After"))
	}
	// Another tenant presenting the session is refused as an unknown
	// session; its own session has its own budget.
	status, _, _ = mg.post(t, "sk-globex", sid, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"}}`), -1)
	if status != http.StatusNotFound {
		t.Errorf("globex with acme's session = %d; want 404", status)
	}
	if err := callTool(mg.connect(t, "sk-globex"), upstream.MCPSearchTool); err != nil {
		t.Errorf("globex's own session: %v", err)
	}
}

// TestMCPHostile: what a hostile client sends is refused before the
// controller or the MCP server sees it: a body over the cap (announced
// or not), JSON nested past the decoder's depth, a forged or malformed
// session id, a batch of 10,000 calls, a tool name with a repeated or
// case-variant key. None of it spends a step.
func TestMCPHostile(t *testing.T) {
	mg := newMCPGateway(t)
	cs := mg.connect(t, "sk-acme")
	sid := cs.ID()
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"query":"x"}}}`
	var batch strings.Builder
	batch.WriteString("[")
	for i := range 10_000 {
		if i > 0 {
			batch.WriteString(",")
		}
		fmt.Fprintf(&batch, call, i)
	}
	batch.WriteString("]")
	huge := strings.Repeat("x", gateway.DefaultMCPMaxBody+1)
	deep := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":` + strings.Repeat("[", 200_000) + strings.Repeat("]", 200_000) + `}}}`
	before := mg.upstream.Load()
	for _, tc := range []struct {
		name, sid, body string
		length          int64
		status          int
	}{
		{"announced huge body", sid, huge, int64(len(huge)), http.StatusRequestEntityTooLarge},
		{"chunked huge body", sid, huge, -1, http.StatusRequestEntityTooLarge},
		{"deep JSON", sid, deep, -1, http.StatusBadRequest},
		{"batch of 10,000 calls", sid, batch.String(), -1, http.StatusBadRequest},
		{"repeated name", sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","name":"write_file"}}`, -1, http.StatusBadRequest},
		{"case variant", sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","Name":"write_file"}}`, -1, http.StatusBadRequest},
		{"bad tool name", sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a b"}}`, -1, http.StatusBadRequest},
		{"not JSON", sid, `{"jsonrpc":`, -1, http.StatusBadRequest},
		{"empty batch", sid, `[]`, -1, http.StatusBadRequest},
		{"forged session", "0123456789." + strings.Repeat("A", 22), fmt.Sprintf(call, 1), -1, http.StatusNotFound},
		{"session with a space", "a b", fmt.Sprintf(call, 1), -1, http.StatusBadRequest},
	} {
		var body io.Reader = strings.NewReader(tc.body)
		if tc.length < 0 {
			body = io.MultiReader(body) // no length: sent chunked
		}
		if status, _, data := mg.post(t, "sk-acme", tc.sid, body, tc.length); status != tc.status {
			t.Errorf("%s = %d %.200s; want %d", tc.name, status, data, tc.status)
		}
	}
	if n := mg.upstream.Load() - before; n != 0 {
		t.Errorf("%d hostile requests reached the MCP server", n)
	}
	for i := range 5 { // the whole budget of 5 steps is left
		if err := callTool(cs, upstream.MCPSearchTool); err != nil {
			t.Fatalf("step %d after the hostile requests: %v", i+1, err)
		}
	}
}

// TestMCPBatchRefusedWhole: a batch is admitted whole or refused whole:
// when one of its calls is over a limit, each of its requests gets the
// refusal, and what the others took is given back.
func TestMCPBatchRefusedWhole(t *testing.T) {
	mg := newMCPGateway(t)
	cs := mg.connect(t, "sk-acme")
	before := mg.upstream.Load()
	status, h, body := mg.post(t, "sk-acme", cs.ID(), strings.NewReader(`[
		{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"a"}}},
		{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"a","content":"b"}}},
		{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}},
		{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"a","content":"b"}}}]`), -1)
	var errs []rpcError
	if err := json.Unmarshal(body, &errs); err != nil {
		t.Fatalf("batch refusal %s: %v", body, err)
	}
	if status != http.StatusTooManyRequests || h.Get("Retry-After") == "" || len(errs) != 3 {
		t.Fatalf("batch = %d %s; want 429 and one error per request", status, body)
	}
	for i, e := range errs {
		if want := fmt.Sprint(i + 1); string(e.ID) != want || e.Error.Code != mcpadmit.CodeLimited || e.Error.Data.Policy != "writes" {
			t.Errorf("error %d = id %s, code %d, policy %s; want id %s, CodeLimited, writes", i, e.ID, e.Error.Code, e.Error.Data.Policy, want)
		}
	}
	if n := mg.upstream.Load() - before; n != 0 {
		t.Errorf("the refused batch reached the MCP server (%d requests)", n)
	}
	// Nothing of the batch was spent: the write it admitted, and the 5
	// steps of the session.
	if err := callTool(cs, upstream.MCPWriteTool); err != nil {
		t.Fatalf("write after the refused batch: %v", err)
	}
	for i := range 4 {
		if err := callTool(cs, upstream.MCPSearchTool); err != nil {
			t.Fatalf("step %d after the refused batch: %v", i+2, err)
		}
	}
}

// TestMCPToolLabels: the per-tool figures name the tools the policy
// file declares; any other tool is __other__, however many names a
// client invents.
func TestMCPToolLabels(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mg := newMCPGateway(t, gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	cs := mg.connect(t, "sk-acme")
	if err := callTool(cs, upstream.MCPSearchTool); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // the simulated server answers each with a tool error
		cs.CallTool(context.Background(), &mcp.CallToolParams{Name: fmt.Sprintf("invented_%d", i)})
	}
	if got := sumCounter(t, reader, "llmproxy.mcp.requests", "tool"); got["search"] != 1 || got["__other__"] != 3 || got[""] != 1 || len(got) != 3 {
		t.Errorf("llmproxy.mcp.requests by tool = %v; want search 1, __other__ 3, and no tool for the initialize", got)
	}
}

// TestMCPToolCallLoop: a session that calls the same tool with the same
// arguments (in any key order) over and over is refused by a loop policy
// at the first call over its limit, with a final JSON-RPC error naming
// the loop, while the same tool with other arguments still passes.
func TestMCPToolCallLoop(t *testing.T) {
	src := strings.Replace(mcpFile, "policies:\n", "policies:\n"+
		"  - {name: loops, key: [tenant, session, fingerprint], algorithm: sliding_log, limit: 2, per: 2m, max_partitions: 1000, overflow: evict}\n", 1)
	mg := newMCPGatewayFile(t, src)
	cs := mg.connect(t, "sk-acme")
	call := func(args map[string]any) error {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "search", Arguments: args})
		return err
	}
	if err := call(map[string]any{"query": "weather", "city": "Paris"}); err != nil {
		t.Fatal(err)
	}
	if err := call(map[string]any{"city": "Paris", "query": "weather"}); err != nil {
		t.Fatal(err)
	}
	err := call(map[string]any{"query": "weather", "city": "Paris"})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != mcpadmit.CodeFinal || !strings.Contains(je.Message, "Loop detected (policy loops)") {
		t.Fatalf("third identical call: %v; want the final JSON-RPC error of a loop", err)
	}
	if err := call(map[string]any{"query": "weather", "city": "Lyon"}); err != nil {
		t.Errorf("the same tool with other arguments: %v; want served", err)
	}
}

// TestMCPSessionBudgetOnRedis: one agent session's tool calls, sent in
// parallel to two gateway replicas sharing a redis-server (and the secret
// that signs session ids), spend its budget of steps exactly: as many
// calls are served as the budget holds, the others refused with 403 and
// a final JSON-RPC error.
func TestMCPSessionBudgetOnRedis(t *testing.T) {
	const budget, calls = 7, 40
	src := fmt.Sprintf(`
tools:
  - {name: search}
policies:
  - {name: session-steps, key: [tenant, session], unit: steps, algorithm: quota, per: 7d, limit: %d,
     budget: true, store: sessions, max_partitions: 1000, overflow: reject}
tenants:
  acme: {api_keys: [%s]}
identity: {anonymous: deny}
`, budget, apikey.Sum("sk-acme"))
	srv := redistest.Start(t)
	store := func() *redisstore.Store { return sessionsOn(t, srv.Addr) }
	mcpUp := httptest.NewServer(upstream.NewMCP())
	t.Cleanup(mcpUp.Close)
	secret := []byte("one secret for the fleet")
	first, _ := mcpReplica(t, src, mcpUp.URL+"/mcp", store(), secret)
	second, _ := mcpReplica(t, src, mcpUp.URL+"/mcp", store(), secret)
	replicas := []*mcpGateway{{url: first.URL}, {url: second.URL}}
	cs := replicas[0].connect(t, "sk-acme") // initialize: the session, signed
	sid := cs.ID()
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			body := `{"jsonrpc":"2.0","id":` + strconv.Itoa(100+i) + `,"method":"tools/call","params":{"name":"search","arguments":{"query":"q` + strconv.Itoa(i) + `"}}}`
			status, _, data := replicas[i%2].post(t, "sk-acme", sid, strings.NewReader(body), int64(len(body)))
			var e rpcError
			switch {
			case status == 200:
				ok.Add(1)
			case status == 403 && json.Unmarshal(data, &e) == nil && e.Error.Code == mcpadmit.CodeFinal && !e.Error.Data.Retryable:
				refused.Add(1)
			default:
				t.Errorf("call %d: %d %s", i, status, data)
			}
		})
	}
	wg.Wait()
	t.Logf("%d parallel tool calls of one session through two replicas on Redis, budget %d steps: %d served, %d refused", calls, budget, ok.Load(), refused.Load())
	if ok.Load() != budget || refused.Load() != calls-budget {
		t.Errorf("served %d, refused %d; want exactly %d served", ok.Load(), refused.Load(), budget)
	}
}

// TestMCPRequestLog: MCP requests are in the request log as model calls
// are, admitted and refused, with their operation, session, step and
// fingerprint, so a replay decides them as live.
func TestMCPRequestLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	mg := newMCPGateway(t, gateway.WithRequestLog(rl))
	cs := mg.connect(t, "sk-acme")
	if err := callTool(cs, "search"); err != nil {
		t.Fatal(err)
	}
	if err := callTool(cs, upstream.MCPWriteTool); err != nil {
		t.Fatal(err)
	}
	if err := callTool(cs, upstream.MCPWriteTool); err == nil {
		t.Fatal("the second write was served; want the writes limit of 1 to refuse it")
	}
	sid := cs.ID()
	cs.Close() // its event stream ends, so the gateway's server can close
	search := logged(t, rl, path, "mcp tools/call search", mg.srv)
	writes := logged(t, rl, path, "mcp tools/call write_file", mg.srv)
	if len(search) != 1 || len(writes) != 2 {
		t.Fatalf("logged %d searches, %d writes; want 1 and 2 (one refused)", len(search), len(writes))
	}
	r := search[0]
	if r.Tenant != "acme" || r.Session != sid || r.Fingerprint.IsZero() || len(r.Units) != 1 || r.Units[0].Unit != "steps" {
		t.Errorf("search record %+v; want acme's, in the session, with its step and fingerprint", r.Request)
	}
	if writes[0].Duration == 0 && writes[1].Duration == 0 {
		t.Errorf("writes %+v; want the admitted one with its duration", writes)
	}
}

// mcpServersFile declares two upstream MCP servers, files and web, both
// with a tool named search; web declares no write_file. The policy on
// files' writes does not touch web.
const mcpServersFile = `
mcp_servers:
  files: {url: '%[1]s', tools: [{name: search}, {name: write_file, cost: 3, write: true}]}
  %[2]s: {url: '%[3]s', tools: [{name: search}]}
policies:
  - {name: file-writes, match: {servers: [files], tools: ['@writes']}, key: [tenant], algorithm: token_bucket, limit: 1, per: 1h}
  - {name: web-calls, match: {servers: [%[2]s]}, key: [tenant, operation], algorithm: token_bucket, limit: 100, per: 1h}
tenants:
  acme: {api_keys: [%[4]s]}
identity: {anonymous: deny}
`

// TestMCPServers: one gateway in front of two simulated MCP servers
// (the go-sdk's), each served at /mcp/{name} to the go-sdk's client. A
// policy on one server's writes refuses its second write_file while the
// other server's calls of a tool of the same name pass; each request
// reaches its own server; a session id of one server is refused on the
// other (404, nothing reaches it), a server the file does not declare is
// a 404; the request log names the server in each operation; a reload
// that renames a server serves the new name and refuses the old one.
func TestMCPServers(t *testing.T) {
	var filesN, webN atomic.Int64
	files := countingMCP(t, &filesN, nil)
	web := countingMCP(t, &webN, nil)
	src := func(webName string) string {
		return fmt.Sprintf(mcpServersFile, files.URL+"/mcp", webName, web.URL+"/mcp", apikey.Sum("sk-acme"))
	}
	file := func(webName string) *config.File {
		f, err := config.Parse("servers.yaml", []byte(src(webName)))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	srv, gw := mcpReplica(t, src("web"), "", nil, nil, gateway.WithRequestLog(rl))
	at := func(server string) *mcpGateway { return &mcpGateway{url: srv.URL, route: gateway.OpMCP + "/" + server} }
	filesCS, webCS := at("files").connect(t, "sk-acme"), at("web").connect(t, "sk-acme")

	if err := callTool(filesCS, upstream.MCPWriteTool); err != nil {
		t.Fatalf("first write_file on files: %v", err)
	}
	if err := callTool(filesCS, upstream.MCPWriteTool); err == nil {
		t.Error("second write_file on files served; want refused by file-writes (1 per hour)")
	}
	for i := range 3 {
		if err := callTool(webCS, upstream.MCPWriteTool); err != nil {
			t.Fatalf("write_file %d on web: %v (refused by the policy of files?)", i, err)
		}
		if err := callTool(webCS, upstream.MCPSearchTool); err != nil {
			t.Fatalf("search %d on web: %v", i, err)
		}
	}
	if err := callTool(filesCS, upstream.MCPSearchTool); err != nil {
		t.Fatalf("search on files: %v", err)
	}

	// A session of files presented on web, or on an undeclared server,
	// never reaches an upstream.
	before := webN.Load() + filesN.Load()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"q"}}}`
	for _, route := range []string{"web", "nope", "Files", "files/x"} {
		status, _, data := at(route).post(t, "sk-acme", filesCS.ID(), strings.NewReader(body), int64(len(body)))
		if status != http.StatusNotFound {
			t.Errorf("POST /mcp/%s with files' session = %d %s; want 404", route, status, data)
		}
	}
	if status, _, _ := (&mcpGateway{url: srv.URL}).post(t, "sk-acme", "", strings.NewReader(body), int64(len(body))); status != http.StatusNotFound {
		t.Errorf("POST /mcp without an unnamed server = %d; want 404", status)
	}
	if n := webN.Load() + filesN.Load(); n != before {
		t.Errorf("%d refused requests reached an upstream MCP server", n-before)
	}
	if filesN.Load() == 0 || webN.Load() == 0 {
		t.Errorf("requests reaching files %d, web %d; want each server its own", filesN.Load(), webN.Load())
	}

	// A reload renames web to search: the new name is served, the old
	// one is gone.
	if err := gw.Apply(file("search")); err != nil {
		t.Fatal(err)
	}
	searchCS := at("search").connect(t, "sk-acme")
	if err := callTool(searchCS, upstream.MCPSearchTool); err != nil {
		t.Errorf("search on the server the reload added: %v", err)
	}
	searchCS.Close() // its event stream ends, so the gateway's server can close
	if status, _, _ := at("web").post(t, "sk-acme", "", strings.NewReader(body), int64(len(body))); status != http.StatusNotFound {
		t.Errorf("POST /mcp/web after the reload removed it = %d; want 404", status)
	}
	if err := gw.Apply(file("web")); err != nil {
		t.Fatal(err)
	}
	filesCS.Close()
	webCS.Close()
	writes := logged(t, rl, path, "mcp/files tools/call write_file", srv)
	other := readLog(t, path, "mcp/web tools/call __other__")
	searches := readLog(t, path, "mcp/web tools/call search")
	if len(writes) != 2 || len(other) != 3 || len(searches) != 3 {
		t.Errorf("request log: %d files writes, %d web __other__, %d web searches; want 2 (one refused), 3, 3", len(writes), len(other), len(searches))
	}
}
