package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/fingerprint"
)

// loopToolKey is the context key of the tool name a request's step
// calls, for a loop refusal's evidence.
type loopToolKey struct{}

// loopStep completes req, a model call of a session whose body is body,
// with the fingerprint of its step (fingerprint.Chat: the conversation's
// tail, normalised) while a loop policy is in force (st.sessions.loops)
// or a request log is written, so that a replay can try a loop policy
// on traffic that had none.
// The body was read, bounded and parsed strictly before; a body without
// messages makes no step and no loop policy counts it. The name of the
// tool the step calls, when fingerprint.ToolName accepts it, goes with
// the request for the evidence of its refusal.
func (g *Gateway) loopStep(c echo.Context, st *state, body []byte, req *admission.Request) {
	if (!st.sessions.loops && g.opt.requestLog == nil) || req.Session == "" {
		return
	}
	fp, tool, ok := fingerprint.Chat(body)
	if !ok {
		return
	}
	req.Fingerprint = fp
	if tool != "" {
		r := c.Request()
		c.SetRequest(r.WithContext(context.WithValue(r.Context(), loopToolKey{}, tool)))
	}
}

// loopShape returns the status, error type and code of a loop refusal:
// 403 on every API shape (Anthropic's permission_error), the OpenAI type
// invalid_request_error and the code loop_detected. writeRejection sends
// x-should-retry: false and no Retry-After: the same step would be
// refused again (its repetitions are what the policy counts), and a
// client that retries 429 (see budgetShape) would keep the loop going.
func loopShape() (status int, typ, code string) {
	return http.StatusForbidden, "invalid_request_error", "loop_detected"
}

// loopMessage gives a loop refusal's evidence: the policy, how many
// near-identical steps in what window, and the tool the step calls when
// its name was valid (never other client text): "Loop detected (policy
// loops): this session made the same step (tool get_weather) more than
// 5 times within 2m. It will not be served again as it is; change the
// step or end the session."
func loopMessage(r *http.Request, rej *admission.Rejection) string {
	step := "the same step"
	if tool, _ := r.Context().Value(loopToolKey{}).(string); tool != "" {
		step = "the same step (tool " + tool + ")"
	}
	return fmt.Sprintf("Loop detected (policy %s): this session made %s more than %d times within %s. "+
		"It will not be served again as it is; change the step or end the session.",
		rej.Policy, step, rej.Status.Limit, shortDuration(rej.Status.Window))
}

// shortDuration writes a policy's window as it is written in a policy
// file: "2m", "1h", "1h30m" rather than "2m0s", "1h0m0s", "1h30m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
