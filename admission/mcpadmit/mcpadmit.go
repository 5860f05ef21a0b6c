// Package mcpadmit admits the requests an MCP server receives (tool
// calls, resource reads, prompt gets) through an admission.Controller,
// as a receiving middleware of the official Go SDK
// (github.com/modelcontextprotocol/go-sdk):
//
//	mw, _ := mcpadmit.New(ctl, mcpadmit.WithTools(&f.Tools), mcpadmit.WithBudgets(budgets...))
//	server := mcp.NewServer(&mcp.Implementation{Name: "files", Version: "1"}, nil)
//	server.AddReceivingMiddleware(mw.Wrap)
//
// Each request of a method in limits.MCPMethods is one admission.Request:
//
//   - Operation: limits.MCPOperation(server, method, tool), "mcp
//     tools/call search" for a call of the declared tool search
//     ("__other__" for a tool WithTools does not declare), "mcp
//     resources/read" for a read, "mcp/files tools/call write_file" for
//     a server named files (WithServer); policies match it with
//     match.servers, match.tools and match.mcp_methods.
//   - Session: the MCP session id, which a policy keyed by session counts
//     under the tenant.
//   - Tenant, key id and user: from the HTTP request behind the session,
//     when the transport has one: the API key in its headers looked up by
//     WithIdentityConfig, the identity WithIdentity returns, or else the
//     user of the bearer token the SDK verified (auth.TokenInfo.UserID),
//     else the anonymous tenant.
//   - Cost: a tool call costs its declared cost in unit cost, one
//     request and one step (limits.UnitSteps), so one session budget of
//     steps counts its model calls and its tool calls together.
//
// The ticket is settled when the handler returns, panics or is
// cancelled: a permit is held exactly while its work runs. Apply
// installs a reloaded policy file's policies and tool declarations as
// one snapshot, which each request reads once: it is priced, named and
// admitted by the tools and policies of one file. A refusal is
// a JSON-RPC error (see ErrorData and docs/mcp.md): CodeLimited with a
// retry hint, or CodeFinal for a refusal that waiting cannot cure (a
// session's budget, a cost above the limit). ping and notifications are
// never limited.
//
// The package links the SDK; the core and the HTTP middlewares do not.
package mcpadmit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/fingerprint"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

// The JSON-RPC error codes of a refusal, one block in the range JSON-RPC
// leaves to implementations (-32000 to -32099), clear of the codes MCP
// and its Go SDK use there (-32001 to -32005, -32020 to -32022, -32042):
// MCP defines no rate-limit error.
const (
	// CodeLimited: a limit refused the request for now; ErrorData says
	// when to retry (an HTTP transport that can also answers 429).
	CodeLimited = -32029
	// CodeFinal: the request will not be served as it is: a budget is
	// spent, or its cost exceeds a limit (HTTP: 403). Do not retry.
	CodeFinal = -32030
	// CodeInvalidSession: the session id is not one the admission can
	// count (see apikey.ValidSession).
	CodeInvalidSession = -32031
	// CodeUnauthenticated: the caller's credentials were refused.
	CodeUnauthenticated = -32032
)

// ErrorData is the data of a refusal's JSON-RPC error.
type ErrorData struct {
	// Policy is the policy that refused.
	Policy string `json:"policy"`
	// Reason is why: rate, quota, concurrency, queue_full,
	// queue_timeout, store_unavailable, overflow, or budget.
	Reason string `json:"reason"`
	// Retryable is false when waiting cannot help (CodeFinal).
	Retryable bool `json:"retryable"`
	// RetryAfterMs is how long to wait before retrying, in
	// milliseconds; absent when Retryable is false.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
	// Limit, Unit and Remaining are the refusing policy's figures.
	Limit     int64  `json:"limit"`
	Unit      string `json:"unit"`
	Remaining int64  `json:"remaining"`
}

// A ToolSet prices tool calls and bounds their names (config.Tools is
// one): Label returns a tool's declared name or limits.OtherTool, Cost
// the cost of one call in unit cost.
type ToolSet interface {
	Label(name string) string
	Cost(name string) int64
}

// An IdentifyFunc returns the validated identity of the caller of req;
// an error refuses the request with CodeUnauthenticated.
type IdentifyFunc func(ctx context.Context, req mcp.Request) (apikey.Identity, error)

// Option configures a Middleware.
type Option func(*options)

type options struct {
	tools    ToolSet
	budgets  []string
	identify IdentifyFunc
	maxSess  int
	server   string
}

// WithTools prices and labels tool calls by ts; without it every tool is
// limits.OtherTool and costs 1. A policy file's tool set is
// f.MCPTools(server): pass it to New, and again to Apply on each reload.
func WithTools(ts ToolSet) Option { return func(o *options) { o.tools = ts } }

