package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
	"github.com/sluicehq/sluice/weights"
)

// DefaultAnthropicVersion is the anthropic-version sent upstream for a
// client that sends none.
const DefaultAnthropicVersion = "2023-06-01"

// Anthropic configures the routes of Anthropic's Messages API. The zero
// value serves none of them (they answer 404).
type Anthropic struct {
	// Upstream is the base URL of the Anthropic API with its version
	// prefix: "https://api.anthropic.com/v1". A request for /v1/messages
	// goes to Upstream + "/messages". Empty leaves the routes out.
	Upstream string
	// Key is sent upstream as "x-api-key: <key>". The client's own
	// credential (its x-api-key or Authorization, which identify it to
	// the gateway) never is. Empty sends no key.
	Key string
	// Version is the anthropic-version sent for a client that sends none;
	// empty means DefaultAnthropicVersion. A client's own anthropic-version
	// and anthropic-beta pass through.
	Version string
	// MaxBatchBytes bounds the body of a message batch's creation, which
	// the gateway reads whole and holds until the batch is admitted;
	// zero means DefaultMaxMessageBatchBytes, and it is at most the parse
	// budget. A larger one is a 413: split it.
	MaxBatchBytes int64
	// MaxBatchRequests bounds the requests of one message batch; zero
	// means DefaultMaxMessageBatchRequests.
	MaxBatchRequests int
}

// The routes of Anthropic's Messages API, served when
// Config.Anthropic.Upstream is set. Policies match them as
// "POST /v1/messages" and "POST /v1/messages/count_tokens".
const (
	OpMessages    = "/v1/messages"
	OpCountTokens = "/v1/messages/count_tokens"
)

var (
	messagesRoute    = route{OpMessages, "POST " + OpMessages, "/messages", weights.EndpointMessages, nil}
	countTokensRoute = route{OpCountTokens, "POST " + OpCountTokens, "/messages/count_tokens", weights.EndpointUnknown, nil}
)

// anthropic reports whether rt is a route of Anthropic's API, proxied to
// Config.Anthropic.Upstream.
func (rt route) anthropic() bool { return strings.HasPrefix(rt.path, OpMessages) }

