package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/eventstream"
	"github.com/sluicehq/sluice/weights"
)

// Bedrock configures the routes of Amazon Bedrock's Converse API
// (Converse and ConverseStream). The zero value serves none of them
// (they answer 404).
//
// Clients authenticate with their gateway API key sent as a Bedrock API
// key, "Authorization: Bearer <key>": the AWS SDKs do so when
// AWS_BEARER_TOKEN_BEDROCK is set (or a bearer token provider is
// configured), over HTTPS only. A request signed with SigV4 is refused
// with 401: the gateway cannot check a signature made with a secret it
// does not hold. Upstream, every request is signed again, with the
// gateway's own credentials; the client's Authorization and its X-Amz-*
// headers never go upstream.
type Bedrock struct {
	// Upstream is the base URL of the Bedrock runtime API:
	// "https://bedrock-runtime.us-east-1.amazonaws.com". A request for
	// /model/{modelId}/converse goes to Upstream +
	// "/model/{modelId}/converse". Empty leaves the routes out.
	Upstream string
	// Region is the region upstream requests are signed for (SigV4,
	// service "bedrock"). Empty means DefaultBedrockRegion.
	Region string
	// Credentials sign upstream requests (SigV4). Nil sends them
	// unsigned (a simulator, or a proxy that signs them itself).
	Credentials aws.CredentialsProvider
}

// DefaultBedrockRegion is the region of Bedrock.Region when it is empty.
const DefaultBedrockRegion = "us-east-1"

// The Converse API's operations, served when Config.Bedrock.Upstream is
// set. Policies match them as "POST /model/{modelId}/converse" and
// "POST /model/{modelId}/converse-stream": the operation names the
// method, never the model.
const (
	OpConverse       = "/model/{modelId}/converse"
	OpConverseStream = "/model/{modelId}/converse-stream"
)

// bedrockPrefix is the path prefix of the Converse API's routes.
const bedrockPrefix = "/model/"

var bedrockRoutes = [...]route{
	{bedrockPrefix + ":modelId/converse", "POST " + OpConverse, "/converse", weights.EndpointConverse, nil},
	{bedrockPrefix + ":modelId/converse-stream", "POST " + OpConverseStream, "/converse-stream", weights.EndpointConverse, nil},
}

// bedrock reports whether rt is a route of the Converse API, proxied to
// Config.Bedrock.Upstream.
func (rt route) bedrock() bool { return rt.endpoint == weights.EndpointConverse }

// registerBedrock adds the Converse API's routes when it has an upstream.
// Both take the path of the other token-priced endpoints (handleLLM),
// priced as weights.EndpointConverse by the model of the path.
func (g *Gateway) registerBedrock(e *echo.Echo) {
	if g.bedrock == nil {
		return
	}
	for _, rt := range bedrockRoutes {
		e.POST(rt.path, inShape[bedrockShape](func(c echo.Context) error { return g.handleBedrock(c, rt) }))
	}
}

// handleBedrock serves the Converse API: the client's credential is
// first put where the identity reads it (see bedrockCredential), then
// the path's model id is validated (ModelIDFromPath: Bedrock's ids and
// inference profile ids, "us.anthropic.claude-sonnet-4-20250514-v1:0",
// fit; an ARN does not) before anything else is done (404 in Bedrock's
// shape), and the upstream path rebuilt from the validated id.
func (g *Gateway) handleBedrock(c echo.Context, rt route) error {
	r := c.Request()
	g.bedrockCredential(r)
	model, ok := ModelIDFromPath(c.Param("modelId"), r.URL.RawPath != "")
	if !ok {
		g.m.count(r.Context(), g.m.clientErrors, "invalid_model_id")
		writeError(c.Response(), http.StatusNotFound, "invalid_request_error", "model_not_found", "modelId",
			"Unknown model: the path is /model/{modelId}/converse or /converse-stream, a model id being 1 to 256 letters, digits and - _ . : @ (model ids and inference profile ids; ARNs are not served).")
		return nil
	}
	rt.upstream = bedrockPrefix + model + rt.upstream
	r.Pattern = rt.pattern
	c.Set(pathModelKey, model)
	return g.handleLLM(c, rt)
}

// bedrockCredential takes the client's credential out of its
// Authorization header: a bearer token (a Bedrock API key) is moved to
// the first key header of the identity section (see presentKey); a SigV4
// signature is dropped, so that the request is answered as one without
// a key.
func (g *Gateway) bedrockCredential(r *http.Request) {
	auth := r.Header.Get("Authorization")
	const scheme = "Bearer "
	if len(auth) < len(scheme) || !strings.EqualFold(auth[:len(scheme)], scheme) {
		if strings.HasPrefix(auth, "AWS4-") {
			r.Header.Del("Authorization")
		}
		return
	}
	r.Header.Del("Authorization")
	if key := strings.TrimSpace(auth[len(scheme):]); key != "" {
		g.presentKey(r, key)
	}
}

