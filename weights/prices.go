package weights

import (
	"errors"
	"fmt"
	"maps"
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
	// CacheWrite is the price of a million prompt tokens written to the
	// provider's prompt cache (Anthropic's cache_creation_input_tokens,
	// billed above the input price: 1.25 times it for a five-minute
	// cache). Zero means the Input price.
	CacheWrite float64 `json:"cache_write,omitempty" yaml:"cache_write,omitempty"`
	// BatchDiscount is the part of every price taken off for work sent
	// through a provider's Batch API, from 0 (none) up to but not
	// including 1: 0.5 is half price, as OpenAI and Anthropic bill
	// batches. See [Price.Batch].
	BatchDiscount float64 `json:"batch_discount,omitempty" yaml:"batch_discount,omitempty"`
}

// Batch returns the price of work sent through a Batch API: every part
// of p less its BatchDiscount, which the result no longer carries.
func (p Price) Batch() Price {
	k := 1 - p.BatchDiscount
	if !(k > 0 && k <= 1) { // an unvalidated discount never makes work free nor dearer
		k = 1
	}
	return Price{Input: p.Input * k, Output: p.Output * k, CachedInput: p.CachedInput * k, CacheWrite: p.CacheWrite * k}
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
// whole request: prompt tokens read from the cache at the CachedInput
// price, prompt tokens written to it at CacheWrite, the other prompt
// tokens at Input, and completion tokens at Output. The cached and
// written parts count as at most the prompt, reads first.
func (p Price) CostMicros(u Usage) int64 {
	in := max(u.InputTokens, 0)
	cached := min(max(u.CachedInputTokens, 0), in)
	written := min(max(u.CacheWriteInputTokens, 0), in-cached)
	total := costPico(in-cached-written, pico(p.Input))
	total = satAdd(total, costPico(cached, pico(orInput(p.CachedInput, p.Input))))
	total = satAdd(total, costPico(written, pico(orInput(p.CacheWrite, p.Input))))
	total = satAdd(total, costPico(u.OutputTokens, pico(p.Output)))
	return ceilDiv(total, picoPerMicro)
}

// orInput returns price, or input when price is zero (not configured).
func orInput(price, input float64) float64 {
	if price == 0 {
		return input
	}
	return price
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
	}{{"input", p.Input}, {"output", p.Output}, {"cached_input", p.CachedInput}, {"cache_write", p.CacheWrite}} {
		if f.v < 0 || f.v > maxPrice || math.IsNaN(f.v) {
			errs = append(errs, fmt.Errorf("%s.%s: must be between 0 and %g US dollars per million tokens", path, f.name, maxPrice))
		}
	}
	if !(p.BatchDiscount >= 0 && p.BatchDiscount < 1) {
		errs = append(errs, fmt.Errorf("%s.batch_discount: must be at least 0 and below 1 (0.5 is half price)", path))
	}
	return errs
}

// PriceSource says where the price of a model came from. Its String form
// is a fixed, short label value for a metric.
type PriceSource uint8

// The sources of a price.
const (
	// PriceUnpriced: no entry matches the model and no fallback price is
	// configured. A caller refuses the request (an HTTP gateway answers
	// 400): serving it would let it run free under a spend limit.
	PriceUnpriced PriceSource = iota
	// PriceListed: an entry of the table matches the model's name.
	PriceListed
	// PriceBaseModel: the model is fine-tuned
	// ("ft:gpt-4o-mini-2024-07-18:org:custom:id") and no entry matches its
	// own name, so it is priced as its base model. (A legacy fine-tune,
	// "davinci-002:ft-org-2023-01-01", starts with its base and is
	// PriceListed by prefix.)
	PriceBaseModel
	// PriceFallback: no entry matches; the table's fallback price applies.
	PriceFallback
)

// String returns the source as a metric label value: "unpriced",
// "listed", "base_model" or "fallback".
func (s PriceSource) String() string {
	switch s {
	case PriceUnpriced:
		return "unpriced"
	case PriceListed:
		return "listed"
	case PriceBaseModel:
		return "base_model"
	case PriceFallback:
		return "fallback"
	}
	return "unknown"
}

