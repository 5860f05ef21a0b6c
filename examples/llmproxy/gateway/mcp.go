package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/fingerprint"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/mcpadmit"
)

// OpMCP is the route of MCP's streamable HTTP transport to the unnamed
// upstream MCP server (MCP.Upstream): POST sends JSON-RPC messages, GET
// opens the server's event stream, DELETE ends a session. OpMCP + "/"
// + name is the route of the server of that name in the policy file's
// mcp_servers section.
const OpMCP = "/mcp"

// Defaults of MCP fields left zero.
const (
	DefaultMCPMaxBody  = 1 << 20
	DefaultMCPMaxBatch = 16
)

// MCP configures the MCP routes (see docs/mcp.md in the repository):
// the gateway proxies MCP over streamable HTTP to upstream MCP servers,
// admitting each tool call, resource read and prompt get like a model
// call: the unnamed server at /mcp, and each server of the policy
// file's mcp_servers section at /mcp/{name}, which follow the file in
// force. Without Upstream, /mcp is left out.
type MCP struct {
	// Upstream is the URL of the unnamed upstream server's MCP endpoint
	// ("http://tools.internal:8080/mcp"); every request to /mcp goes
	// there, whatever path the client used.
	Upstream string
	// UpstreamKey, when set, is sent to Upstream as "Authorization:
	// Bearer <key>" (a named server's is its key_env's); the client's
	// credentials never are.
	UpstreamKey string
	// MaxBody bounds a POST body; zero means DefaultMCPMaxBody.
	MaxBody int64
	// MaxBatch bounds the messages of a JSON-RPC batch; zero means
	// DefaultMCPMaxBatch.
	MaxBatch int
	// SessionSecret signs the session ids the gateway hands out, which
	// bind an upstream session to the tenant that opened it and to its
	// server. Empty means a random secret per process: set the same
	// secret on every replica behind one load balancer.
	SessionSecret []byte
}

// mcpProxy is the gateway's MCP routes: the unnamed upstream and what
// binds a session to its tenant and server.
type mcpProxy struct {
	cfg      MCP
	upstream *url.URL // the unnamed server's; nil without one
	secret   []byte
	calls    metric.Int64Counter // by server, method, tool label and outcome
}

// mcpServer is one upstream MCP server: where its requests go, the key
// sent with them and its tool set.
type mcpServer struct {
	upstream *url.URL
	key      string
	tools    *config.Tools
}

// mcpServers returns the named MCP servers of f (its mcp_servers
// section), each key read from its variable.
func mcpServers(f *config.File) (map[string]mcpServer, error) {
	out := make(map[string]mcpServer, len(f.MCPServers))
	for _, name := range f.MCPServerNames() {
		s := f.MCPServers[name]
		u, err := parseUpstream(s.URL)
		if err != nil {
			return nil, fmt.Errorf("mcp_servers.%s: %w", name, err)
		}
		srv := mcpServer{upstream: u, tools: f.MCPTools(name)}
		if s.KeyEnv != "" {
			if srv.key = os.Getenv(s.KeyEnv); srv.key == "" {
				return nil, fmt.Errorf("mcp_servers.%s.key_env: the variable %s is not set", name, s.KeyEnv)
			}
		}
		out[name] = srv
	}
	return out, nil
}

// macLen is the length of a session id's signature: 16 bytes, base64.
const macLen = 22

// newMCP returns the MCP routes of cfg.
func newMCP(cfg MCP, meter metric.Meter) (*mcpProxy, error) {
	var u *url.URL
	if cfg.Upstream != "" {
		var err error
		if u, err = parseUpstream(cfg.Upstream); err != nil {
			return nil, err
		}
	}
	cfg.MaxBody = positive(cfg.MaxBody, DefaultMCPMaxBody)
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMCPMaxBatch
	}
	p := &mcpProxy{cfg: cfg, upstream: u, secret: cfg.SessionSecret}
	if len(p.secret) == 0 {
		p.secret = make([]byte, 32)
		rand.Read(p.secret)
	}
	var err error
	p.calls, err = meter.Int64Counter("llmproxy.mcp.requests",
		metric.WithDescription("MCP requests through the gateway, by server (a name of the policy file's mcp_servers section, empty for /mcp), method, tool (a tool of the server's tool set, else __other__) and outcome (admitted, refused)."),
		metric.WithUnit("{request}"))
	return p, err
}