// parseUpstream parses the base URL of an upstream API.
func parseUpstream(s string) (*url.URL, error) {
	base, err := url.Parse(strings.TrimSuffix(s, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("gateway: upstream %q is not an http(s) URL", config.RedactURL(s))
	}
	return base, nil
}

// registerMessages adds the Messages API routes when they have an
// upstream. /v1/messages takes the path of the other token-priced
// endpoints (handleLLM); count_tokens is limited by requests only and
// its body passed through once admitted; the Message Batches routes are
// those of registerMessageBatches.
func (g *Gateway) registerMessages(e *echo.Echo) {
	if g.anthropic == nil {
		return
	}
	e.POST(OpMessages, inAnthropicShape(on(messagesRoute, g.handleLLM)))
	e.POST(OpCountTokens, inAnthropicShape(on(countTokensRoute, g.handleModels)))
	g.registerMessageBatches(e)
}

// anthropicWriter marks a response to a Messages API route: the gateway's
// errors on it take Anthropic's shape (writeError), and its limit headers
// include anthropic-ratelimit-* (setLimitHeaders).
type anthropicWriter struct{ http.ResponseWriter }

// Unwrap gives http.ResponseController the writer underneath.
func (w anthropicWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// inAnthropicShape serves a Messages API route with h: its answers in
// Anthropic's shape, each with a request-id, the upstream's when the
// answer is the upstream's, else one of the gateway's own.
func inAnthropicShape(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		anthropicAnswer(c)
		return h(c)
	}
}

// anthropicAnswer makes c's answer one of the Messages API: its errors in
// Anthropic's shape and a request-id of the gateway's, which an upstream
// answer passed on replaces with its own.
func anthropicAnswer(c echo.Context) {
	res := c.Response()
	res.Writer = anthropicWriter{res.Writer}
	var b [12]byte
	_, _ = rand.Read(b[:])
	res.Header().Set("Request-Id", "req_sluice_"+hex.EncodeToString(b[:]))
}

// anthropicPath reports whether path is under the Messages API (or the
// doubled /v1 an SDK given the gateway's /v1 URL calls), where every
// answer, a 404 included, takes Anthropic's shape.
func anthropicPath(path string) bool {
	return strings.HasPrefix(path, OpMessages) || strings.HasPrefix(path, "/v1"+OpMessages)
}

// anthropicShaped reports whether w answers a Messages API route.
func anthropicShaped(w http.ResponseWriter) bool { return wraps[anthropicWriter](w) }

// anthropicErrorType is the error type Anthropic's API gives a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// anthropicErrorBody returns {"type":"error","error":{"type","message"}},
// Anthropic's error shape.
func anthropicErrorBody(typ, msg string) []byte {
	b := make([]byte, 0, 64+len(msg))
	b = append(b, `{"type":"error","error":{"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, msg)
	return append(b, "}}"...)
}

// errorBodyFor returns an error body in the shape of w's route: OpenAI's
// (type, code), on a Messages API route Anthropic's (the type of the
// status), on a Gemini API route Google's (geminiErrorBody), on an Azure
// OpenAI route Azure's (azureErrorBody), on a Converse API route
// Bedrock's (bedrockErrorBody).
func errorBodyFor(w http.ResponseWriter, status int, typ, code, msg string) []byte {
	if anthropicShaped(w) {
		return anthropicErrorBody(anthropicErrorType(status), msg)
	}
	if geminiShaped(w) {
		return geminiErrorBody(w.Header(), status, code, msg)
	}
	if azureShaped(w) {
		return azureErrorBody(status, code, msg)
	}
	if bedrockShaped(w) {
		return bedrockErrorBody(w.Header(), status, msg)
	}
	return errorBody(typ, code, "", msg)
}

// anthropicStreamError returns the error event that ends a Messages API
// stream: "event: error" with an Anthropic error, which the official SDKs
// raise. typ is the OpenAI-shaped type the gateway gives the cause.
func anthropicStreamError(typ, msg string) []byte {
	at := "rate_limit_error"
	switch typ {
	case "server_error":
		at = "api_error"
	case "server_overloaded":
		at = "overloaded_error"
	case "insufficient_quota": // a spent budget: its 403's type
		at = anthropicErrorType(http.StatusForbidden)
	}
	ev := append([]byte("event: error\ndata: "), anthropicErrorBody(at, msg)...)
	return append(ev, "\n\n"...)
}

// anthropicLimits are the units of the anthropic-ratelimit-* headers.
var anthropicLimits = [...]struct {
	unit                    limits.Unit
	limit, remaining, reset string
}{
	{limits.UnitRequests, "Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	{limits.UnitTokens, "Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
	{limits.UnitInputTokens, "Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
	{limits.UnitOutputTokens, "Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
}

// setAnthropicHeaders writes, for each unit of anthropicLimits, the
// anthropic-ratelimit-<unit>-{limit,remaining,reset} of the tightest rate
// policy among sts that counts it (limitheaders.Tightest), as Anthropic's
// API writes them: the reset as the RFC 3339 instant, in whole seconds
// rounded up from now, when the partition is fully available again.
func setAnthropicHeaders(h http.Header, sts []admission.Status, now time.Time) {
	for _, al := range anthropicLimits {
		var stack [8]admission.Status
		of := stack[:0]
		for _, s := range sts {
			u := s.Unit
			if u == "" {
				u = limits.UnitRequests
			}
			if u == al.unit && s.Algorithm != limits.Concurrency {
				of = append(of, s)
			}
		}
		i := limitheaders.Tightest(of)
		if i < 0 {
			continue
		}
		s := &of[i]
		reset := now.Add(time.Duration(limitheaders.Seconds(s.Reset)) * time.Second).UTC().Truncate(time.Second)
		h[al.limit] = []string{strconv.FormatInt(s.Limit, 10)}
		h[al.remaining] = []string{strconv.FormatInt(max(0, s.Remaining), 10)}
		h[al.reset] = []string{reset.Format(time.RFC3339)}
	}
}

// setAnthropicUpstream points an upstream request of the Messages API at
// Config.Anthropic: its key in x-api-key, and the client's
// anthropic-version (else the configured one) and anthropic-beta.
func (g *Gateway) setAnthropicUpstream(dst, src http.Header) {
	if k := g.cfg.Anthropic.Key; k != "" {
		dst["X-Api-Key"] = []string{k}
	}
	if v, ok := src["Anthropic-Beta"]; ok {
		dst["Anthropic-Beta"] = v
	}
	v := src["Anthropic-Version"]
	if len(v) == 0 {
		v = []string{g.cfg.Anthropic.Version}
		if v[0] == "" {
			v[0] = DefaultAnthropicVersion
		}
	}
	dst["Anthropic-Version"] = v
}