// builtinPrices are OpenAI's, Anthropic's and Google's list prices in US dollars per
// million tokens (standard tier, text tokens; for Claude, CachedInput is
// the cache-read price and CacheWrite the five-minute cache-write price,
// 1.25 times the input price), as published in 2025, each with the
// providers' Batch API discount of one half. A policy file's prices
// section starts from them; see [DefaultPrices].
var builtinPrices = withBatchDiscount(0.5, map[string]Price{
	"gpt-5":                  {Input: 1.25, Output: 10.00, CachedInput: 0.125},
	"gpt-5-mini":             {Input: 0.25, Output: 2.00, CachedInput: 0.025},
	"gpt-5-nano":             {Input: 0.05, Output: 0.40, CachedInput: 0.005},
	"gpt-5-pro":              {Input: 15.00, Output: 120.00},
	"gpt-4.5":                {Input: 75.00, Output: 150.00, CachedInput: 37.50},
	"gpt-4.1":                {Input: 2.00, Output: 8.00, CachedInput: 0.50},
	"gpt-4.1-mini":           {Input: 0.40, Output: 1.60, CachedInput: 0.10},
	"gpt-4.1-nano":           {Input: 0.10, Output: 0.40, CachedInput: 0.025},
	"gpt-4o":                 {Input: 2.50, Output: 10.00, CachedInput: 1.25},
	"gpt-4o-2024-05-13":      {Input: 5.00, Output: 15.00},
	"gpt-4o-realtime":        {Input: 5.00, Output: 20.00, CachedInput: 2.50},
	"gpt-4o-mini":            {Input: 0.15, Output: 0.60, CachedInput: 0.075},
	"gpt-4o-mini-realtime":   {Input: 0.60, Output: 2.40, CachedInput: 0.30},
	"chatgpt-4o":             {Input: 5.00, Output: 15.00},
	"o1":                     {Input: 15.00, Output: 60.00, CachedInput: 7.50},
	"o1-mini":                {Input: 1.10, Output: 4.40, CachedInput: 0.55},
	"o1-pro":                 {Input: 150.00, Output: 600.00},
	"o3":                     {Input: 2.00, Output: 8.00, CachedInput: 0.50},
	"o3-mini":                {Input: 1.10, Output: 4.40, CachedInput: 0.55},
	"o3-pro":                 {Input: 20.00, Output: 80.00},
	"o3-deep-research":       {Input: 10.00, Output: 40.00, CachedInput: 2.50},
	"o4-mini":                {Input: 1.10, Output: 4.40, CachedInput: 0.275},
	"o4-mini-deep-research":  {Input: 2.00, Output: 8.00, CachedInput: 0.50},
	"codex-mini":             {Input: 1.50, Output: 6.00, CachedInput: 0.375},
	"computer-use-preview":   {Input: 3.00, Output: 12.00},
	"gpt-4":                  {Input: 30.00, Output: 60.00},
	"gpt-4-32k":              {Input: 60.00, Output: 120.00},
	"gpt-4-turbo":            {Input: 10.00, Output: 30.00},
	"gpt-4-0125-preview":     {Input: 10.00, Output: 30.00},
	"gpt-4-1106":             {Input: 10.00, Output: 30.00},
	"gpt-4-vision":           {Input: 10.00, Output: 30.00},
	"gpt-3.5-turbo":          {Input: 0.50, Output: 1.50},
	"gpt-3.5-turbo-instruct": {Input: 1.50, Output: 2.00},
	"gpt-35-turbo":           {Input: 0.50, Output: 1.50}, // Azure OpenAI deployment spelling
	"davinci-002":            {Input: 2.00, Output: 2.00},
	"babbage-002":            {Input: 0.40, Output: 0.40},
	"text-embedding-3-small": {Input: 0.02},
	"text-embedding-3-large": {Input: 0.13},
	"text-embedding-ada-002": {Input: 0.10},
	"claude-opus-4":          {Input: 15.00, Output: 75.00, CachedInput: 1.50, CacheWrite: 18.75},
	"claude-opus-4-5":        {Input: 5.00, Output: 25.00, CachedInput: 0.50, CacheWrite: 6.25},
	"claude-sonnet-4":        {Input: 3.00, Output: 15.00, CachedInput: 0.30, CacheWrite: 3.75},
	"claude-haiku-4-5":       {Input: 1.00, Output: 5.00, CachedInput: 0.10, CacheWrite: 1.25},
	"claude-3-7-sonnet":      {Input: 3.00, Output: 15.00, CachedInput: 0.30, CacheWrite: 3.75},
	"claude-3-5-sonnet":      {Input: 3.00, Output: 15.00, CachedInput: 0.30, CacheWrite: 3.75},
	"claude-3-5-haiku":       {Input: 0.80, Output: 4.00, CachedInput: 0.08, CacheWrite: 1.00},
	"claude-3-opus":          {Input: 15.00, Output: 75.00, CachedInput: 1.50, CacheWrite: 18.75},
	"claude-3-haiku":         {Input: 0.25, Output: 1.25, CachedInput: 0.03, CacheWrite: 0.30},
	// Gemini API (paid tier, text, image and video input; thinking is
	// output), from https://ai.google.dev/gemini-api/docs/pricing as
	// published in late 2025 (not re-read against the live page when
	// entered: check it before relying on them). Where the page bills
	// prompts over 200k tokens at a higher rate (the Pro models), the
	// higher rate is the entry, so no
	// prompt is priced below its bill; CachedInput is the context-cache
	// read price of the same tier (storage is billed apart, by the hour,
	// and not priced here). Audio input on the Flash models is billed
	// above the text rate (1.00 on gemini-2.5-flash) and is priced here at
	// the text rate.
	"gemini-3-pro":                 {Input: 4.00, Output: 18.00, CachedInput: 0.40},
	"gemini-2.5-pro":               {Input: 2.50, Output: 15.00, CachedInput: 0.25},
	"gemini-2.5-flash":             {Input: 0.30, Output: 2.50, CachedInput: 0.03},
	"gemini-2.5-flash-lite":        {Input: 0.10, Output: 0.40, CachedInput: 0.01},
	"gemini-2.5-flash-image":       {Input: 0.30, Output: 30.00},
	"gemini-2.5-flash-preview-tts": {Input: 0.50, Output: 10.00},
	"gemini-2.5-pro-preview-tts":   {Input: 1.00, Output: 20.00},
	"gemini-2.0-flash":             {Input: 0.10, Output: 0.40, CachedInput: 0.025},
	"gemini-2.0-flash-lite":        {Input: 0.075, Output: 0.30},
})

