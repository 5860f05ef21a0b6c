package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/upstream"
	"github.com/sluicehq/sluice/weights"
)

// Gemini configures the routes of the Gemini API (generateContent,
// streamGenerateContent with alt=sse, countTokens). The zero value
// serves none of them (they answer 404).
type Gemini struct {
	// Upstream is the base URL of the Gemini API with its version
	// prefix: "https://generativelanguage.googleapis.com/v1beta". A
	// request for /v1beta/models/{model}:generateContent goes to
	// Upstream + "/models/{model}:generateContent". Empty leaves the
	// routes out.
	Upstream string
	// Key is sent upstream as "x-goog-api-key: <key>". The client's own
	// key (its x-goog-api-key, its key= query parameter, or a key header
	// of the identity section), which identifies it to the gateway,
	// never is. Empty sends no key.
	Key string
}

// The Gemini API's methods, served when Config.Gemini.Upstream is set.
// Policies match them as "POST /v1beta/models/{model}:generateContent"
// and so on: the operation names the method, never the model.
const (
	OpGenerateContent       = "/v1beta/models/{model}:generateContent"
	OpStreamGenerateContent = "/v1beta/models/{model}:streamGenerateContent"
	OpGeminiCountTokens     = "/v1beta/models/{model}:countTokens"
)

// geminiPath is the one echo route of the Gemini API: the model and the
// method share the last segment, "{model}:{method}".
const geminiPath = "/v1beta/models/:call"

// maxGeminiModel bounds a Gemini model name in a path: Google's names
// ("gemini-2.5-flash-preview-09-2025") are well under it.
const maxGeminiModel = 128

var geminiRoutes = map[string]route{
	"generateContent":       {geminiPath, "POST " + OpGenerateContent, "", weights.EndpointGenerateContent, nil},
	"streamGenerateContent": {geminiPath, "POST " + OpStreamGenerateContent, "", weights.EndpointGenerateContent, nil},
	"countTokens":           {geminiPath, "POST " + OpGeminiCountTokens, "", weights.EndpointUnknown, nil},
}

// gemini reports whether rt is a route of the Gemini API, proxied to
// Config.Gemini.Upstream.
func (rt route) gemini() bool { return rt.path == geminiPath }

// registerGemini adds the Gemini API's route when it has an upstream.
// generateContent and streamGenerateContent take the path of the other
// token-priced endpoints (handleLLM), priced by the path's model;
// countTokens is limited by requests only and forwarded once admitted:
// the upstream counts with Gemini's own tokenizer, which the gateway
// does not have, so its answer is the exact one a client asks for.
func (g *Gateway) registerGemini(e *echo.Echo) {
	if g.gemini == nil {
		return
	}
	e.POST(geminiPath, inShape[geminiShape](g.handleGemini))
}

// geminiCall splits and validates the last segment of a Gemini path,
// "{model}:{method}", as the router gives it (encoded as in
// ModelIDFromPath): the model must be 1 to maxGeminiModel ASCII letters,
// digits and - _ . (not "." nor ".."), the method one of geminiRoutes.
func geminiCall(param string, encoded bool) (model, method string, ok bool) {
	if encoded {
		var err error
		if param, err = url.PathUnescape(param); err != nil {
			return "", "", false
		}
	}
	i := strings.LastIndexByte(param, ':')
	if i < 0 {
		return "", "", false
	}
	model, method = param[:i], param[i+1:]
	if _, known := geminiRoutes[method]; !known || len(model) > maxGeminiModel || strings.ContainsAny(model, ":@") || !ValidModelID(model) {
		return "", "", false
	}
	return model, method, true
}

// pathModelKey is the echo context key of the model a request names in
// its path (a Gemini or a Bedrock request's), read by readAndPrice.
const pathModelKey = "sluice.path.model"

// pathModel returns the model a request names in its path (a Gemini or
// a Bedrock request's), or "".
func pathModel(c echo.Context) string {
	m, _ := c.Get(pathModelKey).(string)
	return m
}