// registerMCP adds the route of the unnamed server when it has an
// upstream, and the route of the named servers, which the state in
// force serves.
func (g *Gateway) registerMCP(e *echo.Echo) {
	if g.mcp.upstream != nil {
		e.POST(OpMCP, g.handleMCPPost)
		e.GET(OpMCP, g.handleMCPStream)
		e.DELETE(OpMCP, g.handleMCPStream)
	}
	e.POST(OpMCP+"/:server", g.handleMCPPost)
	e.GET(OpMCP+"/:server", g.handleMCPStream)
	e.DELETE(OpMCP+"/:server", g.handleMCPStream)
}

// mcpServer returns the name and the server of the request's route
// under st: "" and the unnamed server for /mcp, a server of st's file
// for /mcp/{name}. It answers 404 and returns false for a name the file
// does not declare (to an identified caller: the names are not told to
// anyone else).
func (g *Gateway) mcpServer(c echo.Context, st *state) (string, mcpServer, bool) {
	name := c.Param("server")
	if name == "" {
		return "", mcpServer{upstream: g.mcp.upstream, key: g.mcp.cfg.UpstreamKey, tools: &st.file.Tools}, true
	}
	if srv, ok := st.mcp[name]; ok {
		return name, srv, true
	}
	g.m.count(c.Request().Context(), g.m.clientErrors, "unknown_mcp_server")
	g.mcpError(c, http.StatusNotFound, nil, false, -32600, "No such MCP server.", nil)
	return "", mcpServer{}, false
}

// sign returns the session id the client sees for the upstream's id on
// server: the id, '.', and a MAC of it, the tenant and the server.
func (p *mcpProxy) sign(tenant, server, upstream string) string {
	return upstream + "." + p.mac(tenant, server, upstream)
}

func (p *mcpProxy) mac(tenant, server, upstream string) string {
	h := hmac.New(sha256.New, p.secret)
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(server))
	h.Write([]byte{0})
	h.Write([]byte(upstream))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}

// open returns the upstream session of the id a client of tenant sent
// to server, and false for an id the gateway did not give that tenant
// on that server.
func (p *mcpProxy) open(tenant, server, id string) (string, bool) {
	i := strings.LastIndexByte(id, '.')
	if i <= 0 || len(id)-i-1 != macLen {
		return "", false
	}
	up := id[:i]
	return up, hmac.Equal([]byte(id[i+1:]), []byte(p.mac(tenant, server, up)))
}

// mcpMessage is what the gateway reads of one JSON-RPC message.
type mcpMessage struct {
	id     json.RawMessage // nil for a notification or a response
	method string
	tool   string          // params.name of a tools/call
	args   json.RawMessage // its params.arguments, for its step's fingerprint
}

// maxMethod bounds a method name.
const maxMethod = 128

var (
	errMCPBody  = errors.New("the body is not a JSON-RPC message or batch")
	errMCPBatch = errors.New("the batch holds too many messages")
	errMCPTool  = errors.New("the tool name must be 1 to 128 letters, digits, '_', '-', '.' and '/'")
)

// parseMCP reads the messages of body, a JSON-RPC message or a batch of
// at most maxBatch: each an object with no repeated member (nor two
// that differ in case, which some decoders would confuse), a method of
// at most maxMethod bytes, and for a tool call a valid tool name. Only
// those members are read; the arguments are checked to be JSON, not
// parsed.
func parseMCP(body []byte, maxBatch int) ([]mcpMessage, bool, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '[' {
		m, err := parseMCPMessage(body)
		return []mcpMessage{m}, false, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.Token() // '['
	var msgs []mcpMessage
	for dec.More() {
		if len(msgs) == maxBatch {
			return nil, true, errMCPBatch
		}
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return nil, true, errMCPBody
		}
		m, err := parseMCPMessage(raw)
		if err != nil {
			return nil, true, err
		}
		msgs = append(msgs, m)
	}
	if t, err := dec.Token(); err != nil || t != json.Delim(']') || len(msgs) == 0 {
		return nil, true, errMCPBody
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, true, errMCPBody
	}
	return msgs, true, nil
}