// withBatchDiscount sets the batch discount of every price of table.
func withBatchDiscount(d float64, table map[string]Price) map[string]Price {
	for name, p := range table {
		p.BatchDiscount = d
		table[name] = p
	}
	return table
}

// DefaultPrices returns a copy of the built-in price table: OpenAI's and
// Anthropic's list prices, per model name prefix, in US dollars per million tokens. It is
// the default of a policy file's prices section and of
// [PricesConfig].
func DefaultPrices() map[string]Price { return maps.Clone(builtinPrices) }

// PricesConfig configures a [Prices] table, as a policy file's prices
// section does. The zero value is the built-in table with unpriced models
// refused.
type PricesConfig struct {
	// Models prices models by name prefix (case-insensitive). An entry
	// replaces the built-in entry of the same name and adds to the others.
	Models map[string]Price
	// OmitBuiltin leaves the built-in table out: only Models are priced.
	OmitBuiltin bool
	// Fallback, when not nil, prices every model no entry matches. Its
	// input and output prices must be above zero. Nil refuses such models:
	// [Prices.Resolve] reports false.
	Fallback *Price
	// Aliases price a model name as another model: an Azure deployment's
	// name, an in-house name for a hosted model. Each alias, by name
	// prefix like a model entry (case-insensitive), gets the price the
	// table without aliases gives its target, which must be priced by an
	// entry (the fallback price does not count: an alias of an unpriced
	// model would hide it). An alias may not also be an entry of Models.
	Aliases map[string]string
}

// maxModelName bounds a model name in a price table.
const maxModelName = 256

// Prices is a model price table. A model is priced by the entry whose name
// is the longest prefix of its lower-cased name, so "gpt-4o-mini" can be
// priced apart from "gpt-4o" and "gpt-4o-2024-08-06" falls under "gpt-4o".
// A name with a provider part ("openai/gpt-4o") is also tried without it,
// and a fine-tuned model with no entry of its own is priced as its base
// model (see [PriceBaseModel]). A model no entry matches gets the fallback
// price, if one is configured, or is unpriced. A nil *Prices prices
// nothing. A Prices is immutable and safe for concurrent use.
type Prices struct {
	entries  []priceEntry // sorted by descending prefix length
	fallback *Price
}

type priceEntry struct {
	prefix string
	price  Price
}

// NewPrices validates a table of prices keyed by model name prefix and
// returns it: exactly that table, without the built-in one and without a
// fallback price. Every problem is reported at once, with the key. It is
// NewPriceTable(PricesConfig{Models: table, OmitBuiltin: true}).
func NewPrices(table map[string]Price) (*Prices, error) {
	return NewPriceTable(PricesConfig{Models: table, OmitBuiltin: true})
}

