package config

import (
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Prices is the prices section: what a million tokens of each model cost,
// for the policies whose unit is cost (a monthly spend cap). A model is
// priced by the entry whose name is the longest prefix of its lower-cased
// name ("gpt-4o" prices "gpt-4o-2024-08-06"), tried whole and then without
// a provider part ("openai/gpt-4o"); a fine-tuned model
// ("ft:gpt-4o-mini-2024-07-18:org:custom:id") with no entry of its own is
// priced as its base model. A model no entry matches is never free: it is
// charged the fallback price or refused.
//
//	prices:
//	  builtin: true       # start from the built-in list prices (the default)
//	  unpriced: fallback  # refuse (the default), or charge the fallback price
//	  fallback: {input: 10, output: 30}
//	  models:             # replace or add entries, in US dollars per million tokens
//	    gpt-4o-mini: {input: 0.15, output: 0.60, cached_input: 0.075, batch_discount: 0.5}
//	    claude-sonnet-4: {input: 3, output: 15, cached_input: 0.30, cache_write: 3.75, cache_write_1h: 6}
//	    ft:gpt-4o-mini: {input: 0.30, output: 1.20}
//	    llama-3.3-70b: {input: 0.59, output: 0.79}
//	  aliases:            # a name priced as another model (an Azure deployment, an in-house name)
//	    prod-chat: gpt-4o-mini
//	  tool_calls:         # built-in tool fees, in US dollars per thousand calls
//	    web_search: 10    # the default: $10 per 1,000 web_search calls
//	    file_search: 2.5  # the default: $2.50 per 1,000 file_search calls
//
// The section is optional; without it the built-in table applies and
// unpriced models are refused. The program turns it into a price table
// with weights.NewPriceTable (this package does not depend on weights).
type Prices struct {
	// Builtin starts the table from the built-in list prices
	// (weights.DefaultPrices). Default true.
	Builtin bool
	// Models are the file's entries, by model name prefix as written. An
	// entry replaces the built-in entry of the same name (names are
	// case-insensitive) and adds to the others.
	Models map[string]Price
	// Fallback prices every model no entry matches (unpriced: fallback).
	// Nil refuses such models (unpriced: refuse).
	Fallback *Price
	// Aliases map a model name (by prefix, case-insensitive, like
	// Models) to the model it is priced as, which an entry must price
	// (built-in or the file's; the fallback does not count). An alias
	// may not also be an entry of Models.
	Aliases map[string]string
	// ToolCalls are the fees of the Responses API's built-in tools, in US
	// dollars per thousand calls, by tool: web_search and file_search (no
	// other key is accepted). A tool left out costs its default, which
	// the gateway documents (OpenAI's list prices: 10 and 2.5); 0 makes
	// its calls free.
	ToolCalls map[string]float64
}

// The built-in tools whose calls prices.tool_calls prices.
const (
	ToolWebSearch  = "web_search"
	ToolFileSearch = "file_search"
)

// Price is a model's price in US dollars per million tokens. Input and
// Output are required in the file; CachedInput and CacheWrite default to
// 0, which means the Input price, CacheWrite1h to 0, which means the
// CacheWrite price, and BatchDiscount to 0, no discount.
// An entry of the file replaces the built-in entry whole: its batch
// discount too.
type Price struct {
	// Input is the price of a million prompt tokens.
	Input float64
	// Output is the price of a million completion tokens.
	Output float64
	// CachedInput is the price of a million prompt tokens served from the
	// provider's cache; 0 means Input.
	CachedInput float64
	// CacheWrite is the price of a million prompt tokens written to the
	// provider's cache (Anthropic's cache_creation_input_tokens); 0
	// means Input.
	CacheWrite float64
	// CacheWrite1h is the price of a million prompt tokens written to a
	// one-hour cache (Anthropic's ephemeral_1h_input_tokens, Bedrock's
	// cache writes with a ttl of 1h); 0 means CacheWrite.
	CacheWrite1h float64
	// BatchDiscount is the part of every price taken off for work sent
	// through the Batch API (batch_discount: 0.5 is half price), at least
	// 0 and below 1.
	BatchDiscount float64
}

// maxPrice is the largest price accepted, as weights bounds it: a million
// dollars per million tokens.
const maxPrice = 1e6

// maxModelName bounds a model name in the prices section, as weights
// does.
const maxModelName = 256

func (d *decoder) decodePrices(n *yaml.Node, path string) {
	p := &d.f.Prices
	var unpriced string
	var aliasKeys map[string]*yaml.Node
	if !d.mapping(n, path,
		field{"builtin", d.boolean(&p.Builtin)},
		field{"unpriced", d.str(&unpriced)},
		field{"fallback", func(n *yaml.Node, path string) {
			fb, ok := d.price(n, path, true)
			if ok {
				p.Fallback = &fb
			}
		}},
		field{"models", func(n *yaml.Node, path string) {
			p.Models = map[string]Price{}
			d.models(n, path, func(name string, _, v *yaml.Node, path string) {
				if pr, ok := d.price(v, path, false); ok {
					p.Models[name] = pr
				}
			})
		}},
		field{"aliases", func(n *yaml.Node, path string) { aliasKeys = d.decodeAliases(n, path) }},
		field{"tool_calls", func(n *yaml.Node, path string) {
			p.ToolCalls = map[string]float64{}
			d.mapping(n, path, d.toolFee(p.ToolCalls, ToolWebSearch), d.toolFee(p.ToolCalls, ToolFileSearch))
		}},
	) {
		return
	}
	for name, k := range aliasKeys {
		for model := range p.Models {
			if strings.EqualFold(model, name) {
				d.errorf(k, join(path+".aliases", name), "is also an entry of prices.models: an alias has no price of its own")
				delete(p.Aliases, name)
			}
		}
	}
	_, hasFallback := d.lines[path+".fallback"]
	switch unpriced {
	case "":
	case "refuse":
		if hasFallback {
			d.errorf(d.lines[path+".fallback"], path+".fallback", "a fallback price contradicts unpriced: refuse")
		}
	case "fallback":
		if !hasFallback {
			d.errorf(d.lines[path+".unpriced"], path+".unpriced", "fallback needs a price: set prices.fallback")
		}
	default:
		d.errorf(d.lines[path+".unpriced"], path+".unpriced", "unknown value %q (want one of refuse, fallback)", unpriced)
	}
	if !p.Builtin && len(d.f.Prices.Models) == 0 && !hasFallback {
		d.errorf(d.lines[path+".builtin"], path+".builtin", "false with no models and no fallback prices nothing: every model would be refused")
	}
}

// toolFee decodes the fee of tool, in US dollars per thousand calls,
// into fees.
func (d *decoder) toolFee(fees map[string]float64, tool string) field {
	return field{tool, func(n *yaml.Node, path string) {
		s, given := d.scalar(n, path)
		if !given {
			return
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= 0 && v <= maxPrice) {
			d.errorf(d.resolve(n), path, "%q is not a fee: write US dollars per thousand calls between 0 and %g (10 for $10 per 1,000 calls)", s, float64(maxPrice))
			return
		}
		fees[tool] = v
	}}
}

// modelName reports whether name, found at n, is a model name, and
// reports it when not.
func (d *decoder) modelName(name string, n *yaml.Node, path string) bool {
	if name == "" || len(name) > maxModelName || strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		d.errorf(n, path, "not a model name (no spaces or control characters, 1 to %d bytes)", maxModelName)
		return false
	}
	return true
}

