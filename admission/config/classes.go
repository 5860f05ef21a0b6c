package config

import (
	"fmt"
	"net/textproto"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission/limits"
)

// MaxClassPriority bounds the priority a class may be given.
const MaxClassPriority = 1000

// MaxClasses bounds the classes a file declares: they label metrics.
const MaxClasses = limits.MaxShares

// maxHeaderValue bounds a value of classes.from_header.values: a longer
// header value never names a class.
const maxHeaderValue = 64

// Classes is the classes section: the priority classes of requests, which
// a policy's queue may reserve shares of (queue.shares), and where a
// request's class comes from. A class is only ever taken from what the
// operator trusts: the tenant's plan, the API key's entry, the route;
// a client's header only through FromHeader, for the keys it lists.
//
//	classes:
//	  priorities: {interactive: 10, batch: 0}
//	  default: interactive
//	  plans: {free: batch}
//	  routes: {/v1/embeddings: batch}
//	  from_header: {name: X-Priority, values: {low: batch}, keys: [ci-runner]}
//	tenants:
//	  acme: {api_keys: [{hash: "sha256:...", id: nightly, class: batch}]}
//	policies:
//	  - name: upstream
//	    algorithm: concurrency
//	    limit: 64
//	    queue: {size: 500, timeout: 30s, shares: [{class: interactive, percent: 70}, {class: batch, percent: 30}]}
//
// A request's class is, first that applies: the header's, for a listed
// key sending exactly one value that Values maps; its key's entry's; its
// route's; its tenant's plan's (the plan of tenants not listed being
// default_plan); Default. The most specific statement wins: a key's entry
// speaks about one caller, a route about all the work of a kind, a plan
// about whole tenants. A request no source classes has priority 0.
//
// A client header is never believed by default: picking a class, even a
// lower one, can move a caller into a share that is idle (a batch class
// alone in its 30% gets all of it while interactive tenants contend for
// their 70%), so only the keys the operator names may choose, and only
// among the values the operator maps.
type Classes struct {
	// Priorities maps each class to its admission.Request.Priority, in
	// [0, MaxClassPriority], one class a priority. Higher is served
	// first among classes without a share.
	Priorities map[string]int
	// Default is the class of a request no other source classes; empty
	// means priority 0.
	Default string
	// Plans maps a plan to the class of its tenants.
	Plans map[string]string
	// Keys maps a key id to the class its api_keys entry gives.
	Keys map[string]string
	// Routes maps a route pattern (as match.routes writes it, every
	// method) to the class of its requests.
	Routes map[string]string
	// FromHeader, when set, lets the keys it lists choose their class.
	FromHeader *ClassHeader
}

// ClassHeader is classes.from_header: a request header that chooses the
// class of the requests of some keys.
type ClassHeader struct {
	// Name is the header, in canonical form (X-Priority).
	Name string
	// Values maps a header value to its class; any other value, an
	// absent header and a repeated one leave the request to the other
	// sources.
	Values map[string]string
	// Keys are the key ids that may choose.
	Keys []string
}

// Priority returns the priority of a request of tenant, with key keyID,
// on operation ("METHOD route", as the HTTP middleware names it), whose
// header values header returns (http.Header.Values; nil when there are
// none): see Classes for the order of the sources. It is 0 when the file
// has no classes section.
func (f *File) Priority(tenant, keyID, operation string, header func(name string) []string) int {
	c := &f.Classes
	if len(c.Priorities) == 0 {
		return 0
	}
	if h := c.FromHeader; h != nil && header != nil && slices.Contains(h.Keys, keyID) {
		if vs := header(h.Name); len(vs) == 1 {
			if class, ok := h.Values[strings.TrimSpace(vs[0])]; ok {
				return c.Priorities[class]
			}
		}
	}
	if class, ok := c.Keys[keyID]; ok && keyID != "" {
		return c.Priorities[class]
	}
	if _, route, ok := strings.Cut(operation, " "); ok {
		if class, ok := c.Routes[route]; ok {
			return c.Priorities[class]
		}
	}
	plan := f.Config.Plans.Default
	if tp, ok := f.Config.Plans.Tenants[tenant]; ok && tp.Plan != "" {
		plan = tp.Plan
	}
	if class, ok := c.Plans[plan]; ok {
		return c.Priorities[class]
	}
	return c.Priorities[c.Default]
}

// classDecoding is what the decoder keeps of classes until the whole
// file is read: the section may come after the policies and keys that
// name its classes.
type classDecoding struct {
	// uses are the places that name a class: checked once the section
	// is known.
	uses []classUse
	// shares are the policies' queue.shares, by policy index.
	shares []pendingShares
	// keyClass records where each key id got its class.
	keyClass map[string]string
}

type classUse struct {
	class, path string
}

type pendingShares struct {
	policy int
	path   string
	items  []pendingShare
}

