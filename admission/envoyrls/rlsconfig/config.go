// Package rlsconfig reads the configuration of Sluice's rate limit service
// for Envoy (package envoyrls, command sluice-rls): envoyproxy/ratelimit's
// YAML files, as they are, with Sluice's optional extensions. It compiles
// them into admission policies, one per limit, and matches request
// descriptors to those limits. It depends on the core and the YAML
// decoder only, so that an offline checker does not carry a gRPC stack.
//
// See package envoyrls for the semantics and the mapping rules.
package rlsconfig

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

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// Bounds on what a configuration may declare.
const (
	// MaxDepth is the deepest nesting of descriptors a rule may have, and
	// the most entries a request descriptor may carry.
	MaxDepth = 16
	// MaxName bounds domains, keys, values and limit names, in bytes.
	MaxName = 256
)

// ReservedPrefix starts the descriptor keys Sluice reserves (the phase of
// a call and its request id): no rule may use them, and the server strips
// them before matching.
const ReservedPrefix = "sluice."

// UnitHits is the unit generated policies count by default: one hit per
// request unless the descriptor or the request carries a hits_addend.
const UnitHits limits.Unit = "hits"

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
	// Policies are the generated policies.
	Policies []admission.Policy
	domains  map[string]*Domain
}

// Domain returns the domain named name, or nil.
func (c *Config) Domain(name string) *Domain { return c.domains[name] }