// NewPriceTable validates cfg and returns its price table. Every problem
// is reported at once, with its path (prices["gpt-4o"].input, fallback.output).
func NewPriceTable(cfg PricesConfig) (*Prices, error) {
	var errs []error
	p := &Prices{entries: make([]priceEntry, 0, len(cfg.Models)+len(builtinPrices))}
	seen := map[string]string{}
	for name, price := range cfg.Models {
		key := strings.ToLower(name)
		path := fmt.Sprintf("prices[%q]", name)
		if key == "" || len(key) > maxModelName {
			errs = append(errs, fmt.Errorf("%s: model name must not be empty nor longer than %d bytes", path, maxModelName))
		}
		if other, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("%s: duplicates prices[%q] (names are case-insensitive)", path, other))
		}
		seen[key] = name
		errs = append(errs, price.validate(path)...)
		p.entries = append(p.entries, priceEntry{prefix: key, price: price})
	}
	if !cfg.OmitBuiltin {
		for name, price := range builtinPrices {
			if _, replaced := seen[name]; !replaced {
				p.entries = append(p.entries, priceEntry{prefix: name, price: price})
			}
		}
	}
	if f := cfg.Fallback; f != nil {
		errs = append(errs, f.validate("fallback")...)
		if !(f.Input > 0 && f.Output > 0) {
			errs = append(errs, errors.New("fallback: input and output must be above zero: a fallback of nothing lets unpriced models run free"))
		}
		fb := *f
		p.fallback = &fb
	}
	p.sort()
	errs = append(errs, p.alias(cfg.Aliases, seen)...)
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return nil, fmt.Errorf("weights: invalid prices: %w", errors.Join(errs...))
	}
	return p, nil
}

// sort orders the entries by descending prefix length: the first match is
// the longest.
func (p *Prices) sort() {
	sort.Slice(p.entries, func(i, j int) bool {
		a, b := p.entries[i].prefix, p.entries[j].prefix
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
}

// alias adds an entry per alias, priced as its target by the entries
// without aliases (so one alias never prices another).
func (p *Prices) alias(aliases map[string]string, models map[string]string) []error {
	var errs []error
	var add []priceEntry
	for name, target := range aliases {
		key := strings.ToLower(name)
		path := fmt.Sprintf("aliases[%q]", name)
		if key == "" || len(key) > maxModelName || len(target) > maxModelName {
			errs = append(errs, fmt.Errorf("%s: model names must not be empty nor longer than %d bytes", path, maxModelName))
			continue
		}
		if other, dup := models[key]; dup {
			errs = append(errs, fmt.Errorf("%s: is also priced as prices[%q]: an alias has no price of its own", path, other))
			continue
		}
		pr, src, ok := p.Resolve(target)
		if !ok || src == PriceFallback {
			errs = append(errs, fmt.Errorf("%s: %q has no price: an alias must name a priced model", path, target))
			continue
		}
		add = append(add, priceEntry{prefix: key, price: pr})
	}
	if len(errs) == 0 && len(add) > 0 {
		p.entries = append(p.entries, add...)
		p.sort()
	}
	return errs
}

// Resolve returns the price to charge for a model and where it came from:
// the table's entry for its name (tried whole, then without a provider
// part, then as the provider's own name of an Amazon Bedrock model id,
// see [BedrockModel]), else its base model's entry when it is fine-tuned, else the
// fallback price. ok is false, with PriceUnpriced, when none applies: the
// caller refuses the request rather than serve it for free.
func (p *Prices) Resolve(model string) (price Price, source PriceSource, ok bool) {
	if p == nil {
		return Price{}, PriceUnpriced, false
	}
	name := strings.ToLower(model)
	if pr, ok := p.match(name); ok {
		return pr, PriceListed, true
	}
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
		if pr, ok := p.match(name); ok {
			return pr, PriceListed, true
		}
	}
	if b := BedrockModel(name); b != name {
		if pr, ok := p.match(b); ok {
			return pr, PriceListed, true
		}
	}
	if base := baseModel(name); base != "" {
		if pr, ok := p.match(base); ok {
			return pr, PriceBaseModel, true
		}
	}
	if p.fallback != nil {
		return *p.fallback, PriceFallback, true
	}
	return Price{}, PriceUnpriced, false
}

// Lookup returns the price to charge for a model and whether one applies,
// the fallback price included: Resolve without the source.
func (p *Prices) Lookup(model string) (Price, bool) {
	pr, _, ok := p.Resolve(model)
	return pr, ok
}

// baseModel returns the base model of a fine-tuned model's lower-cased
// name, "ft:BASE:org:suffix:id", or "" when the name is not one. (The
// legacy form, "BASE:ft-org-date", starts with its base and is matched by
// prefix.)
func baseModel(name string) string {
	rest, ok := strings.CutPrefix(name, "ft:")
	if !ok {
		return ""
	}
	base, _, _ := strings.Cut(rest, ":")
	return base
}

func (p *Prices) match(name string) (Price, bool) {
	if name == "" {
		return Price{}, false
	}
	for _, e := range p.entries {
		if strings.HasPrefix(name, e.prefix) {
			return e.price, true
		}
	}
	return Price{}, false
}
