package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

// errorBody returns {"error":{"message","type","param","code"}}, the OpenAI
// error shape.
func errorBody(typ, code, param, msg string) []byte {
	b := make([]byte, 0, 128+len(msg))
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"param":`...)
	if param == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, param)
	}
	b = append(b, `,"code":`...)
	if code == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, code)
	}
	return append(b, "}}"...)
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// writeError answers with an error in the OpenAI shape, Anthropic's
// on a Messages API route (the type of the status, see
// anthropicErrorType), Google's on a Gemini API route, Azure's on an
// Azure OpenAI route, or Bedrock's on a Converse API route.
func writeError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	body := errorBody(typ, code, param, msg)
	if anthropicShaped(w) || geminiShaped(w) || azureShaped(w) || bedrockShaped(w) {
		body = errorBodyFor(w, status, typ, code, msg)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// rejectionCode names a rejection in the error body's code field.
func rejectionCode(rej *admission.Rejection) string {
	reason := rej.Reason
	if reason == admission.ReasonQueueFull && rej.Status.Algorithm != limits.Concurrency {
		reason = admission.ReasonRate // a rate policy's full queue: the rate is what ran out
	}
	switch reason {
	case admission.ReasonRate, admission.ReasonOverflow:
		if rej.Status.Unit == limits.UnitTokens {
			return "tokens_limit_exceeded"
		}
		return "rate_limit_exceeded"
	case admission.ReasonQuota:
		return "quota_exceeded"
	case admission.ReasonConcurrency, admission.ReasonQueueFull:
		return "concurrency_limit_exceeded"
	case admission.ReasonQueueTimeout:
		return "queue_timeout"
	case admission.ReasonStoreUnavailable:
		return "service_unavailable"
	}
	return "rate_limit_exceeded"
}

// rejectionShape returns the status, error type and code of a rejection:
// 429 for the caller's own limits, QuotaStatus for an exhausted quota, 503
// when the shared upstream capacity or the limit store is the problem,
// and an exhausted budget's (budgetShape).
func (st *state) rejectionShape(rej *admission.Rejection) (status int, typ, code string) {
	if budget, session := st.budgetRefusal(rej); budget {
		return budgetShape(session)
	}
	if rej.Reason == admission.ReasonLoop {
		return loopShape()
	}
	code = rejectionCode(rej)
	status = limitheaders.StatusCode(rej, st.quota)
	switch rej.Reason {
	case admission.ReasonRate, admission.ReasonOverflow:
		typ = string(rej.Status.Unit)
	case admission.ReasonQuota:
		typ = "insufficient_quota"
	case admission.ReasonConcurrency, admission.ReasonQueueFull, admission.ReasonQueueTimeout:
		typ = "concurrency"
		if rej.Reason == admission.ReasonQueueFull && rej.Status.Algorithm != limits.Concurrency {
			typ = string(rej.Status.Unit) // a rate policy's queue: its unit ran out
		}
		if st.shared[rej.Policy] {
			typ, status = "server_overloaded", http.StatusServiceUnavailable
		}
	case admission.ReasonStoreUnavailable:
		typ = "server_error"
	}
	return status, typ, code
}

// unitPhrase names what a policy counts, for messages.
func unitPhrase(s admission.Status) string {
	switch s.Unit {
	case limits.UnitRequests:
		return "requests"
	case limits.UnitTokens:
		return "tokens"
	case limits.UnitCost:
		return "spend (micro-dollars)"
	}
	return string(s.Unit)
}

// queueFullMessage explains a refusal by a full queue in the unit of the
// policy whose queue it is: in flight for a concurrency cap, its rate's
// unit for a rate policy (the queue waits for the rate to refill).
func queueFullMessage(rej *admission.Rejection) string {
	s := rej.Status
	if s.Algorithm == limits.Concurrency {
		return fmt.Sprintf("Too many requests in flight (policy %s): limit %d at once, and the queue is full.", rej.Policy, s.Limit)
	}
	return fmt.Sprintf("Rate limit reached on %s per %s (policy %s): limit %d, and the queue of requests waiting for it is full.",
		unitPhrase(s), limitheaders.FormatReset(s.Window), rej.Policy, s.Limit)
}

// rejectionMessage explains a rejection to the caller with its own
// figures only, by the state st it was decided with.
func (st *state) rejectionMessage(rej *admission.Rejection) string {
	if budget, session := st.budgetRefusal(rej); budget {
		return budgetMessage(rej, session)
	}
	s := rej.Status
	var what string
	switch rej.Reason {
	case admission.ReasonQuota:
		what = fmt.Sprintf("Quota exceeded on %s (policy %s): limit %d per period.", unitPhrase(s), rej.Policy, s.Limit)
	case admission.ReasonQueueFull:
		what = queueFullMessage(rej)
	case admission.ReasonConcurrency:
		what = fmt.Sprintf("Too many requests in flight (policy %s): limit %d at once, and the queue is full.", rej.Policy, s.Limit)
	case admission.ReasonQueueTimeout:
		what = fmt.Sprintf("The request waited too long in the queue (policy %s).", rej.Policy)
	case admission.ReasonStoreUnavailable:
		what = "The rate limiter is unavailable."
	default:
		what = fmt.Sprintf("Rate limit reached on %s per %s (policy %s): limit %d, remaining %d.",
			unitPhrase(s), limitheaders.FormatReset(s.Window), rej.Policy, s.Limit, s.Remaining)
	}
	switch {
	case rej.RetryAfter == limits.Never:
		return what + " This request is larger than the limit allows and cannot succeed as is."
	case rej.RetryAfter > 0:
		return what + " Please try again in " + limitheaders.FormatReset(rej.RetryAfter) + "."
	}
	return what
}

// WriteRejection answers a rejection in OpenAI's shape (Anthropic's on
// a Messages API route, its type rate_limit_error for a 429, with the
// anthropic-ratelimit-* headers): the error body
// (its type and code name the reason; the status is 429, the quota
// status of the policy file for an exhausted quota, 503 when the shared
// upstream capacity or the limit store is the problem), Retry-After
// (whole seconds, rounded up), retry-after-ms and x-should-retry (false
// when the wait would outlast Config.GiveUpAfter or can never end), and
// the limit headers. An exhausted budget (a quota marked budget: true)
// is answered as one not to retry: see budgetShape; so is a loop (a
// loop policy's refusal): see loopShape. It is the
// gateway's one rejection renderer, and has
// the signature of httpadmit.WithRejectionHandler, which the gateway's
// middleware is given.
func (g *Gateway) WriteRejection(w http.ResponseWriter, r *http.Request, rej *admission.Rejection) {
	g.writeRejection(g.state.Load(), w, r, rej)
}

// writeRejection is WriteRejection by the state st the request was
// decided with.
func (g *Gateway) writeRejection(st *state, w http.ResponseWriter, r *http.Request, rej *admission.Rejection) {
	status, typ, code, msg := g.rejectionHeaders(st, w, r, rej)
	writeError(w, status, typ, code, "", msg)
}

// rejectionHeaders writes the headers of a rejection (limits, retry
// hints) and counts it; it returns its status, error type, code and
// message for the body, which the caller writes in its API's shape.
func (g *Gateway) rejectionHeaders(st *state, w http.ResponseWriter, r *http.Request, rej *admission.Rejection) (status int, typ, code, msg string) {
	status, typ, code = st.rejectionShape(rej)
	h := w.Header()
	// Every policy evaluated for the request, so a tokens rejection still
	// carries the requests figures and the other way round.
	sts := rej.Statuses
	if len(sts) == 0 {
		sts = []admission.Status{rej.Status}
	}
	g.setLimitHeaders(w, sts)
	now := time.Now()
	retryAfter := rej.RetryAfter
	msg = st.rejectionMessage(rej)
	if budget, _ := st.budgetRefusal(rej); budget {
		retryAfter = limits.Never // spent for good: x-should-retry: false, no Retry-After
	}
	if rej.Reason == admission.ReasonLoop {
		retryAfter, msg = limits.Never, loopMessage(r, rej) // the same step is refused again
	}
	limitheaders.SetRetryHints(h, retryAfter, now, now.Add(g.cfg.GiveUpAfter))
	limitheaders.SetRetryHeld(h, rej)
	g.m.rejected(r.Context(), code)
	return status, typ, code, msg
}

// setLimitHeaders writes, for the enforced policies among ss, the
// OpenAI-style x-ratelimit-{limit,remaining,reset}-{requests,tokens} of the
// tightest policy of each unit, the IETF RateLimit-Policy and RateLimit
// fields and X-RateLimit-*, and on a Messages API route Anthropic's
// anthropic-ratelimit-*. Shadow policies are left out: they are not
// limits the caller has to respect.
func (g *Gateway) setLimitHeaders(w http.ResponseWriter, ss []admission.Status) {
	h := w.Header()
	ss = limitheaders.Enforced(ss)
	limitheaders.SetOpenAIHeaders(h, ss)
	limitheaders.SetLimitHeaders(h, ss)
	if anthropicShaped(w) {
		setAnthropicHeaders(h, ss, time.Now())
	}
}
