package main

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

// rawFile is the policy file as YAML nodes (config.ParseTree's, from the
// one parse of the file): what check needs beyond config.File (the names
// a broken file defines, the position of a key). A file that is not YAML
// has a nil root, whose lookups find nothing.
type rawFile struct{ root *yaml.Node }

// get returns the value under key of the mapping n, or nil.
func get(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// item returns the i-th element of the sequence n, or nil.
func item(n *yaml.Node, i int) *yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode || i >= len(n.Content) {
		return nil
	}
	return n.Content[i]
}

// names returns the policy names (policies[].name) and plan names (the
// keys of plans) the file defines, whether or not it is valid.
func (r rawFile) names() fileNames {
	var fn fileNames
	if ps := get(r.root, "policies"); ps != nil && ps.Kind == yaml.SequenceNode {
		for _, p := range ps.Content {
			if n := get(p, "name"); n != nil && n.Kind == yaml.ScalarNode {
				fn.policies = append(fn.policies, n.Value)
			}
		}
	}
	if pl := get(r.root, "plans"); pl != nil && pl.Kind == yaml.MappingNode {
		for i := 0; i < len(pl.Content); i += 2 {
			fn.plans = append(fn.plans, pl.Content[i].Value)
		}
	}
	return fn
}

// A warning is a valid setting that probably does not do what was meant.
type warning struct {
	line, column int
	path, msg    string
}

// exemptWarnings warns of each exempt path that covers requests of a
// route a policy limits: the middleware lets them all through unlimited.
func exemptWarnings(f *config.File, raw rawFile) []warning {
	var out []warning
	exempt := get(get(raw.root, "http"), "exempt")
	for j, e := range f.HTTP.Exempt {
		for i, p := range f.Config.Policies {
			seen := map[string]bool{}
			for _, op := range p.Match.Operations {
				_, route, ok := strings.Cut(op, " ")
				if !ok || !strings.HasPrefix(route, "/") {
					continue
				}
				all, some := covers(e, route)
				if !some || seen[route] {
					continue
				}
				seen[route] = true
				what := "every request to"
				if !all {
					what = "some requests to"
				}
				w := warning{path: fmt.Sprintf("http.exempt[%d]", j),
					msg: fmt.Sprintf("%q exempts %s %s, which policies[%d] (%s) limits: those requests are never limited", e, what, route, i, p.Name)}
				if n := item(exempt, j); n != nil {
					w.line, w.column = n.Line, n.Column
				}
				out = append(out, w)
			}
		}
	}
	return out
}

// covers reports whether the exempt path e (exact, or a prefix ending in
// "/*") matches every request of the route pattern r (all) or at least
// some of them (some). A route segment in braces matches any segment; one
// ending in "...}" any rest of the path.
func covers(e, r string) (all, some bool) {
	prefix, isPrefix := strings.CutSuffix(e, "/*")
	if isPrefix && prefix == "" {
		return true, true
	}
	if !isPrefix {
		prefix = e
	}
	es, rs := segments(prefix), segments(r)
	partial := false
	for i, s := range es {
		if i >= len(rs) {
			return false, false
		}
		switch w := rs[i]; {
		case strings.HasPrefix(w, "{") && strings.HasSuffix(w, "...}"):
			return false, true
		case strings.HasPrefix(w, "{") && strings.HasSuffix(w, "}"):
			partial = true
		case w != s:
			return false, false
		}
	}
	if !isPrefix && len(rs) > len(es) {
		// An exact path matches a longer route only through a rest wildcard.
		if w := rs[len(es)]; len(rs) == len(es)+1 && strings.HasSuffix(w, "...}") {
			return false, true
		}
		return false, false
	}
	return !partial, true
}

func segments(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// builtinUnits are the units requests carry without naming them.
var builtinUnits = []string{string(limits.UnitRequests), string(limits.UnitTokens), string(limits.UnitCost)}

// unitWarnings warns of a policy unit that is a named unit one typo away
// from a built-in one ("tokenz"): valid, but no request carries it, so the
// policy charges nothing.
func unitWarnings(f *config.File, raw rawFile) []warning {
	var out []warning
	for i, p := range f.Config.Policies {
		u := string(p.Unit)
		if u == "" || slices.Contains(builtinUnits, u) {
			continue
		}
		s, ok := nearest(u, builtinUnits)
		if !ok {
			continue
		}
		w := warning{path: fmt.Sprintf("policies[%d].unit", i),
			msg: fmt.Sprintf("%q is a named unit, which a request carries only when it names it; did you mean %q?", u, s)}
		if n := get(item(get(raw.root, "policies"), i), "unit"); n != nil {
			w.line, w.column = n.Line, n.Column
		}
		out = append(out, w)
	}
	return out
}
