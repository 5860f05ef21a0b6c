package gateway

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/weights"
)

// Azure configures the routes of Azure OpenAI: the deployment routes
// (/openai/deployments/{deployment}/chat/completions, /completions,
// /embeddings and /responses, each with ?api-version=), the v1 routes
// (/openai/v1/chat/completions, /completions, /embeddings, /responses)
// and /openai/responses (the Responses API of the dated versions), the
// last two naming the deployment in the body's model, and the routes of
// one response (GET and DELETE /openai/responses/{id}, GET
// /openai/responses/{id}/input_items, POST /openai/responses/{id}/cancel,
// and the same under /openai/v1/responses/) as ResponsesAPI describes
// them. The zero value serves none of them (they answer 404).
//
// A deployment is served when the policy file's deployments section
// names it (config.Deployments), and is priced, matched by policies
// (match.models, a policy keyed by model) and measured as the model the
// section gives it, whatever model the body names: a tenant cannot pay
// a cheaper model's price for a dearer deployment. Any other deployment
// is refused with 404 DeploymentNotFound and never forwarded.
type Azure struct {
	// Upstream is the base URL of the Azure OpenAI resource, without
	// /openai: "https://myres.openai.azure.com". A request goes to
	// Upstream + its route's path, the deployment spelled as the
	// deployments section writes it, with the request's api-version.
	// Empty leaves the routes out.
	Upstream string
	// Key is sent upstream as "api-key: <key>". The client's own key
	// (its api-key, or Authorization: Bearer), which identifies it to
	// the gateway, never is. Empty sends no key.
	Key string
}

// The paths of the Azure OpenAI routes. Policies match them as "POST
// /openai/deployments/{deployment}/chat/completions", "POST
// /openai/v1/chat/completions" and so on: the operation names the
// method, never the deployment.
const (
	azureDeploymentPrefix = "/openai/deployments/"
	azureV1Prefix         = "/openai/v1"
	azureResponsesPath    = "/openai/responses"
)

// MaxAPIVersion bounds the api-version of an Azure OpenAI request:
// Azure's versions ("2025-04-01-preview", "preview") are well under it.
const MaxAPIVersion = 32

var (
	// azureDeploymentRoutes take the deployment from the path; their
	// upstream is completed per request with the deployment's name.
	azureDeploymentRoutes = []route{
		azureRoute(azureDeploymentPrefix+":deployment/chat/completions", "/chat/completions", weights.EndpointChatCompletions),
		azureRoute(azureDeploymentPrefix+":deployment/completions", "/completions", weights.EndpointCompletions),
		azureRoute(azureDeploymentPrefix+":deployment/embeddings", "/embeddings", weights.EndpointEmbeddings),
		azureRoute(azureDeploymentPrefix+":deployment/responses", "/responses", weights.EndpointResponses),
	}
	// azureBodyRoutes take the deployment from the body's model.
	azureBodyRoutes = []route{
		azureRoute(azureV1Prefix+"/chat/completions", azureV1Prefix+"/chat/completions", weights.EndpointChatCompletions),
		azureRoute(azureV1Prefix+"/completions", azureV1Prefix+"/completions", weights.EndpointCompletions),
		azureRoute(azureV1Prefix+"/embeddings", azureV1Prefix+"/embeddings", weights.EndpointEmbeddings),
		azureRoute(azureV1Prefix+"/responses", azureV1Prefix+"/responses", weights.EndpointResponses),
		azureRoute(azureResponsesPath, azureResponsesPath, weights.EndpointResponses),
	}
	// azureResponseRoutes are the routes of one response, on the paths
	// of the dated versions and of the v1 API.
	azureResponseRoutes = append(responseRoutes(azureResponsesPath, azureResponsesPath), responseRoutes(azureV1Prefix+"/responses", azureV1Prefix+"/responses")...)
)

// azureRoute returns the route of an Azure OpenAI path (an echo path,
// ":deployment" for the deployment), its operation the path with
// "{deployment}".
func azureRoute(path, upstream string, ep weights.Endpoint) route {
	return route{path, "POST " + strings.Replace(path, ":deployment", "{deployment}", 1), upstream, ep, nil}
}

// azure reports whether rt is a route of Azure OpenAI, proxied to
// Config.Azure.Upstream.
func (rt route) azure() bool { return strings.HasPrefix(rt.path, "/openai/") }