// Domains returns the names of the configured domains, sorted.
func (c *Config) Domains() []string {
	names := make([]string, 0, len(c.domains))
	for n := range c.domains {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Domain is one compiled domain.
type Domain struct {
	// Name is the domain's name.
	Name string
	// Unknown is the answer for descriptors no rule matches.
	Unknown Code
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
	limit      *Limit // nil when the descriptor sets no limit
	shared     bool   // its value stays out of the partition key
	tenant     bool   // its value is the request's tenant
}

// Limit is the limit a matched descriptor is evaluated with.
type Limit struct {
	// Policy is the generated policy's name (domain and path), also the
	// operation of the admission requests it matches.
	Policy string
	// Name is rate_limit.name (empty when unnamed), which Replaces of
	// other limits refer to.
	Name     string
	Replaces []string
	// Unit is what hits count in: UnitHits, tokens or cost.
	Unit limits.Unit
	// Per is the unit of time; Requests the requests_per_unit.
	Per      time.Duration
	Requests int64
	// Unlimited answers OK without counting; Blocked (requests_per_unit
	// 0) refuses everything without counting.
	Unlimited, Blocked bool
	// Shadow is shadow_mode; Queued says the policy has a queue.
	Shadow, Queued bool
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
	Replicas     int              `yaml:"replicas"`
	// MaxPartitions bounds each limit's partitions kept in memory.
	MaxPartitions int `yaml:"max_partitions"`
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

var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
}

// An Option changes how a configuration is compiled.
type Option func(*options)

type options struct {
	store string
}

// DefaultStore names the store of every domain whose file sets no store
// (the admission.WithStore name, "redis" for sluice-rls -redis), so that
// an unchanged envoyproxy/ratelimit file keeps every limit in that shared
// store, one limit for a fleet of replicas, as that service keeps them in
// its Redis. A domain keeps its limits in each replica's memory only when
// its file says store: memory. Without this option a domain without a
// store is in memory.
func DefaultStore(name string) Option { return func(o *options) { o.store = name } }

// Load reads a configuration from path: one YAML file, or a directory
// whose *.yaml and *.yml files (as envoyproxy/ratelimit's runtime
// directory) are read in name order. Each file holds one domain or
// several, one per YAML document; a domain may appear only once in all.
func Load(path string, opts ...Option) (*Config, error) {
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
	return compile(docs, opts)
}

// Parse decodes and validates one file's content; name is used in errors.
func Parse(name string, data []byte, opts ...Option) (*Config, error) {
	return compile([]source{{name, data}}, opts)
}

type source struct {
	name string
	data []byte
}

// maxFile bounds a configuration file.
const maxFile = 8 << 20

func compile(srcs []source, opts []Option) (*Config, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg := &Config{domains: map[string]*Domain{}}
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
			if fd.Store == "" {
				fd.Store = o.store
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
	dom  *Domain
	d    *fileDomain
	errs []error
	// names maps rate_limit names to their paths, for replaces.
	names    map[string]string
	replaces map[string][]string // replaced name → paths replacing it
}

func (c *compiler) bad(path, format string, args ...any) {
	prefix := c.file + ": "
	if c.dom != nil {
		prefix += "domain " + fmt.Sprintf("%q", c.dom.Name) + ": "
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
	c.dom = &Domain{Name: fd.Domain}
	switch fd.Unknown {
	case "", "ok":
	case "over_limit":
		c.dom.Unknown = OverLimit
	default:
		c.bad("unknown", "must be ok or over_limit, got %q", fd.Unknown)
	}
	if fd.Algorithm != "" {
		c.algorithm("algorithm", fd.Algorithm)
	}
	if fd.OnStoreError != "" {
		var f limits.FailMode
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
func (c *compiler) algorithm(path, s string) limits.Algorithm {
	var a limits.Algorithm
	if err := a.UnmarshalText([]byte(s)); err != nil {
		c.bad(path, "%v", err)
		return limits.FixedWindow
	}
	switch a {
	case limits.FixedWindow, limits.SlidingWindow, limits.SlidingLog, limits.TokenBucket:
		return a
	}
	c.bad(path, "%s cannot be served over the rate limit protocol: use fixed_window, sliding_window, sliding_log or token_bucket", a)
	return limits.FixedWindow
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
		case strings.HasPrefix(d.Key, ReservedPrefix):
			c.bad(p+".key", "keys starting with %q are reserved for phases and request ids", ReservedPrefix)
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
			r.limit = c.limit(p, here)
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

func (c *compiler) limit(p string, path []ancestor) *Limit {
	d := path[len(path)-1].d
	rl := d.RateLimit
	errsBefore := len(c.errs)
	p += ".rate_limit"
	lf := &Limit{Name: rl.Name, Shadow: d.ShadowMode, Unit: UnitHits, tenant: -1}
	var id strings.Builder
	id.WriteString(c.dom.Name)
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
	lf.Policy = id.String()
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
		lf.Replaces = append(lf.Replaces, r.Name)
		c.replaces[r.Name] = append(c.replaces[r.Name], fmt.Sprintf("%s.replaces[%d]", p, i))
	}
	if rl.Unlimited {
		if rl.Unit != "" || rl.RequestsPerUnit != nil || rl.Algorithm != "" || rl.Burst != 0 || rl.Queue != nil || rl.Counts != "" {
			c.bad(p+".unlimited", "an unlimited rate_limit takes no unit, requests_per_unit, algorithm, burst, counts or queue")
		}
		lf.Unlimited = true
		return lf
	}
	per, ok := units[rl.Unit]
	if !ok {
		c.bad(p+".unit", "must be second, minute, hour, day or week, got %q", rl.Unit)
	}
	lf.Per = per
	switch {
	case rl.RequestsPerUnit == nil:
		c.bad(p+".requests_per_unit", "is required (or unlimited: true)")
	case *rl.RequestsPerUnit < 0 || *rl.RequestsPerUnit > math.MaxUint32:
		c.bad(p+".requests_per_unit", "must be in [0, %d], got %d", uint32(math.MaxUint32), *rl.RequestsPerUnit)
	default:
		lf.Requests = *rl.RequestsPerUnit
	}
	switch rl.Counts {
	case "", "hits":
	case "tokens":
		lf.Unit = limits.UnitTokens
	case "cost":
		lf.Unit = limits.UnitCost
	default:
		c.bad(p+".counts", "must be hits, tokens or cost, got %q", rl.Counts)
	}
	if lf.Requests == 0 {
		// Every request is refused: no state to keep.
		lf.Blocked = true
		return lf
	}
	pol := admission.Policy{
		Name:      lf.Policy,
		Match:     limits.Match{Operations: []string{lf.Policy}},
		Key:       []limits.KeyPart{limits.KeyUser},
		Unit:      lf.Unit,
		Algorithm: limits.FixedWindow,
		Limit:     lf.Requests,
		Per:       lf.Per,
		Burst:     rl.Burst,
		Store:     c.d.Store,
		Replicas:  c.d.Replicas,
		// Descriptor values come from clients (addresses, headers): a
		// flood of new values evicts its own partitions rather than
		// exhaust one overflow partition every newcomer would share.
		Overflow:      limits.OverflowEvict,
		MaxPartitions: c.d.MaxPartitions,
	}
	if !slices.Contains(lf.partition, true) {
		pol.Key = []limits.KeyPart{limits.KeyGlobal}
	}
	if c.d.Algorithm != "" {
		pol.Algorithm = c.algorithm("algorithm", c.d.Algorithm)
	}
	if rl.Algorithm != "" {
		pol.Algorithm = c.algorithm(p+".algorithm", rl.Algorithm)
	}
	if lf.Shadow {
		pol.Mode = limits.Shadow
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
		lf.Queued = q.Size > 0
	}
	// The policy's own checks, once the rule's are passed (a bad unit
	// would be reported again as a zero period).
	if len(c.errs) > errsBefore {
		return lf
	}
	if err := pol.Validate(p); err != nil {
		c.errs = append(c.errs, fmt.Errorf("%s: domain %q: %w", c.file, c.dom.Name, err))
	}
	c.cfg.Policies = append(c.cfg.Policies, pol)
	return lf
}

// Entry is one key and value of a request descriptor.
type Entry struct{ Key, Value string }

// Match walks the descriptor tree with a request descriptor's entries: the
// limit of the rule reached (nil when that rule sets none), and whether a
// rule was reached. Each level is matched most specifically: key and
// value, then the longest value prefix, then the key alone; the rule is
// the one at the level of the last entry.
func (d *Domain) Match(entries []Entry) (*Limit, bool) {
	n := d.root
	var r *rule
	for _, en := range entries {
		if n == nil {
			return nil, false
		}
		if r = n.find(en.Key, en.Value); r == nil {
			return nil, false
		}
		n = r.children
	}
	if r == nil {
		return nil, false
	}
	return r.limit, true
}

func (n *node) find(key, value string) *rule {
	if r := n.exact[key+"\x00"+value]; r != nil {
		return r
	}
	for _, r := range n.prefixes {
		if r.key == key && strings.HasPrefix(value, r.value) {
			return r
		}
	}
	return n.any[key]
}

// Partition returns the partition key of entries, matched to l: the
// values l's rule does not fix (no value, or a prefix), shared ones
// excepted, joined by backend.KeySeparator. One value is the key as it
// is; in a joined key each value's separator and escape bytes are
// escaped, so that values chosen by a client cannot make two descriptors
// share a partition.
func (l *Limit) Partition(entries []Entry) string {
	key, n := "", 0
	var b []byte
	for i, en := range entries {
		if !l.partition[i] {
			continue
		}
		switch n++; n {
		case 1:
			key = en.Value
		case 2:
			b = append(appendEscaped(b, key), backend.KeySeparator)
			b = appendEscaped(b, en.Value)
		default:
			b = appendEscaped(append(b, backend.KeySeparator), en.Value)
		}
	}
	if n > 1 {
		return string(b)
	}
	return key
}

// keyEscape escapes itself and backend.KeySeparator inside a value of
// a joined partition key.
const keyEscape = 0x1e

func appendEscaped(b []byte, v string) []byte {
	if strings.IndexByte(v, backend.KeySeparator) < 0 && strings.IndexByte(v, keyEscape) < 0 {
		return append(b, v...)
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case keyEscape, backend.KeySeparator:
			b = append(b, keyEscape, c^0x40)
		default:
			b = append(b, c)
		}
	}
	return b
}

// Tenant returns the value of the entry the rule marks as the tenant, or "".
func (l *Limit) Tenant(entries []Entry) string {
	if l.tenant < 0 {
		return ""
	}
	return entries[l.tenant].Value
}