// models decodes a mapping keyed by model names, each a name and no two
// the same but for case, handing each entry to each.
func (d *decoder) models(n *yaml.Node, path string, each func(name string, k, v *yaml.Node, path string)) {
	seen := map[string]string{}
	section := path
	d.pairs(n, path, func(name string, k, v *yaml.Node, path string) {
		if !d.modelName(name, k, path) {
			return
		}
		key := strings.ToLower(name)
		if first, dup := seen[key]; dup {
			d.errorf(k, path, "duplicates %s (model names are case-insensitive)", join(section, first))
			return
		}
		seen[key] = name
		each(name, k, v, path)
	})
}

// decodeAliases decodes prices.aliases: each alias a model name naming
// another, by the alias's key node. Whether the target is priced is known
// once the table is built (see weights.PricesConfig); that no alias is
// also an entry of models, once the section is read.
func (d *decoder) decodeAliases(n *yaml.Node, path string) map[string]*yaml.Node {
	p := &d.f.Prices
	p.Aliases = map[string]string{}
	keys := map[string]*yaml.Node{}
	d.models(n, path, func(name string, k, v *yaml.Node, path string) {
		target, ok := d.scalar(v, path)
		if !ok || !d.modelName(target, d.resolve(v), path) {
			return
		}
		if strings.EqualFold(target, name) {
			d.errorf(d.resolve(v), path, "names itself")
			return
		}
		p.Aliases[name], keys[name] = target, k
	})
	return keys
}

// price decodes a price mapping; input and output are required, and above
// zero for a fallback (a fallback of nothing would let unpriced models run
// free).
func (d *decoder) price(n *yaml.Node, path string, fallback bool) (Price, bool) {
	var pr Price
	ok := true
	amount := func(dst *float64) func(*yaml.Node, string) {
		return func(n *yaml.Node, path string) {
			s, given := d.scalar(n, path)
			if !given {
				ok = false
				return
			}
			v, err := strconv.ParseFloat(s, 64)
			switch {
			case err != nil || math.IsNaN(v) || math.IsInf(v, 0):
				d.errorf(d.resolve(n), path, "%q is not a price (write 2.5 for $2.50 per million tokens)", s)
			case v < 0 || v > maxPrice:
				d.errorf(d.resolve(n), path, "must be between 0 and %g US dollars per million tokens, got %s", float64(maxPrice), s)
			case fallback && v == 0 && (strings.HasSuffix(path, ".input") || strings.HasSuffix(path, ".output")):
				d.errorf(d.resolve(n), path, "must be > 0: a fallback of nothing lets unpriced models run free")
			default:
				*dst = v
				return
			}
			ok = false
		}
	}
	if !d.mapping(n, path,
		field{"input", amount(&pr.Input)},
		field{"output", amount(&pr.Output)},
		field{"cached_input", amount(&pr.CachedInput)},
		field{"cache_write", amount(&pr.CacheWrite)},
		field{"cache_write_1h", amount(&pr.CacheWrite1h)},
		field{"batch_discount", func(n *yaml.Node, path string) {
			s, given := d.scalar(n, path)
			if !given {
				ok = false
				return
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || !(v >= 0 && v < 1) {
				d.errorf(d.resolve(n), path, "%q is not a discount: write a fraction at least 0 and below 1 (0.5 for half price)", s)
				ok = false
				return
			}
			pr.BatchDiscount = v
		}},
	) {
		return Price{}, false
	}
	for _, k := range []string{"input", "output"} {
		if _, given := d.lines[path+"."+k]; !given {
			d.errorf(d.resolve(n), path+"."+k, "missing (a price needs input and output; write 0 for a free part)")
			ok = false
		}
	}
	return pr, ok
}