func parseMCPMessage(raw []byte) (mcpMessage, error) {
	var m mcpMessage
	var params json.RawMessage
	err := members(raw, func(k string, v json.RawMessage) error {
		switch k {
		case "id":
			m.id = v
		case "method":
			if json.Unmarshal(v, &m.method) != nil || len(m.method) > maxMethod {
				return errMCPBody
			}
		case "params":
			params = v
		}
		return nil
	})
	if err != nil || m.method != limits.MCPToolsCall {
		return m, err
	}
	err = members(params, func(k string, v json.RawMessage) error {
		switch k {
		case "name":
			if json.Unmarshal(v, &m.tool) != nil {
				return errMCPTool
			}
		case "arguments":
			m.args = v
		}
		return nil
	})
	if err == nil && !limits.ValidToolName(m.tool) {
		err = errMCPTool
	}
	return m, err
}

// members calls fn with each member of the JSON object raw, refusing
// anything else, a member repeated, or two that differ only in case.
func members(raw []byte, fn func(k string, v json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errMCPBody
	}
	var seen []string
	for dec.More() {
		t, err := dec.Token()
		k, ok := t.(string)
		if err != nil || !ok {
			return errMCPBody
		}
		if slices.ContainsFunc(seen, func(s string) bool { return strings.EqualFold(s, k) }) {
			return errMCPBody
		}
		seen = append(seen, k)
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return errMCPBody
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return errMCPBody
	}
	if _, err := dec.Token(); err != io.EOF {
		return errMCPBody
	}
	return nil
}

// handleMCPPost admits and forwards a POST of JSON-RPC messages: the
// caller identified, its session checked, the body bounded, read with
// the client deadline and parsed (parseMCP); each request of an admitted
// method is admitted (a batch whole, or refused whole), forwarded, and
// settled when the upstream's answer (a JSON body or an event stream)
// has been passed on, and written to the request log.
func (g *Gateway) handleMCPPost(c echo.Context) error {
	arrived := g.now()
	r, w := c.Request(), c.Response()
	ctx := r.Context()
	st := g.state.Load()
	req, ok := g.identify(c, st)
	if !ok {
		return nil
	}
	server, srv, ok := g.mcpServer(c, st)
	if !ok {
		return nil
	}
	upSession, ok := g.mcpSession(c, req.Tenant, server)
	if !ok {
		return nil
	}
	p := g.mcp
	if r.ContentLength > p.cfg.MaxBody {
		g.mcpError(c, http.StatusRequestEntityTooLarge, nil, false, -32600, "The request body is larger than "+strconv.FormatInt(p.cfg.MaxBody, 10)+" bytes.", nil)
		return nil
	}
	// The body is read and parsed within the parse budget the model
	// routes share.
	want := r.ContentLength
	if want < 0 {
		want = p.cfg.MaxBody
	}
	got, ok := g.budget.acquire(ctx, want)
	if !ok {
		if ctx.Err() == nil {
			g.m.count(ctx, g.m.clientErrors, "parse_budget_full")
			w.Header().Set("Retry-After", "1")
			g.mcpError(c, http.StatusServiceUnavailable, nil, false, -32603, "The gateway is reading too many request bodies at once. Please retry.", nil)
		}
		return nil
	}
	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBody))
	var (
		msgs  []mcpMessage
		batch bool
		err   error
	)
	if readErr == nil {
		msgs, batch, err = parseMCP(body, p.cfg.MaxBatch)
	}
	g.budget.release(got)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(readErr, &tooLarge):
		g.mcpError(c, http.StatusRequestEntityTooLarge, nil, false, -32600, "The request body is larger than "+strconv.FormatInt(p.cfg.MaxBody, 10)+" bytes.", nil)
		return nil
	case readErr != nil:
		if ctx.Err() == nil {
			g.mcpError(c, http.StatusBadRequest, nil, false, -32600, "The request body could not be read.", nil)
		}
		return nil
	case err != nil:
		g.m.count(ctx, g.m.clientErrors, "invalid_mcp_request")
		g.mcpError(c, http.StatusBadRequest, nil, false, -32600, "Invalid request: "+err.Error()+".", nil)
		return nil
	}
	tickets, ok := g.admitMCP(c, st, server, srv.tools, req, msgs, batch, arrived)
	if !ok {
		return nil
	}
	admitted := g.now()
	defer func() {
		for _, t := range tickets {
			t.tk.Done()
			g.logAdmitted(&t.req, arrived, admission.Usage{}, admitted)
		}
	}()
	g.forwardMCP(c, st, server, srv, req.Tenant, http.MethodPost, upSession, body)
	return nil
}