// registerAzure adds the Azure OpenAI routes when they have an upstream.
func (g *Gateway) registerAzure(e *echo.Echo) {
	if g.azure == nil {
		return
	}
	for _, rt := range azureDeploymentRoutes {
		e.POST(rt.path, inShape[azureShape](on(rt, g.handleAzure)))
	}
	for _, rt := range azureBodyRoutes {
		e.POST(rt.path, inShape[azureShape](on(rt, g.handleAzure)))
	}
	registerResponseRoutes(e, azureResponseRoutes, g.handleAzureResponse, inShape[azureShape])
}

// azureCall is what an Azure OpenAI request's path and query say, once
// validated: its api-version, and on a deployment route the deployment
// (the file's entry, once the state in force has it).
type azureCall struct {
	version string
	// named is the deployment the path names; "" on the routes whose
	// body names it.
	named string
	dep   config.Deployment
}

// ValidAPIVersion reports whether v may be an Azure OpenAI api-version
// passed upstream: 1 to MaxAPIVersion lower-case ASCII letters, digits,
// '-' and '.' ("2024-10-21", "2025-04-01-preview", "preview").
func ValidAPIVersion(v string) bool {
	if v == "" || len(v) > MaxAPIVersion {
		return false
	}
	for i := 0; i < len(v); i++ {
		switch b := v[i]; {
		case b >= 'a' && b <= 'z', b >= '0' && b <= '9', b == '-', b == '.':
		default:
			return false
		}
	}
	return true
}

// handleAzure serves an Azure OpenAI route: the client's api-key is
// first moved where the identity reads it (see azureCredential), then
// the path's deployment name and the api-version are checked (a
// deployment route needs one; 400 or 404 in Azure's shape otherwise)
// before anything else is done, and the request takes the path of the
// other token-priced endpoints (handleLLM), which resolves the
// deployment once the caller is identified.
func (g *Gateway) handleAzure(c echo.Context, rt route) error {
	r := c.Request()
	g.azureCredential(c)
	a := &azureCall{}
	byPath := strings.HasPrefix(rt.path, azureDeploymentPrefix)
	if byPath {
		name := c.Param("deployment")
		if r.URL.RawPath != "" {
			name, _ = url.PathUnescape(name)
		}
		if !config.ValidDeploymentName(name) {
			g.deploymentNotFound(c)
			return nil
		}
		a.named = name
	}
	var ok bool
	if a.version, ok = g.apiVersion(c, byPath); !ok {
		return nil
	}
	rt.az = a
	return g.handleLLM(c, rt)
}

// handleAzureResponse serves Azure OpenAI's routes of one response as
// the OpenAI routes' (handleResponse), the client's api-key moved where
// the identity reads it and the api-version, optional, checked and
// passed on.
func (g *Gateway) handleAzureResponse(c echo.Context, rt route) error {
	g.azureCredential(c)
	v, ok := g.apiVersion(c, false)
	if !ok {
		return nil
	}
	rt.az = &azureCall{version: v}
	return g.handleResponse(c, rt)
}

// apiVersion returns the api-version of an Azure OpenAI request, ""
// when it has none and none is required; it answers 400 in Azure's shape
// and reports false when one is required and missing, or when it is
// repeated or is not ValidAPIVersion.
func (g *Gateway) apiVersion(c echo.Context, required bool) (string, bool) {
	r := c.Request()
	vs := r.URL.Query()["api-version"]
	switch {
	case len(vs) == 0 && required:
		g.m.count(r.Context(), g.m.clientErrors, "missing_api_version")
		writeError(c.Response(), http.StatusBadRequest, "invalid_request_error", "MissingApiVersionParameter", "api-version",
			"The api-version query parameter (?api-version=) is required for all requests.")
		return "", false
	case len(vs) > 1 || (len(vs) == 1 && !ValidAPIVersion(vs[0])):
		g.m.count(r.Context(), g.m.clientErrors, "invalid_api_version")
		writeError(c.Response(), http.StatusBadRequest, "invalid_request_error", "InvalidApiVersionParameter", "api-version",
			"The api-version query parameter must be one version of 1 to "+strconv.Itoa(MaxAPIVersion)+" lower-case letters, digits, '-' and '.' (2024-10-21).")
		return "", false
	case len(vs) == 1:
		return vs[0], true
	}
	return "", true
}

// azureDeployment resolves the deployment an Azure OpenAI deployment
// route names by the state st that decides the request, answering 404
// DeploymentNotFound when st's file does not name it; it reports whether
// the request goes on. Other routes go on untouched.
func (g *Gateway) azureDeployment(c echo.Context, st *state, rt route) bool {
	a := rt.az
	if a == nil || a.named == "" {
		return true
	}
	d, ok := st.file.Deployments.Lookup(a.named)
	if !ok {
		g.deploymentNotFound(c)
		return false
	}
	a.dep = d
	return true
}

