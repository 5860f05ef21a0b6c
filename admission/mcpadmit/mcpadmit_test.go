package mcpadmit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/mcpadmit"
)

// keys are the API keys of the tests' tenants.
var keys = apikey.Table{
	apikey.Sum("sk-acme"):   {Tenant: "acme", KeyID: "k1"},
	apikey.Sum("sk-globex"): {Tenant: "globex", KeyID: "k2"},
}

// fixture is a go-sdk MCP server behind the middleware, over streamable
// HTTP on loopback, built from a policy file; its tool "slow" waits for
// release, its other tools answer at once.
type fixture struct {
	mw      *mcpadmit.Middleware
	url     string
	entered chan struct{}
	left    chan struct{}
	release chan struct{}
}

func newFixture(t *testing.T, policy string, opts ...mcpadmit.Option) *fixture {
	t.Helper()
	f, err := config.Parse("mcp.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config, admission.WithClock(admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	mw, err := mcpadmit.New(ctl, append(append(fileOptions(f), mcpadmit.WithIdentityConfig(httpadmit.IdentityConfig{Keys: keys, RequireKey: true})), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixture{mw: mw, entered: make(chan struct{}, 16), left: make(chan struct{}, 16), release: make(chan struct{})}
	server := mcp.NewServer(&mcp.Implementation{Name: "files", Version: "1"}, nil)
	answer := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	}
	schema := json.RawMessage(`{"type":"object"}`)
	for _, name := range []string{"search", "write_file", "undeclared"} {
		server.AddTool(&mcp.Tool{Name: name, InputSchema: schema}, answer)
	}
	server.AddTool(&mcp.Tool{Name: "slow", InputSchema: schema}, func(ctx context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		fx.entered <- struct{}{}
		defer func() { fx.left <- struct{}{} }()
		select {
		case <-fx.release:
		case <-ctx.Done():
		}
		return answer(ctx, r)
	})
	server.AddTool(&mcp.Tool{Name: "boom", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		panic("tool bug")
	})
	// Outside the admission, a recovery turns the panic of boom into an
	// error, as a server that keeps serving after a handler bug does.
	recovery := func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			defer func() {
				if recover() != nil {
					err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "tool panicked"}
				}
			}()
			return next(ctx, method, req)
		}
	}
	server.AddReceivingMiddleware(recovery, mw.Wrap)
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(srv.Close)
	fx.url = srv.URL
	return fx
}

// fileOptions returns the options a policy file sets: its tools and its
// budgets.
func fileOptions(f *config.File) []mcpadmit.Option {
	var budgets []string
	for i, p := range f.Policies {
		if p.Budget {
			budgets = append(budgets, f.Config.Policies[i].Name)
		}
	}
	return []mcpadmit.Option{mcpadmit.WithTools(&f.Tools), mcpadmit.WithBudgets(budgets...)}
}

// apply installs the policy file src as a reload does.
func (fx *fixture) apply(t *testing.T, src string) {
	t.Helper()
	f, err := config.Parse("reloaded.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := fx.mw.Apply(f.Config, fileOptions(f)...); err != nil {
		t.Fatal(err)
	}
}

// keyTransport adds an API key to each request.
type keyTransport struct{ key string }

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens an MCP session with the SDK's client as the holder of key.
func (fx *fixture) connect(t *testing.T, key string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: fx.url, HTTPClient: &http.Client{Transport: keyTransport{key}}, DisableStandaloneSSE: true, MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls tool and returns the refusal's error and data, or nil.
func call(t *testing.T, cs *mcp.ClientSession, tool string) (*jsonrpc.Error, *mcpadmit.ErrorData) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"path": "a.txt"}})
	if err == nil {
		if res.IsError {
			t.Fatalf("CallTool(%s) = tool error %+v", tool, res.Content)
		}
		return nil, nil
	}
	var je *jsonrpc.Error
	if !errors.As(err, &je) {
		t.Fatalf("CallTool(%s) = %v; want a JSON-RPC error", tool, err)
	}
	var d mcpadmit.ErrorData
	if err := json.Unmarshal(je.Data, &d); err != nil {
		t.Fatalf("CallTool(%s): error data %s: %v", tool, je.Data, err)
	}
	return je, &d
}

const tools = "version: 1\ntools:\n  - {name: search}\n  - {name: slow}\n  - {name: write_file, cost: 5, write: true}\npolicies:\n"

