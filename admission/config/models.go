package config

import "go.yaml.in/yaml/v3"

// Model is an entry of the models section: what a gateway reserves for
// the answer of a request to the model that sets no output limit of its
// own (no max_tokens, max_completion_tokens, max_output_tokens or
// maxOutputTokens, as the SDKs send by default).
//
//	models:
//	  gpt-4o-mini: {default_max_tokens: 256}
//	  gpt-4.1: {default_max_tokens: 1024}
//
// An entry applies to the models whose lower-cased name starts with its
// name (the longest wins), tried whole and then without a provider part
// ("openai/gpt-4o-mini"), as prices are. A model no entry matches takes
// the program's default (llmproxy's --default-max-tokens). Set it to
// what the provider's limiter charges such a request: a provider counts
// max_tokens, or its own default when there is none, against its
// tokens-per-minute limit when it accepts a request, so a gateway that
// reserves less sees 429s and one that reserves more leaves the budget
// idle. Tenants are charged the answer's real length once it is known.
type Model struct {
	// DefaultMaxTokens is the output reserved for a request that sets no
	// limit, per completion asked for (n); at least 1.
	DefaultMaxTokens int64
}

// maxDefaultOutput bounds Model.DefaultMaxTokens: no model answers more
// than ten million tokens.
const maxDefaultOutput = 10_000_000

// decodeModels decodes the models section.
func (d *decoder) decodeModels(n *yaml.Node, path string) {
	d.f.Models = map[string]Model{}
	d.models(n, path, func(name string, _, v *yaml.Node, path string) {
		var m Model
		if !d.mapping(v, path, field{"default_max_tokens", func(n *yaml.Node, path string) {
			v, ok := d.amount(n, path)
			if ok && (v < 1 || v > maxDefaultOutput) {
				d.errorf(d.resolve(n), path, "must be between 1 and %d output tokens, got %d", maxDefaultOutput, v)
				ok = false
			}
			if ok {
				m.DefaultMaxTokens = v
			}
		}}) {
			return
		}
		if m.DefaultMaxTokens == 0 {
			if _, given := d.lines[path+".default_max_tokens"]; !given {
				d.errorf(d.resolve(v), path+".default_max_tokens", "missing")
			}
			return
		}
		d.f.Models[name] = m
	})
}
