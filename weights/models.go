package weights

import (
	"fmt"
	"strings"
)

// ModelRule says how to count and reserve tokens for the models whose
// lower-cased name starts with Prefix. Rules from [Config.Models] are tried
// before the built-in table, and among rules of one table the longest
// matching prefix wins. A name with a provider part ("openai/gpt-4o",
// "azure/gpt-4.1-mini") is matched whole first and then by the part after
// the last slash.
type ModelRule struct {
	// Prefix is matched against the lower-cased model name. It must not be
	// empty.
	Prefix string `json:"prefix" yaml:"prefix"`
	// Encoding is the exact tokenizer of the family. Leave it empty and set
	// CharsPerToken for a model whose tokenizer is not available.
	Encoding Encoding `json:"encoding,omitempty" yaml:"encoding,omitempty"`
	// CharsPerToken, used when Encoding is empty, estimates tokens as the
	// number of Unicode code points divided by this ratio, rounded up.
	// Calibrate it on the family's own tokenizer with representative text.
	CharsPerToken float64 `json:"chars_per_token,omitempty" yaml:"chars_per_token,omitempty"`
	// TokenScale, when set with Encoding, multiplies the encoding's count
	// of the request's text (not the fixed costs of the format, images or
	// tools), rounded up: for a family whose tokenizer is not public but
	// splits text like a public one at a measured ratio (Claude, see
	// [EndpointMessages]). Zero means 1. It must be in [0.1, 10].
	TokenScale float64 `json:"token_scale,omitempty" yaml:"token_scale,omitempty"`
	// MaxOutputTokens is the output reservation when a request sets no
	// limit of its own. Zero means [Config.DefaultMaxOutputTokens].
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty" yaml:"max_output_tokens,omitempty"`
}

// validate reports the problems of one rule, each prefixed with path.
func (r ModelRule) validate(path string) []error {
	var errs []error
	if r.Prefix == "" {
		errs = append(errs, fmt.Errorf("%s.prefix: must not be empty", path))
	}
	if r.Encoding != "" && !r.Encoding.Valid() {
		errs = append(errs, fmt.Errorf("%s.encoding: unknown encoding %q (want %s or %s)", path, string(r.Encoding), O200kBase, Cl100kBase))
	}
	if r.Encoding != "" && r.CharsPerToken != 0 {
		errs = append(errs, fmt.Errorf("%s: set encoding or chars_per_token, not both", path))
	}
	if r.CharsPerToken < 0 || r.CharsPerToken > 100 || r.CharsPerToken != r.CharsPerToken {
		errs = append(errs, fmt.Errorf("%s.chars_per_token: must be in (0, 100]", path))
	}
	if r.TokenScale != 0 && (r.Encoding == "" || !(r.TokenScale >= 0.1 && r.TokenScale <= 10)) {
		errs = append(errs, fmt.Errorf("%s.token_scale: must be in [0.1, 10], with an encoding", path))
	}
	if r.MaxOutputTokens < 0 {
		errs = append(errs, fmt.Errorf("%s.max_output_tokens: must be >= 0", path))
	}
	return errs
}

// builtinModels maps OpenAI model families to their encodings, following
// tiktoken's model table (tiktoken/model.py) and OpenAI's model pages.
var builtinModels = []ModelRule{
	{Prefix: "gpt-5", Encoding: O200kBase},
	{Prefix: "gpt-4.5", Encoding: O200kBase},
	{Prefix: "gpt-4.1", Encoding: O200kBase},
	{Prefix: "gpt-4o", Encoding: O200kBase},
	{Prefix: "chatgpt-4o", Encoding: O200kBase},
	{Prefix: "gpt-oss", Encoding: O200kBase},
	{Prefix: "o1", Encoding: O200kBase},
	{Prefix: "o3", Encoding: O200kBase},
	{Prefix: "o4", Encoding: O200kBase},
	{Prefix: "codex-", Encoding: O200kBase},
	{Prefix: "gpt-4", Encoding: Cl100kBase},
	{Prefix: "gpt-3.5", Encoding: Cl100kBase},
	{Prefix: "gpt-35", Encoding: Cl100kBase}, // Azure OpenAI deployment spelling
	{Prefix: "text-embedding-3", Encoding: Cl100kBase},
	{Prefix: "text-embedding-ada-002", Encoding: Cl100kBase},
	// Claude's tokenizer is not public: cl100k_base scaled (see
	// claudeTokenScale). "anthropic.claude" is the Amazon Bedrock
	// spelling, after a region group for cross-region inference.
	{Prefix: "claude", Encoding: Cl100kBase, TokenScale: claudeTokenScale},
	{Prefix: "anthropic.claude", Encoding: Cl100kBase, TokenScale: claudeTokenScale},
	{Prefix: "us.anthropic.claude", Encoding: Cl100kBase, TokenScale: claudeTokenScale},
	{Prefix: "eu.anthropic.claude", Encoding: Cl100kBase, TokenScale: claudeTokenScale},
	{Prefix: "apac.anthropic.claude", Encoding: Cl100kBase, TokenScale: claudeTokenScale},
	{Prefix: "global.anthropic.claude", Encoding: Cl100kBase, TokenScale: claudeTokenScale},
	// Gemini's tokenizer (SentencePiece, 256k pieces) is not run here:
	// o200k_base is the nearer of the two public ones, and the
	// settlement charges usageMetadata's exact counts.
	{Prefix: "gemini", Encoding: O200kBase},
}

// matchRule returns the longest rule of rules whose prefix starts name.
func matchRule(rules []ModelRule, name string) (ModelRule, bool) {
	best, found := ModelRule{}, false
	for _, r := range rules {
		if strings.HasPrefix(name, r.Prefix) && (!found || len(r.Prefix) > len(best.Prefix)) {
			best, found = r, true
		}
	}
	return best, found
}

// lookupRule finds the rule for a model name: configured rules first, then
// the built-in table, each tried with the whole name and then with the part
// after the last slash.
func lookupRule(configured []ModelRule, model string) (ModelRule, bool) {
	if r, ok := MatchModel(configured, model); ok {
		return r, true
	}
	return MatchModel(builtinModels, model)
}

// MatchModel returns the rule of rules for a model name as an
// [Estimator] finds its configured ones: the rule with the longest
// prefix of the lower-cased name, tried whole and then with the part
// after the last slash ("openai/gpt-4o"). The rules' prefixes must be
// lower-case.
func MatchModel(rules []ModelRule, model string) (ModelRule, bool) {
	name := strings.ToLower(model)
	if r, ok := matchRule(rules, name); ok {
		return r, true
	}
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return matchRule(rules, name[i+1:])
	}
	return ModelRule{}, false
}
