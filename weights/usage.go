package weights

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Usage is what a request actually cost, as the upstream reported it (or as
// counted from a stream that ended without a report, see Estimated).
type Usage struct {
	// InputTokens is the prompt size: prompt_tokens in the Chat
	// Completions, Completions and Embeddings APIs, input_tokens in the
	// Responses API. It includes CachedInputTokens.
	InputTokens int64 `json:"input_tokens"`
	// OutputTokens is the completion size: completion_tokens or
	// output_tokens. It includes ReasoningTokens.
	OutputTokens int64 `json:"output_tokens"`
	// CachedInputTokens is the part of InputTokens served from the
	// provider's prompt cache (prompt_tokens_details.cached_tokens or
	// input_tokens_details.cached_tokens).
	CachedInputTokens int64 `json:"cached_input_tokens,omitempty"`
	// ReasoningTokens is the part of OutputTokens spent on hidden reasoning
	// (completion_tokens_details.reasoning_tokens or
	// output_tokens_details.reasoning_tokens).
	ReasoningTokens int64 `json:"reasoning_tokens,omitempty"`
	// Estimated reports that the upstream sent no usage and the figures were
	// counted by this package: InputTokens from the request's estimate,
	// OutputTokens by tokenising the streamed text (hidden reasoning tokens
	// cannot be counted this way).
	Estimated bool `json:"estimated,omitempty"`
}

// TotalTokens returns InputTokens + OutputTokens.
func (u Usage) TotalTokens() int64 { return satAdd(max(u.InputTokens, 0), max(u.OutputTokens, 0)) }

// rawUsage is a usage object in any of the API's shapes.
type rawUsage struct {
	PromptTokens        *int64       `json:"prompt_tokens"`
	CompletionTokens    *int64       `json:"completion_tokens"`
	TotalTokens         *int64       `json:"total_tokens"`
	InputTokens         *int64       `json:"input_tokens"`
	OutputTokens        *int64       `json:"output_tokens"`
	PromptDetails       *usageDetail `json:"prompt_tokens_details"`
	InputDetails        *usageDetail `json:"input_tokens_details"`
	CompletionDetails   *usageDetail `json:"completion_tokens_details"`
	OutputTokensDetails *usageDetail `json:"output_tokens_details"`
}

type usageDetail struct {
	CachedTokens    int64 `json:"cached_tokens"`
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

var errNegativeUsage = errors.New("negative token count")

// usage converts r; ok is false when r holds no token count at all.
func (r *rawUsage) usage() (u Usage, ok bool, err error) {
	if r == nil {
		return Usage{}, false, nil
	}
	pick := func(a, b *int64) (int64, bool) {
		if a != nil {
			return *a, true
		}
		if b != nil {
			return *b, true
		}
		return 0, false
	}
	var okIn, okOut bool
	u.InputTokens, okIn = pick(r.PromptTokens, r.InputTokens)
	u.OutputTokens, okOut = pick(r.CompletionTokens, r.OutputTokens)
	if !okIn && !okOut && r.TotalTokens != nil {
		// Only a total: count it as input (embeddings-like), so nothing is lost.
		u.InputTokens, okIn = *r.TotalTokens, true
	}
	for _, d := range []*usageDetail{r.PromptDetails, r.InputDetails} {
		if d != nil {
			u.CachedInputTokens = max(u.CachedInputTokens, d.CachedTokens)
		}
	}
	for _, d := range []*usageDetail{r.CompletionDetails, r.OutputTokensDetails} {
		if d != nil {
			u.ReasoningTokens = max(u.ReasoningTokens, d.ReasoningTokens)
		}
	}
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.ReasoningTokens < 0 {
		return Usage{}, false, errNegativeUsage
	}
	return u, okIn || okOut, nil
}

// ParseUsage reads the usage of a non-streaming response body of any of the
// endpoints listed at [Endpoint]: the top-level "usage" object (or, for a
// Responses API event, "response.usage"). It returns [ErrNoUsage] when the
// body has none, and an error when the body is not JSON or a count is
// negative.
func ParseUsage(body []byte) (Usage, error) {
	var r struct {
		Usage    *rawUsage `json:"usage"`
		Response *struct {
			Usage *rawUsage `json:"usage"`
		} `json:"response"`
	}
	if firstByte(body) != '{' {
		return Usage{}, errors.New("weights: parsing response usage: want a JSON object")
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return Usage{}, fmt.Errorf("weights: parsing response usage: %w", err)
	}
	raw := r.Usage
	if raw == nil && r.Response != nil {
		raw = r.Response.Usage
	}
	u, ok, err := raw.usage()
	if err != nil {
		return Usage{}, fmt.Errorf("weights: parsing response usage: %w", err)
	}
	if !ok {
		return Usage{}, ErrNoUsage
	}
	return u, nil
}