// mcpTicket is one admitted MCP request and its ticket.
type mcpTicket struct {
	req admission.Request
	tk  admission.Ticket
}

// admitMCP admits the requests among msgs to server, whose tool set is
// tools, whose methods are admitted, under the identity of req, and
// returns their tickets; on a refusal it
// gives back what the others took, answers it, writes the refused
// request (which arrived at arrived) to the request log and returns
// false.
func (g *Gateway) admitMCP(c echo.Context, st *state, server string, tools *config.Tools, req admission.Request, msgs []mcpMessage, batch bool, arrived time.Time) ([]mcpTicket, bool) {
	ctx := c.Request().Context()
	var tickets []mcpTicket
	for _, m := range msgs {
		if m.id == nil || !slices.Contains(limits.MCPMethods, m.method) {
			continue
		}
		r := req
		tool := ""
		if m.method == limits.MCPToolsCall {
			tool = tools.Label(m.tool)
			r.Cost = tools.Cost(m.tool)
			r.Units = []admission.UnitAmount{{Unit: limits.UnitSteps, Amount: 1}}
			// The step a loop policy counts: the tool and its arguments,
			// normalised.
			r.Fingerprint = fingerprint.ToolCall(m.tool, m.args)
		}
		r.Operation = limits.MCPOperation(server, m.method, tool)
		actx, cancel := g.admissionContext(c)
		tk, err := g.ctl.Admit(actx, r)
		cancel()
		outcome := "admitted"
		if err != nil {
			outcome = "refused"
		}
		g.mcp.calls.Add(ctx, 1, metric.WithAttributes(attribute.String("server", server), attribute.String("method", m.method), attribute.String("tool", tool), attribute.String("outcome", outcome)))
		if err != nil {
			for _, t := range tickets {
				t.tk.Refund() // the batch is refused whole: nothing of it runs
			}
			g.logRefused(&r, arrived, err)
			g.refusedMCP(c, st, err, msgs, batch)
			return nil, false
		}
		tickets = append(tickets, mcpTicket{r, tk})
	}
	if len(tickets) > 0 {
		var buf [8]admission.Status
		g.setLimitHeaders(c.Response(), tickets[len(tickets)-1].tk.Statuses(buf[:0]))
	}
	return tickets, true
}

// refusedMCP answers an admission error for msgs: a limit's refusal as a
// JSON-RPC error per request (mcpadmit's codes and data), with the
// status and headers of the same refusal of a model call (429 and
// Retry-After; 403 and x-should-retry: false for a spent budget).
func (g *Gateway) refusedMCP(c echo.Context, st *state, err error, msgs []mcpMessage, batch bool) {
	var rej *admission.Rejection
	if !errors.As(err, &rej) {
		g.refused(c, st, err)
		return
	}
	status, _, _, _ := g.rejectionHeaders(st, c.Response(), c.Request(), rej)
	budget, _ := st.budgetRefusal(rej)
	code, data, msg := mcpadmit.Refusal(rej, budget)
	g.mcpError(c, status, msgs, batch, code, msg, data)
}

// mcpError answers status with a JSON-RPC error response for each
// request of msgs (one with a null id when there are none), as a batch
// when the client sent one.
func (g *Gateway) mcpError(c echo.Context, status int, msgs []mcpMessage, batch bool, code int, msg string, data any) {
	type rpcError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}
	type rpcResponse struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcError        `json:"error"`
	}
	var out []rpcResponse
	for _, m := range msgs {
		if m.id != nil {
			out = append(out, rpcResponse{"2.0", m.id, rpcError{code, msg, data}})
		}
	}
	if len(out) == 0 {
		out = append(out, rpcResponse{"2.0", json.RawMessage("null"), rpcError{code, msg, data}})
	}
	var body []byte
	if batch {
		body, _ = json.Marshal(out)
	} else {
		body, _ = json.Marshal(out[0])
	}
	w := c.Response()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// mcpSession returns the upstream session of the request's
// Mcp-Session-Id, "" when it names none; it answers 404 (MCP's answer
// for an unknown session) and returns false for an id the gateway did
// not hand this tenant on this server, or one sent twice.
func (g *Gateway) mcpSession(c echo.Context, tenant, server string) (string, bool) {
	vs := c.Request().Header.Values("Mcp-Session-Id")
	if len(vs) == 0 {
		return "", true
	}
	if len(vs) == 1 {
		if up, ok := g.mcp.open(tenant, server, vs[0]); ok {
			return up, true
		}
	}
	g.m.count(c.Request().Context(), g.m.clientErrors, "unknown_mcp_session")
	g.mcpError(c, http.StatusNotFound, nil, false, -32600, "Session not found.", nil)
	return "", false
}

