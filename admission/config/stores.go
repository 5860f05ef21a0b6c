package config

import (
	"fmt"
	"strconv"
	"strings"
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
	// Adaptive, when set (adaptive_concurrency), makes the cap of the
	// store's concurrency policies follow the provider's time to first
	// byte, between its min and the policy's limit.
	Adaptive *Adaptive
	// ChargeRatio (charge_ratio) bounds the ratio of the provider's token
	// count to the gateway's estimate the store learns; zero fields take
	// admission/upstream.Accounting's defaults.
	ChargeRatio ChargeRatio
}

// ChargeRatio is an upstream store's charge_ratio entry (see
// admission/upstream.Accounting for the fields' meaning; zero fields take
// its defaults):
//
//	stores:
//	  openai: {kind: upstream, charge_ratio: {initial: 1.3, min: 1.3, max: 4, window: 50}}
type ChargeRatio struct {
	Initial  float64 // the ratio before anything is learned, in [0.01, 100]
	Min, Max float64 // the bounds of the learned ratio, in [0.01, 100]
	Window   int     // the answers the ratio averages over
}

// Adaptive is an upstream store's adaptive_concurrency entry (see
// admission/upstream.Adaptive for the fields' meaning; zero fields take
// its defaults):
//
//	stores:
//	  openai: {kind: upstream, adaptive_concurrency: {min: 4, tolerance: 1.5, smoothing: 0.2, window: 600}}
type Adaptive struct {
	Min       int64   // the lowest the cap falls
	Tolerance float64 // how much slower than usual the provider may answer before the cap falls, in [1, 100]
	Smoothing float64 // the weight of each new cap, in (0, 1]
	Window    int     // the answers of the long-term average of the time to first byte
}

// StoreRedis is the kind of a store kept on a Redis server (package
// admission/redisstore), so that every replica enforces one limit.
const StoreRedis = "redis"

// Redis is one entry of the stores section of kind redis: a store on the
// Redis server at Address, or at the address the environment variable
// AddressEnv holds (exactly one of the two), for the policies that name
// it. The file holds no password: an address with credentials (a
// redis://user:password@host:port/db URL) goes in the variable. The
// program opens the store at start (httpadmitfile.FromFile does); a
// reload does not change the stores, only the policies on them.
//
//	stores:
//	  redis: {kind: redis, address_env: SLUICE_REDIS_URL, prefix: "sluice:", timeout: 500ms}
//	policies:
//	  - {name: rpm, store: redis, key: [tenant], algorithm: sliding_window, limit: 600, per: 1m}
type Redis struct {
	// Address is host:port or a redis:// URL without credentials.
	Address string
	// AddressEnv names the environment variable holding the address.
	AddressEnv string
	// Prefix starts every key of the store; empty takes
	// redisstore.DefaultPrefix.
	Prefix string
	// Timeout bounds each answer of the server; 0 takes
	// redisstore.DefaultTimeout.
	Timeout time.Duration
}

