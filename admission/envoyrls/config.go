package envoyrls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission"
)

// Bounds on what a configuration may declare.
const (
	// MaxDepth is the deepest nesting of descriptors a rule may have, and
	// the most entries a request descriptor may carry.
	MaxDepth = 16
	// MaxName bounds domains, keys, values and limit names, in bytes.
	MaxName = 256
)

// UnitHits is the unit generated policies count by default: one hit per
// request unless the descriptor or the request carries a hits_addend.
const UnitHits admission.Unit = "hits"

// Code is the answer given for a descriptor.
type Code uint8

// The answers. OK is the zero value: a descriptor no rule covers is let
// through unless the domain says otherwise.
const (
	OK Code = iota
	OverLimit
)

// Config is a decoded, validated set of descriptor rules: one or more
// domains in envoyproxy/ratelimit's format, with Sluice's extensions.
// Policies holds the admission policies the rules were compiled into, one
// per rule with a finite, non-zero limit, ready for Controller.SetConfig.
type Config struct {
	// Policies are the generated policies; Server.SetConfig installs them.
	Policies []admission.Policy
	domains  map[string]*domain
}

// Domains returns the names of the configured domains, sorted.
func (c *Config) Domains() []string {
	names := make([]string, 0, len(c.domains))
	for n := range c.domains {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// domain is one compiled domain.
type domain struct {
	name    string
	unknown Code
	root    *node
}

// node is one level of a descriptor tree: the children of a descriptor (or
// the domain's top-level list), indexed for matching.
type node struct {
	exact    map[string]*rule // "key\x00value"
	prefixes []*rule          // value ending in '*', longest prefix first
	any      map[string]*rule // key without a value
}

// rule is one descriptor of the configuration.
type rule struct {
	key, value string
	prefix     bool // value is a prefix ("value*")
	children   *node
	leaf       *leaf // nil when the descriptor sets no limit
	shared     bool  // its value stays out of the partition key
	tenant     bool  // its value is the request's tenant
}

// leaf is the limit a matched descriptor is evaluated with.
type leaf struct {
	policy    string // the generated policy's name, also the request's operation
	name      string // rate_limit.name, for replaces
	replaces  []string
	unit      admission.Unit
	envoyUnit rlsv3.RateLimitResponse_RateLimit_Unit
	limit     int64
	unlimited bool
	blocked   bool // requests_per_unit: 0
	shadow    bool
	queued    bool
	per       time.Duration
	// partition lists, by depth, whether the entry's value is part of the
	// partition key; tenant is the depth of the tenant entry, or -1.
	partition []bool
	tenant    int
}

// The YAML schema, strict: unknown keys and duplicate keys are errors.

type fileDomain struct {
	Domain       string           `yaml:"domain"`
	Descriptors  []fileDescriptor `yaml:"descriptors"`
	Unknown      string           `yaml:"unknown"`
	Algorithm    string           `yaml:"algorithm"`
	Store        string           `yaml:"store"`
	OnStoreError string           `yaml:"on_store_error"`
}

type fileDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *fileRateLimit   `yaml:"rate_limit"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	Descriptors    []fileDescriptor `yaml:"descriptors"`
	Tenant         bool             `yaml:"tenant"`
	Shared         bool             `yaml:"shared"`
}

type fileRateLimit struct {
	Name            string        `yaml:"name"`
	Replaces        []fileReplace `yaml:"replaces"`
	Unit            string        `yaml:"unit"`
	RequestsPerUnit *int64        `yaml:"requests_per_unit"`
	Unlimited       bool          `yaml:"unlimited"`
	Algorithm       string        `yaml:"algorithm"`
	Burst           int64         `yaml:"burst"`
	Counts          string        `yaml:"counts"`
	OnStoreError    string        `yaml:"on_store_error"`
	Queue           *fileQueue    `yaml:"queue"`
}

type fileReplace struct {
	Name string `yaml:"name"`
}

type fileQueue struct {
	Size    int    `yaml:"size"`
	Timeout string `yaml:"timeout"`
	Order   string `yaml:"order"`
}

var units = map[string]struct {
	per time.Duration
	rls rlsv3.RateLimitResponse_RateLimit_Unit
}{
	"second": {time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
	"minute": {time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	"hour":   {time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	"day":    {24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	"week":   {7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
}

// Load reads a configuration from path: one YAML file, or a directory
// whose *.yaml and *.yml files (as envoyproxy/ratelimit's runtime
// directory) are read in name order. Each file holds one domain or
// several, one per YAML document; a domain may appear only once in all.
func Load(path string) (*Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if st.IsDir() {
		files = nil
		for _, pat := range []string{"*.yaml", "*.yml"} {
			m, _ := filepath.Glob(filepath.Join(path, pat))
			files = append(files, m...)
		}
		slices.Sort(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("envoyrls: %s: no *.yaml file", path)
		}
	}
	var docs []source
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		docs = append(docs, source{f, data})
	}
	return compile(docs)
}

// Parse decodes and validates one file's content; name is used in errors.
func Parse(name string, data []byte) (*Config, error) {
	return compile([]source{{name, data}})
}

type source struct {
	name string
	data []byte
}

// maxFile bounds a configuration file.
const maxFile = 8 << 20

func compile(srcs []source) (*Config, error) {
	cfg := &Config{domains: map[string]*domain{}}
	var errs []error
	for _, s := range srcs {
		if len(s.data) > maxFile {
			errs = append(errs, fmt.Errorf("%s: larger than %d bytes", s.name, maxFile))
			continue
		}
		dec := yaml.NewDecoder(bytes.NewReader(s.data))
		dec.KnownFields(true)
		for i := 0; ; i++ {
			var fd fileDomain
			err := dec.Decode(&fd)
			if errors.Is(err, io.EOF) {
				if i == 0 {
					errs = append(errs, fmt.Errorf("%s: empty: no domain", s.name))
				}
				break
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
				break
			}
			c := compiler{cfg: cfg, file: s.name}
			c.domain(&fd)
			errs = append(errs, c.errs...)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

type compiler struct {
	cfg  *Config
	file string
	dom  *domain
	d    *fileDomain
	errs []error
	// names maps rate_limit names to their paths, for replaces.
	names    map[string]string
	replaces map[string][]string // replaced name → paths replacing it
}

func (c *compiler) bad(path, format string, args ...any) {
	prefix := c.file + ": "
	if c.dom != nil {
		prefix += "domain " + fmt.Sprintf("%q", c.dom.name) + ": "
	}
	c.errs = append(c.errs, fmt.Errorf("%s%s: %s", prefix, path, fmt.Sprintf(format, args...)))
}

func (c *compiler) domain(fd *fileDomain) {
	c.d = fd
	c.names, c.replaces = map[string]string{}, map[string][]string{}
	switch {
	case fd.Domain == "":
		c.bad("domain", "must not be empty")
		return
	case len(fd.Domain) > MaxName:
		c.bad("domain", "longer than %d bytes", MaxName)
		return
	case c.cfg.domains[fd.Domain] != nil:
		c.bad("domain", "%q is declared twice", fd.Domain)
		return
	}
	c.dom = &domain{name: fd.Domain}
	switch fd.Unknown {
	case "", "ok":
	case "over_limit":
		c.dom.unknown = OverLimit
	default:
		c.bad("unknown", "must be ok or over_limit, got %q", fd.Unknown)
	}
	if fd.Algorithm != "" {
		c.algorithm("algorithm", fd.Algorithm)
	}
	if fd.OnStoreError != "" {
		var f admission.FailMode
		if err := f.UnmarshalText([]byte(fd.OnStoreError)); err != nil {
			c.bad("on_store_error", "%v", err)
		}
	}
	c.dom.root = c.list("descriptors", fd.Descriptors, nil)
	for name, paths := range c.replaces {
		if _, ok := c.names[name]; !ok {
			c.bad(paths[0], "replaces %q, which no rate_limit is named", name)
		}
	}
	c.cfg.domains[fd.Domain] = c.dom
}

// algorithm parses a rate algorithm name; RLS calls have no end, so a
// concurrency limit cannot be served, and a quota is a window here.
func (c *compiler) algorithm(path, s string) admission.Algorithm {
	var a admission.Algorithm
	if err := a.UnmarshalText([]byte(s)); err != nil {
		c.bad(path, "%v", err)
		return admission.FixedWindow
	}
	switch a {
	case admission.FixedWindow, admission.SlidingWindow, admission.SlidingLog, admission.TokenBucket:
		return a
	}
	c.bad(path, "%s cannot be served over the rate limit protocol: use fixed_window, sliding_window, sliding_log or token_bucket", a)
	return admission.FixedWindow
}

// ancestor is one descriptor on the path to the one being compiled.
type ancestor struct {
	d    *fileDescriptor
	path string
}

func (c *compiler) list(path string, ds []fileDescriptor, up []ancestor) *node {
	n := &node{exact: map[string]*rule{}, any: map[string]*rule{}}
	if len(up) >= MaxDepth && len(ds) > 0 {
		c.bad(path, "descriptors nest deeper than %d levels", MaxDepth)
		return n
	}
	for i := range ds {
		d := &ds[i]
		p := fmt.Sprintf("%s[%d]", path, i)
		r := &rule{key: d.Key, value: d.Value, shared: d.Shared, tenant: d.Tenant}
		switch {
		case d.Key == "":
			c.bad(p+".key", "must not be empty")
		case len(d.Key) > MaxName || len(d.Value) > MaxName:
			c.bad(p, "key or value longer than %d bytes", MaxName)
		case strings.HasPrefix(d.Key, reservedPrefix):
			c.bad(p+".key", "keys starting with %q are reserved for phases and request ids", reservedPrefix)
		}
		if d.Shared && d.Value != "" && !strings.HasSuffix(d.Value, "*") {
			c.bad(p+".shared", "only a descriptor matching any value (no value, or a value ending in *) can share its limit across values")
		}
		here := append(up[:len(up):len(up)], ancestor{d, p})
		tenants := 0
		for _, a := range here {
			if a.d.Tenant {
				tenants++
			}
		}
		if tenants > 1 && d.Tenant {
			c.bad(p+".tenant", "a descriptor path has one tenant entry at most")
		}
		if d.RateLimit != nil {
			r.leaf = c.leaf(p, here)
		}
		if len(d.Descriptors) > 0 {
			r.children = c.list(p+".descriptors", d.Descriptors, here)
		}
		switch {
		case strings.HasSuffix(d.Value, "*"):
			r.prefix, r.value = true, strings.TrimSuffix(d.Value, "*")
			for _, o := range n.prefixes {
				if o.key == r.key && o.value == r.value {
					c.bad(p, "duplicate descriptor %s=%s", d.Key, d.Value)
				}
			}
			n.prefixes = append(n.prefixes, r)
		case d.Value == "":
			if n.any[d.Key] != nil {
				c.bad(p, "duplicate descriptor %s", d.Key)
			}
			n.any[d.Key] = r
		default:
			k := d.Key + "\x00" + d.Value
			if n.exact[k] != nil {
				c.bad(p, "duplicate descriptor %s=%s", d.Key, d.Value)
			}
			n.exact[k] = r
		}
	}
	slices.SortStableFunc(n.prefixes, func(a, b *rule) int { return len(b.value) - len(a.value) })
	return n
}

func (c *compiler) leaf(p string, path []ancestor) *leaf {
	d := path[len(path)-1].d
	rl := d.RateLimit
	errsBefore := len(c.errs)
	p += ".rate_limit"
	lf := &leaf{name: rl.Name, shadow: d.ShadowMode, unit: UnitHits, tenant: -1}
	var id strings.Builder
	id.WriteString(c.dom.name)
	for i, a := range path {
		id.WriteByte('/')
		id.WriteString(a.d.Key)
		if a.d.Value != "" {
			id.WriteByte('=')
			id.WriteString(a.d.Value)
		}
		lf.partition = append(lf.partition, (a.d.Value == "" || strings.HasSuffix(a.d.Value, "*")) && !a.d.Shared)
		if a.d.Tenant {
			lf.tenant = i
		}
	}
	lf.policy = id.String()
	if rl.Name != "" {
		if prev, ok := c.names[rl.Name]; ok {
			c.bad(p+".name", "%q already names the limit at %s", rl.Name, prev)
		}
		c.names[rl.Name] = p
	}
	for i, r := range rl.Replaces {
		if r.Name == "" {
			c.bad(fmt.Sprintf("%s.replaces[%d].name", p, i), "must not be empty")
			continue
		}
		if r.Name == rl.Name {
			c.bad(fmt.Sprintf("%s.replaces[%d].name", p, i), "a limit cannot replace itself")
		}
		lf.replaces = append(lf.replaces, r.Name)
		c.replaces[r.Name] = append(c.replaces[r.Name], fmt.Sprintf("%s.replaces[%d]", p, i))
	}
	if rl.Unlimited {
		if rl.Unit != "" || rl.RequestsPerUnit != nil || rl.Algorithm != "" || rl.Burst != 0 || rl.Queue != nil || rl.Counts != "" {
			c.bad(p+".unlimited", "an unlimited rate_limit takes no unit, requests_per_unit, algorithm, burst, counts or queue")
		}
		lf.unlimited = true
		return lf
	}
	u, ok := units[rl.Unit]
	if !ok {
		c.bad(p+".unit", "must be second, minute, hour, day or week, got %q", rl.Unit)
	}
	lf.per, lf.envoyUnit = u.per, u.rls
	switch {
	case rl.RequestsPerUnit == nil:
		c.bad(p+".requests_per_unit", "is required (or unlimited: true)")
	case *rl.RequestsPerUnit < 0 || *rl.RequestsPerUnit > math.MaxUint32:
		c.bad(p+".requests_per_unit", "must be in [0, %d], got %d", uint32(math.MaxUint32), *rl.RequestsPerUnit)
	default:
		lf.limit = *rl.RequestsPerUnit
	}
	switch rl.Counts {
	case "", "hits":
	case "tokens":
		lf.unit = admission.UnitTokens
	case "cost":
		lf.unit = admission.UnitCost
	default:
		c.bad(p+".counts", "must be hits, tokens or cost, got %q", rl.Counts)
	}
	if lf.limit == 0 {
		// Every request is refused: no state to keep.
		lf.blocked = true
		return lf
	}
	pol := admission.Policy{
		Name:      lf.policy,
		Match:     admission.Match{Operations: []string{lf.policy}},
		Key:       []admission.KeyPart{admission.KeyUser},
		Unit:      lf.unit,
		Algorithm: admission.FixedWindow,
		Limit:     lf.limit,
		Per:       lf.per,
		Burst:     rl.Burst,
		Store:     c.d.Store,
	}
	if !slices.Contains(lf.partition, true) {
		pol.Key = []admission.KeyPart{admission.KeyGlobal}
	}
	if c.d.Algorithm != "" {
		pol.Algorithm = c.algorithm("algorithm", c.d.Algorithm)
	}
	if rl.Algorithm != "" {
		pol.Algorithm = c.algorithm(p+".algorithm", rl.Algorithm)
	}
	if lf.shadow {
		pol.Mode = admission.Shadow
	}
	for _, f := range []string{c.d.OnStoreError, rl.OnStoreError} {
		if f != "" {
			if err := pol.OnStoreError.UnmarshalText([]byte(f)); err != nil {
				c.bad(p+".on_store_error", "%v", err)
			}
		}
	}
	if q := rl.Queue; q != nil {
		pol.Queue.Size = q.Size
		if q.Timeout != "" {
			d, err := time.ParseDuration(q.Timeout)
			if err != nil {
				c.bad(p+".queue.timeout", "%v", err)
			}
			pol.Queue.Timeout = d
		}
		if q.Order != "" {
			if err := pol.Queue.Order.UnmarshalText([]byte(q.Order)); err != nil {
				c.bad(p+".queue.order", "%v", err)
			}
		}
		lf.queued = q.Size > 0
	}
	// The policy's own checks, once the rule's are passed (a bad unit
	// would be reported again as a zero period).
	if len(c.errs) > errsBefore {
		return lf
	}
	if err := pol.Validate(p); err != nil {
		c.errs = append(c.errs, fmt.Errorf("%s: domain %q: %w", c.file, c.dom.name, err))
	}
	c.cfg.Policies = append(c.cfg.Policies, pol)
	return lf
}