type pendingShare struct {
	class   string
	percent int
}

// use records that path names class.
func (d *decoder) useClass(class, path string) {
	d.cls.uses = append(d.cls.uses, classUse{class, path})
}

// decodeClasses decodes the classes section.
func (d *decoder) decodeClasses(n *yaml.Node, path string) {
	c := &d.f.Classes
	var header *yaml.Node
	d.mapping(n, path,
		field{"priorities", func(n *yaml.Node, p string) {
			c.Priorities = map[string]int{}
			byPrio := map[int]string{}
			d.pairs(n, p, func(name string, k, v *yaml.Node, p string) {
				if !validName(name) {
					d.errorf(k, p, "%q is not a valid class name (letters, digits, '-', '_' and '.', at most 64)", name)
					return
				}
				v64, ok := d.amount(v, p)
				if !ok {
					return
				}
				if v64 < 0 || v64 > MaxClassPriority {
					d.errorf(d.resolve(v), p, "must be between 0 and %d, got %d", MaxClassPriority, v64)
					return
				}
				prio := int(v64)
				if other, dup := byPrio[prio]; dup {
					d.errorf(d.resolve(v), p, "priority %d already belongs to class %q: two classes need two priorities", prio, other)
					return
				}
				if len(c.Priorities) == MaxClasses {
					d.errorf(k, p, "at most %d classes", MaxClasses)
					return
				}
				byPrio[prio] = name
				c.Priorities[name] = prio
			})
		}},
		field{"default", func(n *yaml.Node, p string) {
			if s, ok := d.scalar(n, p); ok {
				c.Default = s
				d.useClass(s, p)
			}
		}},
		field{"plans", func(n *yaml.Node, p string) { c.Plans = d.classMap(n, p, "") }},
		field{"routes", func(n *yaml.Node, p string) { c.Routes = d.classMap(n, p, "route") }},
		field{"from_header", func(n *yaml.Node, p string) {
			header = d.resolve(n)
			h := &ClassHeader{}
			d.mapping(n, p,
				field{"name", d.str(&h.Name)},
				field{"values", func(n *yaml.Node, p string) { h.Values = d.classMap(n, p, "value") }},
				field{"keys", d.list(&h.Keys, false)},
			)
			c.FromHeader = h
		}},
	)
	if at, given := d.lines[path+".priorities"]; !given && d.resolve(n).Kind == yaml.MappingNode {
		d.errorf(d.resolve(n), path+".priorities", "missing: the classes and their priorities")
	} else if given && len(c.Priorities) == 0 && !d.reportedUnder(path+".priorities") {
		d.errorf(at, path+".priorities", "at least one class is needed")
	}
	if h := c.FromHeader; h != nil {
		p := path + ".from_header"
		switch {
		case h.Name == "":
			d.errorf(header, p+".name", "missing: the header that chooses a class")
		case !headerToken(h.Name):
			d.errorf(d.lines[p+".name"], p+".name", "%q is not a header name", h.Name)
		default:
			h.Name = textproto.CanonicalMIMEHeaderKey(h.Name)
			if credentialHeader(h.Name) {
				d.errorf(d.lines[p+".name"], p+".name", "%s carries credentials: it cannot choose a class", h.Name)
			}
		}
		if at, given := d.lines[p+".values"]; !given {
			d.errorf(header, p+".values", "missing: at least one header value and its class")
		} else if len(h.Values) == 0 && !d.reportedUnder(p+".values") {
			d.errorf(at, p+".values", "at least one header value and its class is needed")
		}
		if len(h.Keys) == 0 && !d.reportedUnder(p+".keys") {
			d.errorf(d.at(p, ".keys", ""), p+".keys", "missing: the key ids that may choose their class (a client header is never believed for every caller)")
		}
	}
}

// classMap decodes a mapping of names (plans, routes, header values:
// what) to classes.
func (d *decoder) classMap(n *yaml.Node, path, what string) map[string]string {
	m := map[string]string{}
	d.pairs(n, path, func(key string, k, v *yaml.Node, p string) {
		switch what {
		case "route":
			if !strings.HasPrefix(key, "/") || strings.ContainsAny(key, " \t") {
				d.errorf(k, p, "%q is not a route pattern (write /v1/items/{id})", key)
				return
			}
		case "value":
			if len(key) > maxHeaderValue || strings.IndexFunc(key, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
				d.errorf(k, p, "%q is not a header value (printable ASCII without spaces, at most %d)", key, maxHeaderValue)
				return
			}
		}
		if s, ok := d.scalar(v, p); ok {
			m[key] = s
			d.useClass(s, p)
		}
	})
	return m
}

