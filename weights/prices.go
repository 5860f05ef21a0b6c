package weights

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
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
	// CacheWrite1h is the price of a million prompt tokens written to a
	// one-hour prompt cache (Anthropic's
	// cache_creation.ephemeral_1h_input_tokens, billed at twice the
	// input price). Zero means the CacheWrite price.
	CacheWrite1h float64 `json:"cache_write_1h,omitempty" yaml:"cache_write_1h,omitempty"`
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
	return Price{Input: p.Input * k, Output: p.Output * k, CachedInput: p.CachedInput * k, CacheWrite: p.CacheWrite * k, CacheWrite1h: p.CacheWrite1h * k}
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
// price, prompt tokens written to it at CacheWrite (those written to a
// one-hour cache at CacheWrite1h), the other prompt tokens at Input, and
// completion tokens at Output. The cached and written parts count as at
// most the prompt, reads first, and the one-hour writes as at most the
// writes.
func (p Price) CostMicros(u Usage) int64 {
	in := max(u.InputTokens, 0)
	cached := min(max(u.CachedInputTokens, 0), in)
	written := min(max(u.CacheWriteInputTokens, 0), in-cached)
	long := min(max(u.CacheWrite1hInputTokens, 0), written)
	write := orInput(p.CacheWrite, p.Input)
	total := costPico(in-cached-written, pico(p.Input))
	total = satAdd(total, costPico(cached, pico(orInput(p.CachedInput, p.Input))))
	total = satAdd(total, costPico(written-long, pico(write)))
	total = satAdd(total, costPico(long, pico(orInput(p.CacheWrite1h, write))))
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
	}{{"input", p.Input}, {"output", p.Output}, {"cached_input", p.CachedInput}, {"cache_write", p.CacheWrite}, {"cache_write_1h", p.CacheWrite1h}} {
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

// The providers' pricing pages, the sources of the built-in table.
const (
	SourceOpenAI    = "https://platform.openai.com/docs/pricing"
	SourceAnthropic = "https://docs.anthropic.com/en/docs/about-claude/pricing"
	SourceGoogle    = "https://ai.google.dev/gemini-api/docs/pricing"
	SourceAzure     = "https://azure.microsoft.com/en-us/pricing/details/cognitive-services/openai-service/"
)

// A ListedPrice is an entry of the built-in price table: the list price
// a provider's pricing page gives a model, with the page and the month
// it gives it from. See [BuiltinPrices].
type ListedPrice struct {
	// Model is the model name the entry prices, and the names that
	// extend it (see [Prices]).
	Model string
	// Price is the page's price, with the provider's Batch API discount.
	Price Price
	// Since is the month ("2025-08") from which Source lists Price: the
	// model's release or the price's last change.
	Since string
	// Source is the provider's pricing page.
	Source string
	// Unverified marks an entry whose figures or month were not checked
	// against Source when it was entered: check it before relying on it,
	// or give the model a price of the policy file's.
	Unverified bool
}

// listed is the built-in table: OpenAI's, Anthropic's and Google's list
// prices in US dollars per million tokens (standard tier, text tokens),
// each with the providers' Batch API discount of one half. For Claude,
// CachedInput is the cache-read price and CacheWrite the five-minute
// cache-write price, 1.25 times the input price, and CacheWrite1h the
// one-hour cache-write price, twice the input price; a prompt over 200k
// tokens to a Sonnet with the long context is billed above these and
// priced at them. For Gemini, where the page bills prompts over 200k
// tokens at a higher rate (the Pro models), the higher rate is the entry,
// so no prompt is priced below its bill; CachedInput is the context-cache
// read price of the same tier (storage is billed apart, by the hour, and
// not priced here); audio input on the Flash models is billed above the
// text rate and is priced here at the text rate. The Gemini entries were
// not re-read against the live page when entered: they are Unverified.
//
// A model family the table does not list (a newer release: gpt-5.2,
// claude-opus-4-6) has no built-in price rather than an older family's
// (see [Prices]): give it one in the policy file.
var listed = []ListedPrice{
	{"gpt-5", Price{Input: 1.25, Output: 10.00, CachedInput: 0.125}, "2025-08", SourceOpenAI, false},
	{"gpt-5-mini", Price{Input: 0.25, Output: 2.00, CachedInput: 0.025}, "2025-08", SourceOpenAI, false},
	{"gpt-5-nano", Price{Input: 0.05, Output: 0.40, CachedInput: 0.005}, "2025-08", SourceOpenAI, false},
	{"gpt-5-pro", Price{Input: 15.00, Output: 120.00}, "2025-10", SourceOpenAI, false},
	{"gpt-5.1", Price{Input: 1.25, Output: 10.00, CachedInput: 0.125}, "2025-11", SourceOpenAI, false},
	{"gpt-4.5", Price{Input: 75.00, Output: 150.00, CachedInput: 37.50}, "2025-02", SourceOpenAI, true},
	{"gpt-4.1", Price{Input: 2.00, Output: 8.00, CachedInput: 0.50}, "2025-04", SourceOpenAI, false},
	{"gpt-4.1-mini", Price{Input: 0.40, Output: 1.60, CachedInput: 0.10}, "2025-04", SourceOpenAI, false},
	{"gpt-4.1-nano", Price{Input: 0.10, Output: 0.40, CachedInput: 0.025}, "2025-04", SourceOpenAI, false},
	{"gpt-4o", Price{Input: 2.50, Output: 10.00, CachedInput: 1.25}, "2024-08", SourceOpenAI, false},
	{"gpt-4o-2024-05-13", Price{Input: 5.00, Output: 15.00}, "2024-05", SourceOpenAI, false},
	{"gpt-4o-realtime", Price{Input: 5.00, Output: 20.00, CachedInput: 2.50}, "2024-12", SourceOpenAI, true},
	{"gpt-4o-mini", Price{Input: 0.15, Output: 0.60, CachedInput: 0.075}, "2024-07", SourceOpenAI, false},
	{"gpt-4o-mini-realtime", Price{Input: 0.60, Output: 2.40, CachedInput: 0.30}, "2024-12", SourceOpenAI, true},
	{"chatgpt-4o", Price{Input: 5.00, Output: 15.00}, "2024-08", SourceOpenAI, false},
	{"o1", Price{Input: 15.00, Output: 60.00, CachedInput: 7.50}, "2024-12", SourceOpenAI, false},
	{"o1-mini", Price{Input: 1.10, Output: 4.40, CachedInput: 0.55}, "2025-01", SourceOpenAI, false},
	{"o1-pro", Price{Input: 150.00, Output: 600.00}, "2025-03", SourceOpenAI, false},
	{"o3", Price{Input: 2.00, Output: 8.00, CachedInput: 0.50}, "2025-06", SourceOpenAI, false},
	{"o3-mini", Price{Input: 1.10, Output: 4.40, CachedInput: 0.55}, "2025-01", SourceOpenAI, false},
	{"o3-pro", Price{Input: 20.00, Output: 80.00}, "2025-06", SourceOpenAI, false},
	{"o3-deep-research", Price{Input: 10.00, Output: 40.00, CachedInput: 2.50}, "2025-06", SourceOpenAI, false},
	{"o4-mini", Price{Input: 1.10, Output: 4.40, CachedInput: 0.275}, "2025-04", SourceOpenAI, false},
	{"o4-mini-deep-research", Price{Input: 2.00, Output: 8.00, CachedInput: 0.50}, "2025-06", SourceOpenAI, false},
	{"codex-mini", Price{Input: 1.50, Output: 6.00, CachedInput: 0.375}, "2025-05", SourceOpenAI, false},
	{"computer-use-preview", Price{Input: 3.00, Output: 12.00}, "2025-03", SourceOpenAI, false},
	{"gpt-4", Price{Input: 30.00, Output: 60.00}, "2023-03", SourceOpenAI, false},
	{"gpt-4-32k", Price{Input: 60.00, Output: 120.00}, "2023-03", SourceOpenAI, false},
	{"gpt-4-turbo", Price{Input: 10.00, Output: 30.00}, "2024-04", SourceOpenAI, false},
	{"gpt-4-0125-preview", Price{Input: 10.00, Output: 30.00}, "2024-01", SourceOpenAI, false},
	{"gpt-4-1106", Price{Input: 10.00, Output: 30.00}, "2023-11", SourceOpenAI, false},
	{"gpt-4-vision", Price{Input: 10.00, Output: 30.00}, "2023-11", SourceOpenAI, false},
	{"gpt-3.5-turbo", Price{Input: 0.50, Output: 1.50}, "2024-01", SourceOpenAI, false},
	{"gpt-3.5-turbo-instruct", Price{Input: 1.50, Output: 2.00}, "2023-09", SourceOpenAI, false},
	// Azure OpenAI's spelling of gpt-3.5-turbo, at OpenAI's price.
	{"gpt-35-turbo", Price{Input: 0.50, Output: 1.50}, "2024-01", SourceAzure, true},
	{"davinci-002", Price{Input: 2.00, Output: 2.00}, "2023-08", SourceOpenAI, false},
	{"babbage-002", Price{Input: 0.40, Output: 0.40}, "2023-08", SourceOpenAI, false},
	{"text-embedding-3-small", Price{Input: 0.02}, "2024-01", SourceOpenAI, false},
	{"text-embedding-3-large", Price{Input: 0.13}, "2024-01", SourceOpenAI, false},
	{"text-embedding-ada-002", Price{Input: 0.10}, "2022-12", SourceOpenAI, false},
	{"claude-opus-4", Price{Input: 15.00, Output: 75.00, CachedInput: 1.50, CacheWrite: 18.75, CacheWrite1h: 30.00}, "2025-05", SourceAnthropic, false},
	{"claude-opus-4-1", Price{Input: 15.00, Output: 75.00, CachedInput: 1.50, CacheWrite: 18.75, CacheWrite1h: 30.00}, "2025-08", SourceAnthropic, false},
	{"claude-opus-4-5", Price{Input: 5.00, Output: 25.00, CachedInput: 0.50, CacheWrite: 6.25, CacheWrite1h: 10.00}, "2025-11", SourceAnthropic, false},
	{"claude-sonnet-4", Price{Input: 3.00, Output: 15.00, CachedInput: 0.30, CacheWrite: 3.75, CacheWrite1h: 6.00}, "2025-05", SourceAnthropic, false},
	{"claude-sonnet-4-5", Price{Input: 3.00, Output: 15.00, CachedInput: 0.30, CacheWrite: 3.75, CacheWrite1h: 6.00}, "2025-09", SourceAnthropic, false},
	{"claude-haiku-4-5", Price{Input: 1.00, Output: 5.00, CachedInput: 0.10, CacheWrite: 1.25, CacheWrite1h: 2.00}, "2025-10", SourceAnthropic, false},
	{"claude-3-7-sonnet", Price{Input: 3.00, Output: 15.00, CachedInput: 0.30, CacheWrite: 3.75, CacheWrite1h: 6.00}, "2025-02", SourceAnthropic, false},
	{"claude-3-5-sonnet", Price{Input: 3.00, Output: 15.00, CachedInput: 0.30, CacheWrite: 3.75, CacheWrite1h: 6.00}, "2024-06", SourceAnthropic, false},
	{"claude-3-5-haiku", Price{Input: 0.80, Output: 4.00, CachedInput: 0.08, CacheWrite: 1.00, CacheWrite1h: 1.60}, "2024-12", SourceAnthropic, true},
	{"claude-3-opus", Price{Input: 15.00, Output: 75.00, CachedInput: 1.50, CacheWrite: 18.75, CacheWrite1h: 30.00}, "2024-03", SourceAnthropic, false},
	{"claude-3-haiku", Price{Input: 0.25, Output: 1.25, CachedInput: 0.03, CacheWrite: 0.30, CacheWrite1h: 0.50}, "2024-03", SourceAnthropic, false},
	{"gemini-3-pro", Price{Input: 4.00, Output: 18.00, CachedInput: 0.40}, "2025-11", SourceGoogle, true},
	{"gemini-2.5-pro", Price{Input: 2.50, Output: 15.00, CachedInput: 0.25}, "2025-06", SourceGoogle, true},
	{"gemini-2.5-flash", Price{Input: 0.30, Output: 2.50, CachedInput: 0.03}, "2025-06", SourceGoogle, true},
	{"gemini-2.5-flash-lite", Price{Input: 0.10, Output: 0.40, CachedInput: 0.01}, "2025-07", SourceGoogle, true},
	{"gemini-2.5-flash-image", Price{Input: 0.30, Output: 30.00}, "2025-08", SourceGoogle, true},
	{"gemini-2.5-flash-preview-tts", Price{Input: 0.50, Output: 10.00}, "2025-05", SourceGoogle, true},
	{"gemini-2.5-pro-preview-tts", Price{Input: 1.00, Output: 20.00}, "2025-05", SourceGoogle, true},
	{"gemini-2.0-flash", Price{Input: 0.10, Output: 0.40, CachedInput: 0.025}, "2025-02", SourceGoogle, true},
	{"gemini-2.0-flash-lite", Price{Input: 0.075, Output: 0.30}, "2025-02", SourceGoogle, true},
}

// builtinPrices is listed by model, each price with the providers'
// Batch API discount of one half. A policy file's prices section starts
// from it; see [DefaultPrices].
var builtinPrices = func() map[string]Price {
	m := make(map[string]Price, len(listed))
	for i := range listed {
		listed[i].Price.BatchDiscount = 0.5
		m[listed[i].Model] = listed[i].Price
	}
	return m
}()

// BuiltinPrices returns the entries of the built-in price table with the
// page each was taken from and the month it dates from, sorted by model
// name: what admitctl prices lists.
func BuiltinPrices() []ListedPrice {
	out := slices.Clone(listed)
	slices.SortFunc(out, func(a, b ListedPrice) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// DefaultPrices returns a copy of the built-in price table: OpenAI's,
// Anthropic's and Google's list prices, per model name, in US dollars per
// million tokens (see [BuiltinPrices] for each entry's page and month). It is
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
// An entry of the built-in table prices only the names of its family: a
// dated snapshot or a variant ("claude-sonnet-4-20250514",
// "gpt-5-codex"), never a newer version or another tier ("gpt-5.1" is not
// "gpt-5", "claude-opus-4-6" not "claude-opus-4", "gpt-4o-audio-preview"
// not "gpt-4o"), which has no built-in price until an entry names it. An
// entry the caller gives (PricesConfig.Models, an alias) is the
// operator's: it prices every name it begins ("llama" prices
// "llama-3.3-70b").
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
	// builtin marks an entry of the built-in table, which prices the
	// names of its family only (see extends); the others price every
	// name they begin.
	builtin bool
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
				p.entries = append(p.entries, priceEntry{prefix: name, price: price, builtin: true})
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
		if e.builtin && extends(name, e.prefix) || !e.builtin && strings.HasPrefix(name, e.prefix) {
			return e.price, true
		}
	}
	return Price{}, false
}

// extends reports whether the lower-cased name is the model a built-in
// entry named prefix prices: prefix itself, or a name that continues it after a
// separator ('-', '_', '.', ':', '@', '/') with anything but a newer
// version or another tier. A newer version is a first segment of one or
// two digits but 0 ("gpt-5.1" after "gpt-5", "claude-opus-4-6-20260205"
// after "claude-opus-4"; a snapshot's date, "-20250514", "-2024-08-06",
// "-0613", "-001", is not one); another tier is any segment a provider
// prices apart (tierWords: "gpt-5.1-codex-mini" after "gpt-5.1"). So a
// newer family never gets an older family's built-in price: it has none
// until an entry names it.
func extends(name, prefix string) bool {
	if !strings.HasPrefix(name, prefix) {
		return false
	}
	rest := name[len(prefix):]
	if rest == "" {
		return true
	}
	if !strings.ContainsRune(separators, rune(rest[0])) {
		return false // "gpt-4o" does not continue "gpt-4"
	}
	for i, seg := range strings.FieldsFunc(rest, func(r rune) bool { return strings.ContainsRune(separators, r) }) {
		if i == 0 && len(seg) <= 2 && strings.Trim(seg, "0123456789") == "" && strings.Trim(seg, "0") != "" {
			return false // a newer version; later numbers are a date's
		}
		if slices.Contains(tierWords, seg) {
			return false
		}
	}
	return true
}

// separators split a model name into segments.
const separators = "-_.:@/"

// tierWords are the segments that make a model a tier or a modality a
// provider prices apart from the model whose name it extends.
var tierWords = []string{"mini", "nano", "lite", "pro", "max", "turbo", "realtime", "audio", "image", "tts"}