// WithServer names the server in the operations of its requests ("mcp/"
// + name, see limits.MCPOperation), so that the policies of a file that
// declares several MCP servers (match.servers) tell it apart; name must
// be limits.ValidServerName. Without it the server is the unnamed one.
func WithServer(name string) Option { return func(o *options) { o.server = name } }

// WithBudgets names the policies whose quota refusals are final (a
// policy file's budget: true): they answer CodeFinal, not retryable.
func WithBudgets(policies ...string) Option {
	return func(o *options) { o.budgets = append(o.budgets, policies...) }
}

// WithIdentity identifies callers by fn.
func WithIdentity(fn IdentifyFunc) Option { return func(o *options) { o.identify = fn } }

// WithIdentityConfig identifies callers by the headers of the HTTP
// request that carried the MCP request (its API key looked up in ic, as
// httpadmit does), and bounds session ids by ic.MaxSessionLength. A
// request that arrived without HTTP headers is the anonymous tenant's
// (or refused when ic.RequireKey).
func WithIdentityConfig(ic httpadmit.IdentityConfig) Option {
	return func(o *options) {
		o.maxSess = ic.MaxSessionLength
		o.identify = func(_ context.Context, req mcp.Request) (apikey.Identity, error) {
			var h http.Header
			if ex := req.GetExtra(); ex != nil {
				h = ex.Header
			}
			return ic.Identify(&http.Request{Header: h})
		}
	}
}

// Middleware admits an MCP server's requests; see the package doc.
type Middleware struct {
	ctl  *admission.Controller
	base []Option   // New's, under those of each Apply
	mu   sync.Mutex // serialises installs
	cur  atomic.Pointer[snapshot]
}

// snapshot is what a request is decided by: the options in force and
// the policy set installed with them (nil: the controller's).
type snapshot struct {
	o        options
	policies *admission.PolicySet
}

// New returns a middleware admitting through ctl.
func New(ctl *admission.Controller, opts ...Option) (*Middleware, error) {
	if ctl == nil {
		return nil, errors.New("mcpadmit: nil controller")
	}
	m := &Middleware{ctl: ctl, base: opts}
	s, err := m.build(nil)
	if err != nil {
		return nil, err
	}
	m.cur.Store(s)
	return m, nil
}

// build returns the snapshot of New's options with opts over them.
func (m *Middleware) build(opts []Option) (*snapshot, error) {
	s := &snapshot{}
	for _, opt := range append(slices.Clip(m.base), opts...) {
		opt(&s.o)
	}
	if s.o.server != "" && !limits.ValidServerName(s.o.server) {
		return nil, fmt.Errorf("mcpadmit: %.40q is not a server name (see limits.ValidServerName)", s.o.server)
	}
	if s.o.tools == nil {
		s.o.tools = undeclared{}
	}
	if s.o.identify == nil {
		s.o.identify = tokenIdentity
	}
	return s, nil
}

// Apply installs the policies and plans of cfg, with opts applied over
// New's options (a reloaded file's tools and budgets: WithTools,
// WithBudgets), as one snapshot: the controller compiles cfg, and the
// policy set and the options are swapped in together, so that no
// request is priced by one file's tools and admitted by another's
// policies. A configuration that does not compile, or options that do
// not build, change nothing. As a reload.Subscriber:
//
//	func(f *config.File) error {
//		return mw.Apply(f.Config, mcpadmit.WithTools(f.MCPTools("files")), mcpadmit.WithBudgets(budgets(f)...))
//	}
func (m *Middleware) Apply(cfg admission.Config, opts ...Option) error {
	s, err := m.build(opts)
	if err != nil {
		return err
	}
	if s.policies, err = m.ctl.Compile(cfg); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ctl.Install(s.policies); err != nil {
		return err
	}
	m.cur.Store(s)
	return nil
}

// undeclared is the tool set of a middleware without WithTools.
type undeclared struct{}

// Label returns limits.OtherTool: no tool is declared.
func (undeclared) Label(string) string { return limits.OtherTool }

// Cost returns 1, the cost of an undeclared tool.
func (undeclared) Cost(string) int64 { return 1 }

// tokenIdentity is the default identity: the user of the verified bearer
// token as tenant, else the anonymous tenant.
func tokenIdentity(_ context.Context, req mcp.Request) (apikey.Identity, error) {
	if ex := req.GetExtra(); ex != nil && ex.TokenInfo != nil && ex.TokenInfo.UserID != "" {
		return apikey.Identity{Tenant: ex.TokenInfo.UserID}, nil
	}
	return apikey.Identity{Tenant: apikey.DefaultAnonymousTenant}, nil
}