// bedrockUpstream prepares an upstream request of the Converse API: its
// path escaped as the AWS SDKs escape it (the model id's ':' as %3A),
// no client header that could carry a credential or be mistaken for a
// signature's, and the gateway's own SigV4 signature. Only host,
// content-type and x-amz-date are signed: the transport may add trace
// headers after signing.
func (g *Gateway) bedrockUpstream(ctx context.Context, req *http.Request, body []byte) error {
	u := req.URL
	if model, op, ok := strings.Cut(strings.TrimPrefix(u.Path, g.bedrock.Path+bedrockPrefix), "/"); ok {
		u.RawPath = g.bedrock.EscapedPath() + bedrockPrefix + awsEscaper.Replace(model) + "/" + op
	}
	for k := range req.Header {
		if k == "Authorization" || strings.HasPrefix(k, "X-Amz-") || strings.HasPrefix(k, "Amz-Sdk-") {
			delete(req.Header, k)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	cp := g.cfg.Bedrock.Credentials
	if cp == nil {
		return nil
	}
	creds, err := cp.Retrieve(ctx)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	signed := &http.Request{Method: req.Method, URL: u, Host: u.Host, Header: http.Header{"Content-Type": {"application/json"}}}
	if err := v4.NewSigner().SignHTTP(ctx, creds, signed, hex.EncodeToString(sum[:]), "bedrock", g.bedrockRegion(), time.Now()); err != nil {
		return err
	}
	for _, k := range [...]string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
		if v := signed.Header.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	return nil
}

// awsEscaper escapes what a valid model id (ValidModelID) holds beyond
// RFC 3986's unreserved characters, as the AWS SDKs escape a path
// parameter.
var awsEscaper = strings.NewReplacer(":", "%3A", "@", "%40")

// bedrockRegion returns the region upstream requests are signed for.
func (g *Gateway) bedrockRegion() string {
	if r := g.cfg.Bedrock.Region; r != "" {
		return r
	}
	return DefaultBedrockRegion
}

// bedrockShape marks the responses to a Converse API route: the
// gateway's errors on them take Bedrock's shape (writeError).
type bedrockShape struct{}

// bedrockShaped reports whether w answers a Converse API route.
func bedrockShaped(w http.ResponseWriter) bool { return wraps[shapedWriter[bedrockShape]](w) }

// bedrockErrorType returns the error type (x-amzn-ErrorType) of an
// answer with status, by its headers h: a refusal not to retry
// (x-should-retry: false: a spent budget, a request larger than a
// limit, a wait beyond what a client would wait) is a
// ServiceQuotaExceededException, which the AWS SDKs do not retry; any
// other 429 a ThrottlingException, which they retry after their backoff,
// at least x-amz-retry-after.
func bedrockErrorType(h http.Header, status int) string {
	noRetry := h.Get("X-Should-Retry") == "false"
	switch {
	case (status == http.StatusTooManyRequests || status == http.StatusForbidden) && noRetry:
		return "ServiceQuotaExceededException"
	case status == http.StatusTooManyRequests:
		return "ThrottlingException"
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return "AccessDeniedException"
	case status == http.StatusNotFound:
		return "ResourceNotFoundException"
	case status == http.StatusRequestTimeout, status == http.StatusGatewayTimeout:
		return "ModelTimeoutException"
	case status == http.StatusServiceUnavailable:
		return "ServiceUnavailableException"
	case status >= 500:
		return "InternalServerException"
	}
	return "ValidationException"
}

// bedrockErrorBody returns an error in Bedrock's shape, {"message": ...},
// after setting on h its type (x-amzn-ErrorType, see bedrockErrorType)
// and, when h carries the gateway's retry hint (Retry-After-Ms), the
// same in x-amz-retry-after, which the AWS SDKs' retryers read. An
// upstream's own type, set on h already, is kept.
func bedrockErrorBody(h http.Header, status int, msg string) []byte {
	if h.Get("X-Amzn-Errortype") == "" {
		h.Set("X-Amzn-Errortype", bedrockErrorType(h, status))
	}
	if ms := h.Get("Retry-After-Ms"); ms != "" {
		h.Set("X-Amz-Retry-After", ms)
	}
	return bedrockMessage(msg)
}

// bedrockMessage returns {"message": msg}, the body of Bedrock's errors
// and of a stream's exceptions.
func bedrockMessage(msg string) []byte {
	b := make([]byte, 0, 16+len(msg))
	b = append(b, `{"message":`...)
	b = appendJSONString(b, msg)
	return append(b, '}')
}

// bedrockStreamError returns the exception message that ends a
// ConverseStream: a throttlingException for a stream cut by a limit,
// serviceUnavailableException for an overloaded upstream capacity,
// internalServerException for an upstream failure. The SDKs raise it
// from the stream's Err.
func bedrockStreamError(typ, msg string) []byte {
	et := "throttlingException"
	switch typ {
	case "server_error":
		et = "internalServerException"
	case "server_overloaded":
		et = "serviceUnavailableException"
	}
	return eventstream.Exception(et, bedrockMessage(msg))
}

// streamed reports whether an upstream answer is a stream: server-sent
// events, or an AWS event stream (Bedrock's ConverseStream).
func streamed(resp *http.Response) bool {
	ct := resp.Header.Get("Content-Type")
	return resp.StatusCode == http.StatusOK && (strings.HasPrefix(ct, "text/event-stream") || strings.HasPrefix(ct, "application/vnd.amazon.eventstream"))
}
