package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

// sessions is what the gateway derives from a policy file about agent
// sessions (see docs/sessions.md in the repository):
//
//   - A request's session comes from the identity.session headers (read
//     by the middleware, X-Session-Id then Mcp-Session-Id by default),
//     else from the body fields listed (metadata.session_id of OpenAI's
//     request metadata, metadata.user_id of Anthropic's, or user), read
//     only while a policy is keyed by session. An id that is not 1 to
//     max_length printable ASCII is refused with 400 invalid_session; it
//     is never shortened nor used raw.
//   - Each model call is one step (limits.UnitSteps) while a policy
//     counts steps; a tool call will be charged the same unit.
//   - A quota marked budget: true refuses as a budget: 403, never to be
//     retried (see budgetShape).
//   - While a loop policy is in force (keyed by fingerprint), a model
//     call of a session carries its step's fingerprint (see loopStep),
//     and a loop refusal is answered 403, never to be retried (see
//     loopShape).
type sessions struct {
	cfg       config.Session
	bySession bool            // a policy is keyed by session
	steps     bool            // a policy counts steps
	loops     bool            // a policy detects loops (keyed by fingerprint)
	budgets   map[string]bool // budget policy → keyed by session
}

// newSessions returns the sessions settings of f.
func newSessions(f *config.File) sessions {
	s := sessions{cfg: f.Identity.Session, budgets: map[string]bool{}}
	for i, p := range f.Config.Policies {
		s.bySession = s.bySession || p.KeyedBySession()
		s.steps = s.steps || p.Unit == limits.UnitSteps
		s.loops = s.loops || p.DetectsLoops()
		if i < len(f.Policies) && f.Policies[i].Budget {
			s.budgets[p.Name] = p.KeyedBySession()
		}
	}
	return s
}

// fromBody returns the session the body names in the first of the
// configured fields present, "" when none is, or
// apikey.ErrInvalidSession for a value that is not a valid id (or
// not a string). Field names match exactly, as the upstream reads them
// (encoding/json's struct fields would also take "Metadata" or "USER");
// the body was parsed strictly before, with no repeated key, so the
// field read here is the one the upstream sees.
func (s *sessions) fromBody(body []byte) (string, error) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return "", nil // the estimator accepted it: not an object of ours
	}
	var md map[string]json.RawMessage
	if t := bytes.TrimSpace(top["metadata"]); len(t) > 0 && t[0] == '{' {
		if json.Unmarshal(t, &md) != nil {
			return "", apikey.ErrInvalidSession
		}
	}
	for _, f := range s.cfg.Body {
		var raw json.RawMessage
		switch f {
		case config.SessionFieldMetadataSessionID:
			raw = md["session_id"]
		case config.SessionFieldMetadataUserID:
			raw = md["user_id"]
		case config.SessionFieldUser:
			raw = top["user"]
		}
		if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
			continue
		}
		var id string
		if json.Unmarshal(raw, &id) != nil || !apikey.ValidSession(id, s.cfg.MaxLength) {
			return "", apikey.ErrInvalidSession
		}
		return id, nil
	}
	return "", nil
}

// session completes req, a model call whose body is body, with its
// session (when no header named one) and its step, by the state st; it
// answers 400 invalid_session and returns false for a session id it
// refuses.
func (g *Gateway) session(c echo.Context, st *state, body []byte, req *admission.Request) bool {
	s := &st.sessions
	if s.bySession && req.Session == "" && len(s.cfg.Body) > 0 {
		id, err := s.fromBody(body)
		if err != nil {
			g.invalidSession(c)
			return false
		}
		req.Session = id
	}
	if s.steps {
		req.Units = append(req.Units, admission.UnitAmount{Unit: limits.UnitSteps, Amount: 1})
	}
	g.loopStep(c, st, body, req)
	return true
}

// invalidSession answers 400 invalid_session.
func (g *Gateway) invalidSession(c echo.Context) {
	g.m.count(c.Request().Context(), g.m.clientErrors, "invalid_session")
	writeError(c.Response(), http.StatusBadRequest, "invalid_request_error", "invalid_session", "",
		"The session id must be printable ASCII without spaces, and not longer than this gateway accepts.")
}

// budgetRefusal reports whether rej is the refusal of an exhausted
// budget (a quota marked budget: true) under st, and whether that budget
// is a session's.
func (st *state) budgetRefusal(rej *admission.Rejection) (budget, session bool) {
	if rej.Reason != admission.ReasonQuota {
		return false, false
	}
	session, budget = st.sessions.budgets[rej.Policy]
	return budget, session
}

// budgetShape returns the status, error type and code of an exhausted
// budget: the budget is spent for good (a session's steps, tokens or
// cost), so no wait helps and no retry may be made. The status is 403 on
// every API shape, the OpenAI error type insufficient_quota (Anthropic's
// permission_error, the type of its 403), the code
// session_budget_exceeded (budget_exceeded for a budget not keyed by
// session); writeRejection sends x-should-retry: false and no
// Retry-After nor retry-after-ms, and a running stream cut by the budget
// ends with an error event of the same type, code and message.
//
// Why 403 rather than 429: the official SDKs (openai-go,
// anthropic-sdk-go and their Python and TypeScript siblings) honour
// x-should-retry: false on any status, but many clients do not read it:
// generic HTTP retry layers, agent frameworks with their own retry loop,
// proxies configured to retry 429. All of them retry 429 and none
// retries 403. A 429 would invite the agent to come back, the very loop
// a session budget is there to stop; 403 says the request will not be
// served as it is, which is the truth until the session ends.
func budgetShape(session bool) (status int, typ, code string) {
	code = "budget_exceeded"
	if session {
		code = "session_budget_exceeded"
	}
	return http.StatusForbidden, "insufficient_quota", code
}

// budgetMessage names the exhausted budget and its figure: "Session
// budget of 200 steps used (policy session-steps): this session can make
// no more calls."
func budgetMessage(rej *admission.Rejection, session bool) string {
	what, who := "Budget", "caller"
	if session {
		what, who = "Session budget", "session"
	}
	return fmt.Sprintf("%s of %d %s used (policy %s): this %s can make no more calls.",
		what, rej.Status.Limit, budgetUnit(rej.Status.Unit), rej.Policy, who)
}

// budgetUnit names what a budget counts, for its refusal's message.
func budgetUnit(u limits.Unit) string {
	switch u {
	case limits.UnitCost:
		return "micro-dollars"
	case "":
		return string(limits.UnitRequests)
	}
	return string(u)
}
