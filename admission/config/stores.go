package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission/limits"
)

// StoreUpstream is the kind of a store that guards an external provider's
// limits (package admission/upstream).
const StoreUpstream = "upstream"

// Grouping says which responses of a provider speak about one budget.
type Grouping uint8

const (
	// GroupByModel keeps one budget per model, as OpenAI and Anthropic
	// limit: the store's policies are keyed by model.
	GroupByModel Grouping = iota
	// GroupByUpstream keeps one budget for the whole upstream (an Azure
	// OpenAI deployment): the store's policies are keyed globally.
	GroupByUpstream
)

// String returns the name the file uses: "model" or "upstream".
func (g Grouping) String() string {
	if g == GroupByUpstream {
		return "upstream"
	}
	return "model"
}

// Upstream is one entry of the stores section of kind upstream: a store
// whose policies carry a provider's published limits and learn its
// remaining budget from its responses (see admission/upstream.Config for
// the fields' meaning; zero fields take its defaults). The program builds
// the store and registers it under the entry's name; a reload does not
// change the stores, only the policies on them.
//
//	stores:
//	  openai: {kind: upstream, group_by: model, pause: 1s, max_pause: 10m}
//	policies:
//	  - {name: openai-tpm, store: openai, key: [model], unit: tokens,
//	     algorithm: sliding_window, limit: 2M, per: 1m, queue: {size: 1000, timeout: 30s}}
type Upstream struct {
	// GroupBy says what one budget is: a model (default) or the whole
	// upstream.
	GroupBy Grouping
	// MaxGroups bounds the groups learned about.
	MaxGroups int
	// Pause is how long a refusal without retry-after pauses its group.
	Pause time.Duration
	// MaxPause bounds every pause and learned reset.
	MaxPause time.Duration
	// RemainingTTL is how long a remaining figure without a reset holds.
	RemainingTTL time.Duration
}

// decodeStores decodes the stores section.
func (d *decoder) decodeStores(n *yaml.Node, path string) {
	d.pairs(n, path, func(name string, k, v *yaml.Node, p string) {
		if !validName(name) || name == "memory" {
			d.errorf(k, p, "%q is not a valid store name (letters, digits, '-', '_' and '.', at most 64; not memory)", name)
			return
		}
		var kind, group string
		var u Upstream
		if !d.mapping(v, p,
			field{"kind", d.str(&kind)},
			field{"group_by", d.str(&group)},
			field{"max_groups", d.integer(&u.MaxGroups, 1)},
			field{"pause", d.duration(&u.Pause, false)},
			field{"max_pause", d.duration(&u.MaxPause, false)},
			field{"remaining_ttl", d.duration(&u.RemainingTTL, false)},
		) {
			return
		}
		switch kind {
		case StoreUpstream:
		case "":
			d.errorf(d.resolve(v), p+".kind", "missing: a store needs a kind (want upstream)")
		default:
			d.errorf(d.lines[p+".kind"], p+".kind", "unknown kind %q (want upstream)", kind)
		}
		switch group {
		case "", "model":
		case "upstream":
			u.GroupBy = GroupByUpstream
		default:
			d.errorf(d.lines[p+".group_by"], p+".group_by", "unknown grouping %q (want one of model, upstream)", group)
		}
		if u.Pause > 0 && u.MaxPause > 0 && u.Pause > u.MaxPause {
			d.errorf(d.lines[p+".pause"], p+".pause", "%v is longer than max_pause %v", u.Pause, u.MaxPause)
		}
		if d.f.Upstreams == nil {
			d.f.Upstreams = map[string]Upstream{}
		}
		d.f.Upstreams[name] = u
	})
}

// validateStores checks the policies on an upstream store: they count
// what providers limit, keyed as the store groups its budgets.
func (d *decoder) validateStores() {
	for i := range d.f.Config.Policies {
		p := &d.f.Config.Policies[i]
		u, ok := d.f.Upstreams[p.Store]
		if !ok {
			continue
		}
		path := fmt.Sprintf("policies[%d]", i)
		switch p.Unit {
		case "", limits.UnitRequests, limits.UnitTokens, "input_tokens", "output_tokens":
		default:
			d.errorf(d.at(path, ".unit", ""), path+".unit", "a policy on the upstream store %q counts requests, tokens, input_tokens or output_tokens, as providers limit", p.Store)
		}
		global := len(p.Key) == 0 || len(p.Key) == 1 && p.Key[0] == limits.KeyGlobal
		byModel := len(p.Key) == 1 && p.Key[0] == limits.KeyModel
		if (u.GroupBy == GroupByModel && !byModel) || (u.GroupBy == GroupByUpstream && !global) {
			want := "[model]"
			if u.GroupBy == GroupByUpstream {
				want = "global (no key)"
			}
			d.errorf(d.at(path, ".key", ".store"), path+".key", "the upstream store %q groups its budget by %s: a policy on it is keyed %s", p.Store, u.GroupBy, want)
		}
	}
}

// at returns the node of the first of path's fields given, else path's.
func (d *decoder) at(path string, fields ...string) *yaml.Node {
	for _, f := range fields {
		if n := d.lines[path+f]; n != nil {
			return n
		}
	}
	return d.lines[path]
}