// TestToolRateLimit: a lower limit for the tools marked as writes
// refuses the third write with CodeLimited and its retry hint, while
// reads pass; the limit is per tenant.
func TestToolRateLimit(t *testing.T) {
	fx := newFixture(t, tools+"  - {name: writes, match: {tools: ['@writes']}, key: [tenant], algorithm: token_bucket, limit: 2, per: 1h}\n")
	acme := fx.connect(t, "sk-acme")
	for i := range 2 {
		if je, _ := call(t, acme, "write_file"); je != nil {
			t.Fatalf("write %d refused: %v", i, je)
		}
	}
	je, d := call(t, acme, "write_file")
	if je == nil {
		t.Fatal("third write admitted; want refused by policy writes")
	}
	want := mcpadmit.ErrorData{Policy: "writes", Reason: "rate", Retryable: true, RetryAfterMs: 1_800_000, Limit: 2, Unit: "requests", Remaining: 0}
	if je.Code != mcpadmit.CodeLimited || *d != want {
		t.Errorf("third write = code %d, data %+v; want %d, %+v", je.Code, *d, mcpadmit.CodeLimited, want)
	}
	if je.Message != "Limit of 2 requests per 1h0m0s reached (policy writes, rate): retry after 30m0s." {
		t.Errorf("message = %q", je.Message)
	}
	for i := range 5 {
		if je, _ := call(t, acme, "search"); je != nil {
			t.Fatalf("search %d refused: %v", i, je)
		}
	}
	if je, _ := call(t, fx.connect(t, "sk-globex"), "write_file"); je != nil {
		t.Errorf("globex's first write refused by acme's limit: %v", je)
	}
}

// TestToolConcurrency: a concurrency cap on a tool refuses the call past
// it while the others run, and the permits come back when they return.
func TestToolConcurrency(t *testing.T) {
	fx := newFixture(t, tools+"  - {name: slow-cap, match: {tools: [slow]}, key: [tenant], algorithm: concurrency, limit: 2, retry_hint: 250ms}\n")
	cs := fx.connect(t, "sk-acme")
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if je, _ := call(t, cs, "slow"); je != nil {
				t.Errorf("a call under the cap refused: %v", je)
			}
		})
	}
	<-fx.entered
	<-fx.entered
	je, d := call(t, cs, "slow")
	if je == nil || je.Code != mcpadmit.CodeLimited || d.Reason != "concurrency" || d.RetryAfterMs != 250 || d.Limit != 2 {
		t.Errorf("third parallel call = %v %+v; want CodeLimited, concurrency, retry_after_ms 250, limit 2", je, d)
	}
	if je, _ := call(t, cs, "search"); je != nil {
		t.Errorf("another tool refused by the cap of slow: %v", je)
	}
	close(fx.release)
	wg.Wait()
	if je, _ := call(t, cs, "slow"); je != nil {
		t.Errorf("call after the others returned refused: %v (permits not released)", je)
	}
}

// TestToolCost: each tool is charged its declared cost in unit cost, an
// undeclared tool 1; a call whose cost exceeds the limit is final.
func TestToolCost(t *testing.T) {
	fx := newFixture(t, tools+"  - {name: tool-spend, match: {mcp_methods: [tools/call]}, key: [tenant], unit: cost, algorithm: quota, per: 1h, limit: 11}\n"+
		"  - {name: tiny, match: {tools: [__other__]}, key: [tenant], unit: cost, algorithm: token_bucket, per: 1h, limit: 1}\n")
	cs := fx.connect(t, "sk-acme")
	for _, tool := range []string{"write_file", "write_file", "undeclared"} { // 5 + 5 + 1
		if je, _ := call(t, cs, tool); je != nil {
			t.Fatalf("%s refused: %v", tool, je)
		}
	}
	je, d := call(t, cs, "search")
	if je == nil || d.Policy != "tool-spend" || d.Reason != "quota" || d.Remaining != 0 || d.Unit != "cost" {
		t.Errorf("search after 11 of cost spent = %v %+v; want refused by tool-spend (quota, cost, remaining 0)", je, d)
	}
}