// handleGemini serves the Gemini API: the client's key is first taken
// out of the request (see geminiCredential), so that no answer, log line
// or upstream request carries it; then the path's model and method are
// validated before anything else is done (404 in Google's shape), and the
// upstream path rebuilt from the method and the validated model.
// streamGenerateContent is served as server-sent events only: without
// alt=sse Google answers one JSON array, which this gateway refuses with
// 400 rather than buffer a whole stream to price it.
func (g *Gateway) handleGemini(c echo.Context) error {
	r := c.Request()
	g.geminiCredential(c)
	model, method, ok := geminiCall(c.Param("call"), r.URL.RawPath != "")
	if !ok {
		g.m.count(r.Context(), g.m.clientErrors, "invalid_model_id")
		writeError(c.Response(), http.StatusNotFound, "invalid_request_error", "model_not_found", "model",
			"Unknown model or method: the path is /v1beta/models/{model}:{generateContent|streamGenerateContent|countTokens}, a model being 1 to "+
				strconv.Itoa(maxGeminiModel)+" letters, digits and - _ .")
		return nil
	}
	rt := geminiRoutes[method]
	rt.upstream = "/models/" + model + ":" + method
	r.Pattern = rt.pattern
	if method == "streamGenerateContent" && r.URL.Query().Get("alt") != "sse" {
		g.m.count(r.Context(), g.m.clientErrors, "unsupported_stream")
		writeError(c.Response(), http.StatusBadRequest, "invalid_request_error", "unsupported_stream", "alt",
			"streamGenerateContent is served as server-sent events only: add ?alt=sse (the official SDKs do).")
		return nil
	}
	c.Set(pathModelKey, model)
	if rt.endpoint == weights.EndpointUnknown {
		return g.handleModels(c, rt)
	}
	return g.handleLLM(c, rt)
}

// geminiCredential moves the client's Gemini key (the x-goog-api-key
// header, else the key= query parameter) into the first key header of
// the identity section, where the gateway's identity reads it, after
// removing every other credential the request carries in those headers.
// The query parameter is removed from the request's URL, so no log line
// and no upstream request can carry it; the header never goes upstream
// either (roundTrip forwards a fixed set of headers).
func (g *Gateway) geminiCredential(c echo.Context) {
	r := c.Request()
	key := r.Header.Get("X-Goog-Api-Key")
	r.Header.Del("X-Goog-Api-Key")
	if q := r.URL.Query(); q.Has("key") {
		if key == "" {
			key = q.Get("key")
		}
		q.Del("key")
		r.URL.RawQuery = q.Encode()
		r.RequestURI = r.URL.RequestURI()
	}
	if key != "" {
		g.presentKey(r, key)
	}
}

// presentKey puts key, a client's key found where its API sends it (a
// header or a query parameter of its own), in the first key header of
// the identity section, where the gateway's identity reads it, after
// removing every other credential the request carries in those headers.
func (g *Gateway) presentKey(r *http.Request, key string) {
	hs := g.state.Load().mw.Identity().KeyHeaders
	if len(hs) == 0 {
		hs = apikey.DefaultKeyHeaders
	}
	for _, h := range hs {
		r.Header.Del(h)
	}
	if http.CanonicalHeaderKey(hs[0]) == "Authorization" {
		key = "Bearer " + key
	}
	r.Header.Set(hs[0], key)
}

// geminiUpstream points an upstream request of the Gemini API at
// Config.Gemini: alt=sse added to the upstream URL's own query on a
// stream, the key in x-goog-api-key.
func (g *Gateway) geminiUpstream(u *url.URL, h http.Header, rt route) {
	if rt.pattern == "POST "+OpStreamGenerateContent {
		q := u.Query()
		q.Set("alt", "sse")
		u.RawQuery = q.Encode()
	}
	if k := g.cfg.Gemini.Key; k != "" {
		h.Set("X-Goog-Api-Key", k)
	}
}

// geminiThrottled reads the body of a Gemini 429 or 503 for what Google
// puts there rather than in headers (upstream.ParseGoogleError): its
// RetryInfo delay becomes the response's Retry-After-Ms, and its quota
// violations the x-ratelimit-limit-{requests,tokens} figures with nothing
// remaining until the delay ends, so the upstream stores learn them as
// they learn OpenAI's headers (upstream.Parse), and the client is told
// when to retry. The provider's x-ratelimit-* headers are never passed to
// a client. The body is kept for the answer.
func geminiThrottled(resp *http.Response) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return
	}
	data, err := readLimited(resp.Body, maxThrottleBody)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(data))
	if err != nil {
		return
	}
	ge := upstream.ParseGoogleError(data)
	h := resp.Header
	if ge.HasRetryAfter && h.Get("Retry-After-Ms") == "" && h.Get("Retry-After") == "" {
		h.Set("Retry-After-Ms", strconv.FormatInt(ge.RetryAfter.Milliseconds(), 10))
	}
	for _, q := range ge.Quotas {
		dim := "requests"
		if q.Dimension == upstream.Tokens {
			dim = "tokens"
		}
		if h.Get("X-Ratelimit-Limit-"+dim) != "" {
			continue
		}
		h.Set("X-Ratelimit-Limit-"+dim, strconv.FormatInt(q.Limit, 10))
		h.Set("X-Ratelimit-Remaining-"+dim, "0")
		if ge.HasRetryAfter {
			h.Set("X-Ratelimit-Reset-"+dim, ge.RetryAfter.String())
		}
	}
}