// decodeShares returns the decoder of a policy's queue.shares: a list of
// {class, percent}, resolved to priorities once the classes are known.
func (d *decoder) decodeShares(policy int) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		n = d.resolve(n)
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "expected a list of {class, percent}, got %s", describe(n))
			return
		}
		ps := pendingShares{policy: policy, path: path}
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = d.resolve(e)
			var s pendingShare
			d.mapping(e, p,
				field{"class", d.str(&s.class)},
				field{"percent", d.integer(&s.percent, 1)},
			)
			if _, given := d.lines[p+".class"]; !given {
				d.errorf(d.lines[p], p+".class", "missing")
				continue
			}
			if _, given := d.lines[p+".percent"]; !given {
				d.errorf(d.lines[p], p+".percent", "missing")
				continue
			}
			if s.percent > 100 {
				d.errorf(d.lines[p+".percent"], p+".percent", "must be in [1, 100], got %d", s.percent)
				continue
			}
			if j := slices.IndexFunc(ps.items, func(o pendingShare) bool { return o.class == s.class }); j >= 0 {
				d.errorf(d.lines[p+".class"], p+".class", "%q already has a share at %s[%d]", s.class, path, j)
				continue
			}
			ps.items = append(ps.items, s)
			d.useClass(s.class, p+".class")
		}
		d.cls.shares = append(d.cls.shares, ps)
	}
}

// keyClass records the class an api_keys entry gives its key id.
func (d *decoder) keyClass(keyID, class, path string) {
	if class == "" {
		return
	}
	p := path + ".class"
	d.useClass(class, p)
	if d.cls.keyClass == nil {
		d.cls.keyClass = map[string]string{}
	}
	if first, dup := d.cls.keyClass[keyID]; dup {
		if d.f.Classes.Keys[keyID] != class {
			d.errorf(d.lines[p], p, "key id %q already has class %q at %s", keyID, d.f.Classes.Keys[keyID], first)
		}
		return
	}
	d.cls.keyClass[keyID] = p
	if d.f.Classes.Keys == nil {
		d.f.Classes.Keys = map[string]string{}
	}
	d.f.Classes.Keys[keyID] = class
}

// validateClasses checks what names a class against the classes
// section, and installs the policies' shares as priorities.
func (d *decoder) validateClasses() {
	c := &d.f.Classes
	for _, u := range d.cls.uses {
		if _, ok := c.Priorities[u.class]; ok {
			continue
		}
		if len(c.Priorities) == 0 {
			d.errorf(d.lines[u.path], u.path, "no class %q: the file defines none (classes.priorities)", u.class)
			continue
		}
		names := make([]string, 0, len(c.Priorities))
		for n := range c.Priorities {
			names = append(names, n)
		}
		slices.Sort(names)
		d.errorf(d.lines[u.path], u.path, "no class %q (classes.priorities has %s)", u.class, strings.Join(names, ", "))
	}
	for plan := range c.Plans {
		if _, ok := d.f.Config.Plans.Plans[plan]; !ok {
			p := "classes.plans." + plan
			d.errorf(d.lines[p], p, "no plan %q", plan)
		}
	}
	if h := c.FromHeader; h != nil {
		for _, kh := range d.f.Identity.KeyHeaders {
			if textproto.CanonicalMIMEHeaderKey(kh) == h.Name {
				p := "classes.from_header.name"
				d.errorf(d.lines[p], p, "%s carries API keys (identity.api_key_headers): it cannot choose a class", h.Name)
			}
		}
		ids := map[string]bool{}
		for _, k := range d.f.Identity.Keys {
			ids[k.KeyID] = true
		}
		for i, id := range h.Keys {
			if !ids[id] {
				p := fmt.Sprintf("classes.from_header.keys[%d]", i)
				d.errorf(d.lines[p], p, "no API key has id %q", id)
			}
		}
	}
	for _, ps := range d.cls.shares {
		if ps.policy >= len(d.f.Config.Policies) {
			continue
		}
		shares := make([]limits.Share, 0, len(ps.items))
		for _, s := range ps.items {
			if prio, ok := c.Priorities[s.class]; ok {
				shares = append(shares, limits.Share{Priority: prio, Percent: s.percent})
			}
		}
		d.f.Config.Policies[ps.policy].Queue.Shares = shares
	}
}

// reportedUnder reports whether an error was given for path or a path
// under it.
func (d *decoder) reportedUnder(path string) bool {
	for _, e := range d.errs {
		if e.Path == path || strings.HasPrefix(e.Path, path+".") || strings.HasPrefix(e.Path, path+"[") {
			return true
		}
	}
	return false
}

// headerToken reports whether s is a header field name (an RFC 9110
// token of letters, digits and '-', at most 64).
func headerToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// credentialHeader reports whether the canonical header name carries a
// credential or an identity the edge decides on.
func credentialHeader(name string) bool {
	switch name {
	case "Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key", "X-Forwarded-For", "Forwarded":
		return true
	}
	return false
}