// TestSessionBudget: a session's budget of steps counts each tool call
// as one step; the call past it is refused as final (CodeFinal, not
// retryable, no retry hint), and another session starts its own budget.
func TestSessionBudget(t *testing.T) {
	fx := newFixture(t, tools+"  - {name: session-steps, key: [tenant, session], unit: steps, algorithm: quota, per: 7d, limit: 3, budget: true}\n")
	cs := fx.connect(t, "sk-acme")
	for i := range 3 {
		if je, _ := call(t, cs, "search"); je != nil {
			t.Fatalf("step %d refused: %v", i, je)
		}
	}
	je, d := call(t, cs, "write_file")
	want := mcpadmit.ErrorData{Policy: "session-steps", Reason: "budget", Limit: 3, Unit: "steps"}
	if je == nil || je.Code != mcpadmit.CodeFinal || *d != want {
		t.Fatalf("fourth step = %v %+v; want CodeFinal, %+v", je, d, want)
	}
	if je.Message != "Budget of 3 steps used (policy session-steps): this session can make no more calls." {
		t.Errorf("message = %q", je.Message)
	}
	if raw := string(je.Data); raw != `{"policy":"session-steps","reason":"budget","retryable":false,"limit":3,"unit":"steps","remaining":0}` {
		t.Errorf("data = %s", raw)
	}
	if je, _ := call(t, fx.connect(t, "sk-acme"), "search"); je != nil {
		t.Errorf("a new session refused by another session's budget: %v", je)
	}
}

// TestUnknownKey: a caller whose API key is not in the table is refused
// before any policy counts it, from its first request (initialize) on.
func TestUnknownKey(t *testing.T) {
	fx := newFixture(t, tools+"  - {name: all, key: [tenant], algorithm: token_bucket, limit: 100, per: 1h}\n")
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	_, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: fx.url, HTTPClient: &http.Client{Transport: keyTransport{"sk-nobody"}}, DisableStandaloneSSE: true, MaxRetries: -1,
	}, nil)
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != mcpadmit.CodeUnauthenticated || len(je.Data) != 0 {
		t.Errorf("initialize with an unknown key = %v; want CodeUnauthenticated without data", err)
	}
}

// TestPermitReleasedOnPanicAndCancel: a permit is held exactly while its
// work runs: a handler that panics, or whose caller cancels the call,
// gives its concurrency permit back.
func TestPermitReleasedOnPanicAndCancel(t *testing.T) {
	fx := newFixture(t, tools+"  - {name: one-at-a-time, match: {mcp_methods: [tools/call]}, key: [tenant], algorithm: concurrency, limit: 1}\n")
	cs := fx.connect(t, "sk-acme")
	for i := range 3 {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "boom"})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInternalError {
			t.Fatalf("call %d of the panicking tool = %v; want the recovered panic (a refusal means its permit leaked)", i, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow"})
		done <- err
	}()
	<-fx.entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call = %v; want context.Canceled", err)
	}
	<-fx.left // the server saw the cancellation and the handler returned
	for {
		je, _ := call(t, cs, "search")
		if je == nil {
			break
		}
		if je.Code != mcpadmit.CodeLimited {
			t.Fatalf("call after the cancel = %v", je)
		}
		time.Sleep(time.Millisecond) // the release follows the handler's return
	}
}

// TestSessionsLimited: initialize is admitted like the other requests,
// so a policy can bound the sessions a tenant opens on the server.
func TestSessionsLimited(t *testing.T) {
	fx := newFixture(t, tools+"  - {name: sessions, match: {mcp_methods: [initialize]}, key: [tenant], algorithm: token_bucket, limit: 1, per: 1h}\n")
	fx.connect(t, "sk-acme")
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	_, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: fx.url, HTTPClient: &http.Client{Transport: keyTransport{"sk-acme"}}, DisableStandaloneSSE: true, MaxRetries: -1,
	}, nil)
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != mcpadmit.CodeLimited {
		t.Errorf("second session of acme = %v; want refused with CodeLimited", err)
	}
	fx.connect(t, "sk-globex")
}