// Wrap is the mcp.Middleware: server.AddReceivingMiddleware(m.Wrap).
func (m *Middleware) Wrap(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if !slices.Contains(limits.MCPMethods, method) {
			return next(ctx, method, req)
		}
		s := m.cur.Load()
		r, err := s.request(ctx, method, req)
		if err != nil {
			return nil, err
		}
		tk, err := m.ctl.Admit(ctx, r)
		if err != nil {
			return nil, s.refusal(err)
		}
		defer tk.Done() // on return, panic or cancel alike
		return next(ctx, method, req)
	}
}

// request returns the admission request of an MCP request of method,
// decided by the policies of s.
func (s *snapshot) request(ctx context.Context, method string, req mcp.Request) (admission.Request, error) {
	id, err := s.o.identify(ctx, req)
	if err != nil {
		return admission.Request{}, &jsonrpc.Error{Code: CodeUnauthenticated, Message: "Unauthenticated: the credentials were refused."}
	}
	r := admission.Request{Tenant: id.Tenant, KeyID: id.KeyID, User: id.User, Policies: s.policies}
	if ss := req.GetSession(); ss != nil {
		if sid := ss.ID(); sid != "" {
			if !apikey.ValidSession(sid, s.o.maxSess) {
				return admission.Request{}, &jsonrpc.Error{Code: CodeInvalidSession,
					Message: "Invalid session id: it must be printable ASCII without spaces, and not longer than this server accepts."}
			}
			r.Session = sid
		}
	}
	tool := ""
	if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
		tool = s.o.tools.Label(p.Name)
		r.Cost = s.o.tools.Cost(tool)
		r.Units = []admission.UnitAmount{{Unit: limits.UnitSteps, Amount: 1}}
		// The step a loop policy counts: the tool and its arguments,
		// normalised.
		r.Fingerprint = fingerprint.ToolCall(p.Name, p.Arguments)
	}
	r.Operation = limits.MCPOperation(s.o.server, method, tool)
	return r, nil
}

// refusal returns the JSON-RPC error of an admission error.
func (s *snapshot) refusal(err error) error {
	var rej *admission.Rejection
	if !errors.As(err, &rej) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err // the caller left while waiting
		}
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "The request could not be admitted."}
	}
	code, data, msg := Refusal(rej, s.final(rej))
	raw, _ := json.Marshal(data) // a struct of strings and numbers
	return &jsonrpc.Error{Code: int64(code), Message: msg, Data: raw}
}

// final reports whether rej is the refusal of a budget.
func (s *snapshot) final(rej *admission.Rejection) bool {
	return rej.Reason == admission.ReasonQuota && slices.Contains(s.o.budgets, rej.Policy)
}

// Refusal returns the JSON-RPC error code, data and message of rej, a
// budget's refusal when budget is set: CodeLimited, or CodeFinal when
// waiting cannot help. The MCP gateway of llmproxy answers the same.
func Refusal(rej *admission.Rejection, budget bool) (code int, d ErrorData, msg string) {
	st := rej.Status
	unit := string(st.Unit)
	if unit == "" {
		unit = string(limits.UnitRequests)
	}
	d = ErrorData{Policy: rej.Policy, Reason: rej.Reason.String(), Limit: st.Limit, Unit: unit, Remaining: st.Remaining}
	switch {
	case budget:
		d.Reason = "budget"
		return CodeFinal, d, fmt.Sprintf("Budget of %d %s used (policy %s): this session can make no more calls.", st.Limit, unit, rej.Policy)
	case rej.Reason == admission.ReasonLoop:
		// The same call would be the same step again: not retryable.
		per := ""
		if st.Window > 0 {
			per = " within " + st.Window.String()
		}
		return CodeFinal, d, fmt.Sprintf("Loop detected (policy %s): this session made the same tool call more than %d times%s. It will not be served again as it is; change the call or end the session.", rej.Policy, st.Limit, per)
	case rej.RetryAfter == limits.Never:
		return CodeFinal, d, fmt.Sprintf("The cost of this call exceeds the limit of %d %s (policy %s): it can never be admitted.", st.Limit, unit, rej.Policy)
	}
	d.Retryable = true
	d.RetryAfterMs = max(int64((rej.RetryAfter+time.Millisecond-1)/time.Millisecond), 1) // rounded up
	per := ""
	if st.Window > 0 {
		per = " per " + st.Window.String()
	}
	return CodeLimited, d, fmt.Sprintf("Limit of %d %s%s reached (policy %s, %s): retry after %v.", st.Limit, unit, per, rej.Policy, rej.Reason, time.Duration(d.RetryAfterMs)*time.Millisecond)
}