// storeFields are the fields of each kind of store, beside kind.
var storeFields = map[string][]string{
	StoreUpstream: {"group_by", "max_groups", "pause", "max_pause", "remaining_ttl", "adaptive_concurrency", "charge_ratio"},
	StoreRedis:    {"address", "address_env", "prefix", "timeout"},
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
		var r Redis
		if !d.mapping(v, p,
			field{"kind", d.str(&kind)},
			field{"group_by", d.str(&group)},
			field{"max_groups", d.integer(&u.MaxGroups, 1)},
			field{"pause", d.duration(&u.Pause, false)},
			field{"max_pause", d.duration(&u.MaxPause, false)},
			field{"remaining_ttl", d.duration(&u.RemainingTTL, false)},
			field{"adaptive_concurrency", func(n *yaml.Node, p string) { u.Adaptive = d.decodeAdaptive(n, p) }},
			field{"charge_ratio", func(n *yaml.Node, p string) { u.ChargeRatio = d.decodeChargeRatio(n, p) }},
			field{"address", d.str(&r.Address)},
			field{"address_env", d.str(&r.AddressEnv)},
			field{"prefix", d.str(&r.Prefix)},
			field{"timeout", d.duration(&r.Timeout, false)},
		) {
			return
		}
		switch kind {
		case StoreUpstream, StoreRedis:
			for other, fields := range storeFields {
				for _, f := range fields {
					if other != kind && d.lines[p+"."+f] != nil {
						d.errorf(d.lines[p+"."+f], p+"."+f, "a store of kind %s has no %s (a field of kind %s)", kind, f, other)
					}
				}
			}
		case "":
			d.errorf(d.resolve(v), p+".kind", "missing: a store needs a kind (want upstream or redis)")
			return
		default:
			d.errorf(d.lines[p+".kind"], p+".kind", "unknown kind %q (want upstream or redis)", kind)
			return
		}
		if kind == StoreRedis {
			d.redisStore(name, r, d.resolve(v), p)
			return
		}
		if d.either(p+".group_by", group, "model", "upstream") {
			u.GroupBy = GroupByUpstream
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

// redisStore checks and records a store of kind redis: one address,
// given without credentials, and a prefix that redisstore takes.
func (d *decoder) redisStore(name string, r Redis, n *yaml.Node, p string) {
	switch {
	case r.Address == "" && r.AddressEnv == "":
		d.errorf(n, p+".address", "missing: a redis store needs an address (host:port) or address_env (the variable holding it)")
	case r.Address != "" && r.AddressEnv != "":
		d.errorf(d.lines[p+".address_env"], p+".address_env", "give address or address_env, not both: which one the store uses would depend on the environment")
	case strings.Contains(r.Address, "@"):
		d.errorf(d.lines[p+".address"], p+".address", "%q holds credentials: the file holds no password; put the URL in the variable address_env names", RedactURL(r.Address))
	case r.AddressEnv != "" && !validName(r.AddressEnv):
		d.errorf(d.lines[p+".address_env"], p+".address_env", "%q is not an environment variable name", r.AddressEnv)
	}
	if strings.ContainsAny(r.Prefix, "{}") {
		d.errorf(d.lines[p+".prefix"], p+".prefix", "%q must not contain '{' or '}', which delimit the keys' hash tags", r.Prefix)
	}
	if d.f.Redis == nil {
		d.f.Redis = map[string]Redis{}
	}
	d.f.Redis[name] = r
}

// validateStores checks the policies on an upstream store: they count
// what providers limit, keyed as the store groups its budgets.
func (d *decoder) validateStores() {
	adaptive := map[string]bool{} // the stores with a concurrency policy
	defer func() {
		for name, u := range d.f.Upstreams {
			if p := "stores." + name + ".adaptive_concurrency"; u.Adaptive != nil && !adaptive[name] {
				d.errorf(d.lines[p], p, "no concurrency policy is on the store %q: there is no cap to adapt", name)
			}
		}
	}()
	for i := range d.f.Config.Policies {
		p := &d.f.Config.Policies[i]
		u, ok := d.f.Upstreams[p.Store]
		if !ok {
			continue
		}
		path := fmt.Sprintf("policies[%d]", i)
		defaultPerTenant(p)
		switch p.Unit {
		case "", limits.UnitRequests, limits.UnitTokens, "input_tokens", "output_tokens":
		default:
			d.errorf(d.at(path, ".unit", ""), path+".unit", "a policy on the upstream store %q counts requests, tokens, input_tokens or output_tokens, as providers limit", p.Store)
		}
		if p.Algorithm == limits.Concurrency {
			adaptive[p.Store] = true
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

// DefaultPerTenantShare is the share of a queue one tenant may fill by
// default on a policy guarding a provider: its size over 8.
const DefaultPerTenantShare = 8

// defaultPerTenant gives a queued policy on an upstream store that sets
// no queue.per_tenant one of Size/DefaultPerTenantShare (at least 1): the
// provider's budget is shared by every tenant, and a heavy tenant filling
// its queue would leave a light one nothing but queue_full. A file that
// wants one tenant to fill the queue says per_tenant: <size>.
func defaultPerTenant(p *limits.Policy) {
	if q := &p.Queue; q.Size > 0 && q.PerTenant == 0 {
		q.PerTenant = max(1, q.Size/DefaultPerTenantShare)
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

// decodeAdaptive decodes an adaptive_concurrency entry.
func (d *decoder) decodeAdaptive(n *yaml.Node, path string) *Adaptive {
	a := &Adaptive{}
	d.mapping(n, path,
		field{"min", d.positive(&a.Min, nil)},
		field{"tolerance", d.fraction(&a.Tolerance, 1, 100)},
		field{"smoothing", d.fraction(&a.Smoothing, 0, 1)},
		field{"window", d.integer(&a.Window, 1)},
	)
	if a.Window > 1_000_000 {
		d.errorf(d.lines[path+".window"], path+".window", "at most 1000000 samples, got %d", a.Window)
	}
	return a
}

// decodeChargeRatio decodes a charge_ratio entry.
func (d *decoder) decodeChargeRatio(n *yaml.Node, path string) ChargeRatio {
	var c ChargeRatio
	d.mapping(n, path,
		field{"initial", d.fraction(&c.Initial, 0.01, 100)},
		field{"min", d.fraction(&c.Min, 0.01, 100)},
		field{"max", d.fraction(&c.Max, 0.01, 100)},
		field{"window", d.integer(&c.Window, 1)},
	)
	if c.Window > 1_000_000 {
		d.errorf(d.lines[path+".window"], path+".window", "at most 1000000 answers, got %d", c.Window)
	}
	if c.Min > 0 && c.Max > 0 && c.Min > c.Max {
		d.errorf(d.lines[path+".min"], path+".min", "%v is above max %v", c.Min, c.Max)
	}
	return c
}

// fraction decodes a number in [lo, hi], and above lo when lo is 0.
func (d *decoder) fraction(dst *float64, lo, hi float64) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= lo && v <= hi) || v == 0 && lo == 0 { // NaN too
			open := "["
			if lo == 0 {
				open = "("
			}
			d.errorf(d.resolve(n), path, "%q is not a number in %s%g, %g]", s, open, lo, hi)
			return
		}
		*dst = v
	}
}
