package upstream

import (
	"net/http"
	"strings"
)

// Azure OpenAI: the simulator serves /openai/deployments/{deployment}/...
// (chat/completions, completions, embeddings, responses) and the routes
// whose body's model names the deployment (/openai/v1/..., and
// /openai/responses), as a resource whose deployments are
// Config.Deployments. Its answers name the deployment's model, as
// Azure's do, and its 429 fault is Azure's.

// azurePath reports whether path is one of Azure OpenAI's.
func azurePath(path string) bool { return strings.HasPrefix(path, "/openai/") }

// azureDeployment resolves the deployment of an Azure OpenAI request
// into req.Model: the path's deployment, else the body's model. It
// answers 404 DeploymentNotFound and returns false for a deployment
// Config.Deployments does not name; without Deployments every
// deployment is served, as the model of its name.
func (s *Server) azureDeployment(w http.ResponseWriter, path string, req *simRequest) bool {
	name := req.Model
	if rest, ok := strings.CutPrefix(path, "/openai/deployments/"); ok {
		name, _, _ = strings.Cut(rest, "/")
	}
	model, ok := name, name != ""
	if s.cfg.Deployments != nil {
		model, ok = s.cfg.Deployments[name]
	}
	if !ok {
		writeAzureError(w, http.StatusNotFound, "DeploymentNotFound",
			"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.")
		return false
	}
	req.Model = model
	return true
}

// azureThrottled answers the 429 fault as Azure OpenAI does: retry-after
// and retry-after-ms, the remaining requests and tokens, and an error
// whose code is "429".
func azureThrottled(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	faultRetryHints(h, r)
	h.Set("X-Ratelimit-Remaining-Requests", "0")
	h.Set("X-Ratelimit-Remaining-Tokens", "0")
	writeAzureError(w, http.StatusTooManyRequests, "429",
		"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "+r.URL.Query().Get("api-version")+
			" have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 1 second.")
}

// writeAzureError answers an error in Azure's shape:
// {"error":{"code","message"}}.
func writeAzureError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}