// geminiUpstreamError prepares an upstream error answer on a Gemini API
// route (w), before its body is built: the upstream's Retry-After-Ms
// (Google's RetryInfo, see geminiThrottled) is copied to the answer, so
// the body's RetryInfo carries it. It returns the status to answer by:
// 401 for Google's 400 API_KEY_INVALID, which is about the gateway's own
// key (answered 502, never as the client's key), else the upstream's.
func geminiUpstreamError(w http.ResponseWriter, resp *http.Response, data []byte) int {
	if !geminiShaped(w) {
		return resp.StatusCode
	}
	if v := resp.Header.Get("Retry-After-Ms"); v != "" {
		w.Header().Set("Retry-After-Ms", v)
	}
	if resp.StatusCode == http.StatusBadRequest && bytes.Contains(data, []byte("API_KEY_INVALID")) {
		var v struct {
			Error struct {
				Details []struct {
					Type   string `json:"@type"`
					Reason string `json:"reason"`
				} `json:"details"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &v) == nil {
			for _, d := range v.Error.Details {
				if d.Type == "type.googleapis.com/google.rpc.ErrorInfo" && d.Reason == "API_KEY_INVALID" {
					return http.StatusUnauthorized
				}
			}
		}
	}
	return resp.StatusCode
}

// geminiShape marks the responses to the Gemini API's routes: the
// gateway's errors on them take Google's shape (writeError).
type geminiShape struct{}

// geminiShaped reports whether w answers a Gemini API route.
func geminiShaped(w http.ResponseWriter) bool { return wraps[shapedWriter[geminiShape]](w) }

// shapedWriter marks a response to the routes of an API whose errors
// have a shape of their own, which S names (geminiShape, azureShape,
// bedrockShape).
type shapedWriter[S any] struct{ http.ResponseWriter }

// Unwrap gives http.ResponseController the writer underneath.
func (w shapedWriter[S]) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// markShape makes c's answer one in the shape S, unless it is already.
func markShape[S any](c echo.Context) {
	if res := c.Response(); !wraps[shapedWriter[S]](res.Writer) {
		res.Writer = shapedWriter[S]{res.Writer}
	}
}

// inShape serves a route with h, its answers in the shape S.
func inShape[S any](h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		markShape[S](c)
		return h(c)
	}
}

// unroutedShape gives an error of echo's own (an unknown path, a wrong
// method) the shape of the API served under its path: Google's under
// /v1beta/ with the Gemini API, Azure's under /openai/ with Azure OpenAI,
// Bedrock's under /model/ with the Converse API.
func (g *Gateway) unroutedShape(c echo.Context) {
	p := c.Request().URL.Path
	switch {
	case g.gemini != nil && strings.HasPrefix(p, "/v1beta/"):
		markShape[geminiShape](c)
	case g.azure != nil && strings.HasPrefix(p, "/openai/"):
		markShape[azureShape](c)
	case g.bedrock != nil && strings.HasPrefix(p, bedrockPrefix):
		markShape[bedrockShape](c)
	}
}

// wraps reports whether w is, or wraps, a writer of type T.
func wraps[T http.ResponseWriter](w http.ResponseWriter) bool {
	for {
		if _, ok := w.(T); ok {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
}

// googleStatus is the canonical status (google.rpc.Code) Google's APIs
// give an HTTP status.
func googleStatus(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusMethodNotAllowed:
		return "UNIMPLEMENTED"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

// geminiErrorBody returns an error in Google's shape:
// {"error":{"code","message","status","details"}}, its details an
// ErrorInfo naming the gateway's code (upper-cased, as Google's reasons
// are) and, when h carries the gateway's retry hint (Retry-After-Ms, set
// before the body is written) and it fits a time.Duration, a RetryInfo with the
// delay, which Google's SDKs read.
func geminiErrorBody(h http.Header, status int, code, msg string) []byte {
	b := make([]byte, 0, 256+len(msg))
	b = append(b, `{"error":{"code":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, googleStatus(status))
	b = append(b, `,"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":`...)
	b = appendJSONString(b, strings.ToUpper(code))
	b = append(b, `,"domain":"sluice.gateway"}`...)
	// On a provider's 429 the hint is the provider's, any integer: one
	// past what a Duration holds would wrap into a short or negative delay.
	if ms, err := strconv.ParseInt(h.Get("Retry-After-Ms"), 10, 64); err == nil && ms >= 0 && ms <= math.MaxInt64/int64(time.Millisecond) {
		b = append(b, `,{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":`...)
		b = appendJSONString(b, strconv.FormatFloat((time.Duration(ms)*time.Millisecond).Seconds(), 'f', -1, 64)+"s")
		b = append(b, '}')
	}
	return append(b, "]}}"...)
}

// geminiStreamError returns the event that ends a Gemini stream with an
// error: "data: {"error":{...}}", which the official SDKs raise as an
// APIError.
func geminiStreamError(h http.Header, status int, code, msg string) []byte {
	ev := append([]byte("data: "), geminiErrorBody(h, status, code, msg)...)
	return append(ev, "\n\n"...)
}