// handleMCPStream forwards a GET (the server's event stream) or a
// DELETE (the end of a session) of an identified caller's own session;
// neither is admitted (no tool runs), and both need a session.
func (g *Gateway) handleMCPStream(c echo.Context) error {
	st := g.state.Load()
	req, ok := g.identify(c, st)
	if !ok {
		return nil
	}
	server, srv, ok := g.mcpServer(c, st)
	if !ok {
		return nil
	}
	up, ok := g.mcpSession(c, req.Tenant, server)
	if !ok {
		return nil
	}
	if up == "" {
		g.mcpError(c, http.StatusBadRequest, nil, false, -32600, "An Mcp-Session-Id header is required.", nil)
		return nil
	}
	g.forwardMCP(c, st, server, srv, req.Tenant, c.Request().Method, up, nil)
	return nil
}

// mcpRequestHeader lists the client headers an MCP server needs.
func mcpRequestHeader(k string) bool {
	switch k {
	case "Content-Type", "Accept", "Mcp-Protocol-Version", "Last-Event-Id", "Traceparent", "Tracestate", "User-Agent":
		return true
	}
	return false
}

// forwardMCP sends the request to srv (to its configured URL, with the
// upstream session up) and passes the answer on: its status, type and
// session (signed for tenant and server: an id that does not fit the
// session ids the gateway accepts is a 502), and its body as it comes, each read
// bounded by the stream idle timeout, the answer to a POST (a JSON
// body or an event stream) also by MaxResponseBytes.
func (g *Gateway) forwardMCP(c echo.Context, st *state, server string, srv mcpServer, tenant, method, up string, body []byte) {
	r, w := c.Request(), c.Response()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(ctx, method, srv.upstream.String(), rd)
	if err != nil {
		g.upstreamFailed(c, r.Context(), err)
		return
	}
	for k, vs := range r.Header {
		if mcpRequestHeader(k) && !st.mw.Identity().CredentialHeader(k) {
			out.Header[k] = vs
		}
	}
	if up != "" {
		out.Header.Set("Mcp-Session-Id", up)
	}
	if k := srv.key; k != "" {
		out.Header.Set("Authorization", "Bearer "+k)
	}
	out.ContentLength = int64(len(body))
	timer := time.AfterFunc(g.cfg.Timeout, cancel) // until the answer's headers
	resp, err := g.opt.transport.RoundTrip(out)
	if !timer.Stop() && err == nil {
		resp.Body.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		g.upstreamFailed(c, r.Context(), err)
		return
	}
	defer resp.Body.Close()
	g.m.upstreamStatus(r.Context(), resp.StatusCode)
	h := w.Header()
	for _, k := range []string{"Content-Type", "Mcp-Protocol-Version", "Cache-Control"} {
		if v := resp.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		signed := g.mcp.sign(tenant, server, sid)
		if !apikey.ValidSession(signed, st.sessions.cfg.MaxLength) {
			g.m.count(r.Context(), g.m.upstreamFailures, "bad_response")
			g.mcpError(c, http.StatusBadGateway, nil, false, -32603, "The upstream MCP server returned a session id this gateway cannot carry.", nil)
			return
		}
		h.Set("Mcp-Session-Id", signed)
	}
	w.WriteHeader(resp.StatusCode)
	limit := g.cfg.MaxResponseBytes // the answers to a POST, as a JSON body or a stream
	if method == http.MethodGet {
		limit = -1 // the server's stream, for the session's lifetime
	}
	var idle idleWatch
	idle.start(g.cfg.StreamIdleTimeout, cancel, g.now)
	defer idle.stop()
	buf := make([]byte, 16<<10)
	var n int64
	for {
		k, err := resp.Body.Read(buf)
		if k > 0 {
			idle.progress(g.now())
			n += int64(k)
			if limit >= 0 && n > limit {
				g.m.count(r.Context(), g.m.upstreamFailures, "too_large")
				return
			}
			if _, werr := w.Write(buf[:k]); werr != nil {
				return
			}
			w.Flush()
		}
		if err != nil {
			return
		}
	}
}
