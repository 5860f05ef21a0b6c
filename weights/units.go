package weights

// TokenUnits are a request's tokens split the way providers limit and bill
// them: the amounts of the units input_tokens, output_tokens and
// cached_input_tokens of package admission/limits, whose sum is its
// tokens. This package does not import admission: a caller that does
// turns them into unit amounts (in this module, internal/tokenunits).
type TokenUnits struct {
	// Input is the prompt tokens not read from a prompt cache, cache
	// writes included: what Anthropic's input-tokens-per-minute limit
	// counts.
	Input int64
	// Output is the completion tokens, hidden reasoning included, as
	// every provider bills them.
	Output int64
	// CachedInput is the prompt tokens read from a prompt cache.
	CachedInput int64
}

// Total returns Input + Output + CachedInput: the tokens unit.
func (t TokenUnits) Total() int64 { return satAdd(satAdd(t.Input, t.Output), t.CachedInput) }

// Units returns the estimate's figures as units. Before the call nothing
// is known to be cached: the whole prompt is Input, and the output
// reservation is Output.
func (e Estimate) Units() TokenUnits {
	return TokenUnits{Input: max(e.InputTokens, 0), Output: max(e.OutputTokens, 0)}
}

// Units returns the usage's figures as units: the cached part of the
// prompt apart from the rest (negative figures count as zero, and the
// cached part as at most the prompt).
func (u Usage) Units() TokenUnits {
	in := max(u.InputTokens, 0)
	cached := min(max(u.CachedInputTokens, 0), in)
	return TokenUnits{Input: in - cached, Output: max(u.OutputTokens, 0), CachedInput: cached}
}
