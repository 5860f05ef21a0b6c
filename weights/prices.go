package weights

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Price is a model's list price in US dollars per million tokens, as
// providers publish it.
type Price struct {
	// Input is the price of a million prompt tokens.
	Input float64 `json:"input" yaml:"input"`
	// Output is the price of a million completion tokens (reasoning tokens
	// included, as providers bill them).
	Output float64 `json:"output" yaml:"output"`
	// CachedInput is the price of a million prompt tokens served from the
	// provider's prompt cache. Zero means the Input price: an estimate
	// cannot know what will be cached, and a price of nothing would let
	// cached traffic run free.
	CachedInput float64 `json:"cached_input,omitempty" yaml:"cached_input,omitempty"`
}

// picoPerMicro converts pico-dollars to micro-dollars.
const picoPerMicro = 1_000_000

// maxPrice bounds a configured price, so that cost arithmetic cannot
// overflow: a million dollars per million tokens.
const maxPrice = 1e6

// pico returns a per-million-token price as pico-dollars per token. A
// dollar per million tokens is a micro-dollar per token, or a million
// pico-dollars: keeping prices in whole pico-dollars makes costs exact
// integers for prices with up to six decimals.
func pico(usdPerMillion float64) int64 { return int64(math.Round(usdPerMillion * 1e6)) }

// EstimateMicros prices an estimate of in prompt tokens and out completion
// tokens, in micro-dollars (millionths of a US dollar), rounded up.
func (p Price) EstimateMicros(in, out int64) int64 {
	return p.CostMicros(Usage{InputTokens: in, OutputTokens: out})
}

// CostMicros prices actual usage in micro-dollars, rounded up once for the
// whole request: cached prompt tokens at the CachedInput price, the other
// prompt tokens at Input, and completion tokens at Output.
func (p Price) CostMicros(u Usage) int64 {
	cached := min(max(u.CachedInputTokens, 0), max(u.InputTokens, 0))
	cachedPrice := p.CachedInput
	if cachedPrice == 0 {
		cachedPrice = p.Input
	}
	total := costPico(u.InputTokens-cached, pico(p.Input))
	total = satAdd(total, costPico(cached, pico(cachedPrice)))
	total = satAdd(total, costPico(u.OutputTokens, pico(p.Output)))
	return ceilDiv(total, picoPerMicro)
}

// costPico returns tokens × price in pico-dollars, saturating at
// math.MaxInt64 (over nine million dollars).
func costPico(tokens, picoPerToken int64) int64 {
	if tokens <= 0 || picoPerToken <= 0 {
		return 0
	}
	return satMul(tokens, picoPerToken)
}

// ceilDiv divides non-negative a by positive b, rounding up.
func ceilDiv(a, b int64) int64 { return a/b + min(a%b, 1) }

func (p Price) validate(path string) []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"input", p.Input}, {"output", p.Output}, {"cached_input", p.CachedInput}} {
		if f.v < 0 || f.v > maxPrice || math.IsNaN(f.v) {
			errs = append(errs, fmt.Errorf("%s.%s: must be between 0 and %g US dollars per million tokens", path, f.name, maxPrice))
		}
	}
	return errs
}

// Prices is a model price table. A model is priced by the entry whose name
// is the longest prefix of its lower-cased name, so "gpt-4o-mini" can be
// priced apart from "gpt-4o" and "gpt-4o-2024-08-06" falls under "gpt-4o".
// A name with a provider part ("openai/gpt-4o") is also tried without it.
// A Prices is immutable and safe for concurrent use.
type Prices struct {
	entries []priceEntry // sorted by descending prefix length
}

type priceEntry struct {
	prefix string
	price  Price
}

// NewPrices validates a table of prices keyed by model name prefix and
// returns it. Every problem is reported at once, with the key.
func NewPrices(table map[string]Price) (*Prices, error) {
	var errs []error
	p := &Prices{entries: make([]priceEntry, 0, len(table))}
	seen := map[string]string{}
	for name, price := range table {
		key := strings.ToLower(name)
		path := fmt.Sprintf("prices[%q]", name)
		if key == "" {
			errs = append(errs, fmt.Errorf("%s: model name must not be empty", path))
		}
		if other, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("%s: duplicates prices[%q] (names are case-insensitive)", path, other))
		}
		seen[key] = name
		errs = append(errs, price.validate(path)...)
		p.entries = append(p.entries, priceEntry{prefix: key, price: price})
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return nil, fmt.Errorf("weights: invalid prices: %w", errors.Join(errs...))
	}
	sort.Slice(p.entries, func(i, j int) bool {
		a, b := p.entries[i].prefix, p.entries[j].prefix
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	return p, nil
}

// Lookup returns the price of a model and whether one is configured.
func (p *Prices) Lookup(model string) (Price, bool) {
	if p == nil || model == "" {
		return Price{}, false
	}
	name := strings.ToLower(model)
	if pr, ok := p.match(name); ok {
		return pr, true
	}
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return p.match(name[i+1:])
	}
	return Price{}, false
}

func (p *Prices) match(name string) (Price, bool) {
	for _, e := range p.entries {
		if strings.HasPrefix(name, e.prefix) {
			return e.price, true
		}
	}
	return Price{}, false
}
