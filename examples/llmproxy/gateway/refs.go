package gateway

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/weights"
)

// refProblem is an object stored upstream that a request body may not
// name: the field holding its id and why, in words fit for the client
// (never the id itself).
type refProblem struct{ field, msg string }

func (p *refProblem) Error() string { return p.field + ": " + p.msg }

// The reasons a reference is refused (see checkRefs).
const (
	msgUnknownFile = "no file with this id was uploaded through this gateway for your account: a request names only the files its tenant uploaded, or its batches produced"
	msgItemRef     = "this gateway does not serve references to stored items: send the item itself, or continue a response with previous_response_id"
	msgVectorStore = "this gateway does not serve vector stores: a file_search tool cannot name one"
	msgAudio       = "this gateway does not serve references to the audio of earlier responses: send the assistant message's transcript as its content instead"
	msgPrompt      = "this gateway does not serve stored prompts: send the instructions and input themselves"
	msgSkill       = "this gateway does not serve skills uploaded to the account: only Anthropic's own skills (type anthropic) can be named"
	msgContainer   = "this gateway does not serve containers by id: let the tool create its own (a container of type auto, or none)"
)

// checkRefs checks the objects stored upstream that a body of tenant
// names (e.Refs), before anything is admitted: every tenant's objects
// live in the one provider account, which reads any of them for whoever
// names it. A file must be the tenant's own: a batch input file it
// uploaded through the gateway, or the output or error file of one of
// its batches, on the upstream whose files the gateway records
// (gatewayFiles: Config.Upstream; the files of Azure OpenAI's resource
// and of Anthropic's are never recorded), unless Config.AllowUnknownFiles.
// An item reference, and the audio of an earlier Chat Completions
// response, are refused unless ResponsesAPI.AllowUnknownChains (the
// gateway records responses, not their items or audio), a vector store
// unless Config.AllowVectorStores (the gateway serves no vector stores),
// a stored prompt or a custom skill unless Config.AllowStoredPrompts,
// and a container unless Config.AllowContainers (the gateway proxies
// none of their creation).
// A file whose size the gateway knows (batches.fileSize) adds one token
// per 4 of its bytes to e's prompt: its reference alone prices nothing
// of what the provider reads.
func (g *Gateway) checkRefs(tenant string, gatewayFiles bool, e *weights.Estimate) error {
	for _, r := range e.Refs {
		switch r.Kind {
		case weights.RefFile:
			size, owned := int64(0), false
			if gatewayFiles {
				size, owned = g.batches.fileSize(tenant, r.ID)
			}
			if !owned && !g.cfg.AllowUnknownFiles {
				return &refProblem{r.Field, msgUnknownFile}
			}
			e.InputTokens = min(satSum(e.InputTokens, size/4+min(size%4, 1)), limits.MaxAmount)
		case weights.RefItem:
			if !g.responses.cfg.AllowUnknownChains {
				return &refProblem{r.Field, msgItemRef}
			}
		case weights.RefAudio:
			if !g.responses.cfg.AllowUnknownChains {
				return &refProblem{r.Field, msgAudio}
			}
		case weights.RefPrompt:
			if !g.cfg.AllowStoredPrompts {
				return &refProblem{r.Field, msgPrompt}
			}
		case weights.RefSkill:
			if !g.cfg.AllowStoredPrompts {
				return &refProblem{r.Field, msgSkill}
			}
		case weights.RefContainer:
			if !g.cfg.AllowContainers {
				return &refProblem{r.Field, msgContainer}
			}
		case weights.RefVectorStore:
			if !g.cfg.AllowVectorStores {
				return &refProblem{r.Field, msgVectorStore}
			}
		default:
			return &refProblem{r.Field, "this gateway does not serve objects of this kind"}
		}
	}
	return nil
}

// refsAllowed is checkRefs for a request on rt, answering the client
// itself (400 naming the field) when a reference is refused.
func (g *Gateway) refsAllowed(c echo.Context, rt route, tenant string, e *weights.Estimate) bool {
	err := g.checkRefs(tenant, !rt.azure() && !rt.anthropic() && !rt.gemini() && !rt.bedrock(), e)
	if err == nil {
		return true
	}
	p := err.(*refProblem)
	g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_value", p.field, p.field+": "+p.msg+".")
	return false
}