// TestToolsFollowReload: a reloaded file's tool declarations and
// policies take effect together on the next call, and the options of
// New (the identity) stay: a tool the first file leaves undeclared is
// counted as __other__; once the next file declares it a write with a
// cost, it is named, priced and limited as such; back to the first
// file, it is __other__ again, its partition of the first file kept.
func TestToolsFollowReload(t *testing.T) {
	const first = "version: 1\ntools:\n  - {name: search}\npolicies:\n" +
		"  - {name: undeclared, match: {tools: [__other__]}, key: [tenant], algorithm: token_bucket, limit: 1, per: 1h}\n"
	const next = "version: 1\ntools:\n  - {name: search}\n  - {name: write_file, cost: 5, write: true}\npolicies:\n" +
		"  - {name: undeclared, match: {tools: [__other__]}, key: [tenant], algorithm: token_bucket, limit: 1, per: 1h}\n" +
		"  - {name: writes, match: {tools: ['@writes']}, key: [tenant], algorithm: token_bucket, limit: 3, per: 1h}\n" +
		"  - {name: spend, match: {mcp_methods: [tools/call]}, key: [tenant], unit: cost, algorithm: quota, per: 1h, limit: 12, budget: true}\n"
	fx := newFixture(t, first)
	cs := fx.connect(t, "sk-acme")
	if je, _ := call(t, cs, "write_file"); je != nil {
		t.Fatalf("first write_file (undeclared, 1 of 1) refused: %v", je)
	}
	fx.apply(t, next)
	for i := range 2 {
		if je, d := call(t, cs, "write_file"); je != nil {
			t.Fatalf("write_file %d after the reload refused: %v %+v (still counted as __other__?)", i, je, d)
		}
	}
	// 10 of 12 spent: the third write (cost 5) exceeds the budget, a
	// final refusal by WithBudgets of the reloaded file.
	je, d := call(t, cs, "write_file")
	if je == nil || je.Code != mcpadmit.CodeFinal || d.Policy != "spend" || d.Reason != "budget" || d.Remaining != 2 {
		t.Errorf("third write_file after the reload = %v %+v; want CodeFinal by spend (budget, remaining 2)", je, d)
	}
	fx.apply(t, first)
	je, d = call(t, cs, "write_file")
	if je == nil || je.Code != mcpadmit.CodeLimited || d.Policy != "undeclared" {
		t.Errorf("write_file back under the first file = %v %+v; want refused by undeclared (its one call spent before the reloads)", je, d)
	}
	if je, _ := call(t, fx.connect(t, "sk-globex"), "write_file"); je != nil {
		t.Errorf("globex's first undeclared call refused: %v", je)
	}
	if _, err := mcp.NewClient(&mcp.Implementation{Name: "anonymous", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: fx.url, DisableStandaloneSSE: true, MaxRetries: -1}, nil); err == nil {
		t.Error("a caller without a key connected after the reloads; want refused (New's identity option kept)")
	}
}

// TestWithServer: a middleware named after an mcp_servers entry is
// matched by that server's policies (match.servers) and priced by its
// tools, never by the policies of another server; a name that cannot be
// a server's is refused.
func TestWithServer(t *testing.T) {
	const src = "version: 1\nmcp_servers:\n" +
		"  files: {url: 'http://files.internal/mcp', tools: [{name: write_file, write: true}]}\n" +
		"  search: {url: 'http://search.internal/mcp', tools: [{name: write_file, write: true}]}\n" +
		"policies:\n" +
		"  - {name: files-writes, match: {servers: [files], tools: ['@writes']}, key: [tenant], algorithm: token_bucket, limit: 1, per: 1h}\n" +
		"  - {name: search-calls, match: {servers: [search]}, key: [tenant], algorithm: token_bucket, limit: 1, per: 1h}\n"
	f, err := config.Parse("servers.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, src, mcpadmit.WithServer("files"), mcpadmit.WithTools(f.MCPTools("files")))
	cs := fx.connect(t, "sk-acme") // initialize: not a tools/call of files, search-calls does not count it
	if je, _ := call(t, cs, "write_file"); je != nil {
		t.Fatalf("first write_file on files refused: %v", je)
	}
	if je, d := call(t, cs, "write_file"); je == nil || d.Policy != "files-writes" {
		t.Errorf("second write_file on files = %v %+v; want refused by files-writes", je, d)
	}
	ctl, _ := admission.New(admission.Config{})
	defer ctl.Close()
	for _, name := range []string{"Files", "default", "a/b", strings.Repeat("x", 33)} {
		if _, err := mcpadmit.New(ctl, mcpadmit.WithServer(name)); err == nil {
			t.Errorf("New(WithServer(%q)) = nil error; want refused", name)
		}
	}
}