// errUnknownDeployment refuses a request on an Azure OpenAI route whose
// body's model names no deployment of the file in force.
var errUnknownDeployment = errors.New("gateway: no such deployment")

// azureModel returns, for a request on an Azure OpenAI route, the
// mapping weights.Estimator.EstimateAs prices it by: the deployment's
// model, the deployment being the path's or, on the routes that name it
// in the body, the body's model looked up in st's file
// (errUnknownDeployment when it names none). Nil on other routes.
func azureModel(st *state, rt route) func(string) (string, error) {
	a := rt.az
	if a == nil {
		return nil
	}
	return func(named string) (string, error) {
		if a.named == "" {
			d, ok := st.file.Deployments.Lookup(named)
			if !ok {
				return "", errUnknownDeployment
			}
			a.dep = d
		}
		return a.dep.Model, nil
	}
}

// deploymentNotFound answers 404 DeploymentNotFound, as Azure does.
func (g *Gateway) deploymentNotFound(c echo.Context) {
	g.m.count(c.Request().Context(), g.m.clientErrors, "deployment_not_found")
	writeError(c.Response(), http.StatusNotFound, "invalid_request_error", "DeploymentNotFound", "",
		"The API deployment for this resource does not exist. The gateway serves the deployments of its policy file's deployments section.")
}

// azureCredential moves the client's Azure key (its api-key header) into
// the first key header of the identity section, where the gateway's
// identity reads it, after removing every other credential the request
// carries in those headers. Without an api-key the request keeps its
// Authorization: Bearer, which the identity reads as on every route.
// Neither header goes upstream (roundTrip forwards a fixed set of
// headers).
func (g *Gateway) azureCredential(c echo.Context) {
	r := c.Request()
	key := r.Header.Get("Api-Key")
	r.Header.Del("Api-Key")
	if key != "" {
		g.presentKey(r, key)
	}
}

// azureUpstream points an upstream request of Azure OpenAI at
// Config.Azure: the deployment's name as the file writes it in the path
// of a deployment route, the request's validated api-version in the
// query, the gateway's key in api-key.
func (g *Gateway) azureUpstream(u *url.URL, h http.Header, rt route) {
	a := rt.az
	if a.named != "" {
		u.Path = g.azure.Path + azureDeploymentPrefix + a.dep.Name + rt.upstream
	}
	if a.version != "" {
		u.RawQuery = url.Values{"api-version": {a.version}}.Encode()
	}
	g.setAzureKey(h)
}

// setAzureKey puts Config.Azure.Key in h's api-key.
func (g *Gateway) setAzureKey(h http.Header) {
	if k := g.cfg.Azure.Key; k != "" {
		h.Set("Api-Key", k)
	}
}

// azureStreamUsage reports whether an upstream stream of Azure OpenAI
// may be asked for its usage (stream_options.include_usage): on the v1
// routes and from api-version 2024-09-01 on; an older version refuses
// the field, and its stream is charged by counting its output.
func azureStreamUsage(a *azureCall) bool {
	if a == nil || a.version == "" {
		return true
	}
	v := a.version
	if len(v) < len("2024-09-01") || v[0] < '0' || v[0] > '9' {
		return true // "preview", "latest": the current versions
	}
	return v[:len("2024-09-01")] >= "2024-09-01"
}

// azureShape marks the responses to the Azure OpenAI routes: the
// gateway's errors on them take Azure's shape (writeError).
type azureShape struct{}

// azureShaped reports whether w answers an Azure OpenAI route.
func azureShaped(w http.ResponseWriter) bool { return wraps[shapedWriter[azureShape]](w) }

// azureErrorBody returns an error in Azure OpenAI's shape:
// {"error":{"code","message"}}. Azure spells the code of a 401 and a 429
// as the status ("429"), which clients written for it test; the
// gateway's own code then goes in innererror.code.
func azureErrorBody(status int, code, msg string) []byte {
	b := make([]byte, 0, 96+len(msg))
	b = append(b, `{"error":{"code":`...)
	inner := ""
	if status == http.StatusUnauthorized || status == http.StatusTooManyRequests {
		code, inner = strconv.Itoa(status), code
	}
	b = appendJSONString(b, code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, msg)
	if inner != "" && inner != code {
		b = append(b, `,"innererror":{"code":`...)
		b = appendJSONString(b, inner)
		b = append(b, '}')
	}
	return append(b, "}}"...)
}
