package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/limits"
)

// MaxNodes bounds the nodes of a policy file, counted with its aliases
// expanded (each alias counts the nodes it stands for), so that nested
// aliases cannot make a small file expand without end. It leaves room for
// an admitctl db export of 100,000 tenants (about 11 nodes each, with one
// key) several times over. A file above it is refused as a whole, with an
// error naming the bound, before any of it is decoded: it never loads in
// part.
const MaxNodes = 5_000_000

// MaxFileSize bounds the bytes of a policy file: room for a file of
// MaxNodes nodes in the shape of an admitctl db export. A larger file,
// or one that never ends (a device, a pipe), is refused with an error
// naming the bound, before it is read whole or parsed.
const MaxFileSize = 128 << 20

// tooLarge is the error of a file over MaxFileSize.
func tooLarge(name string) Errors {
	return Errors{{File: name, Line: 1, Column: 1,
		Msg: fmt.Sprintf("file too large: more than %d bytes (the bound is config.MaxFileSize); nothing of it was loaded", MaxFileSize)}}
}

// ReadFile reads the policy file at path, at most MaxFileSize bytes: a
// larger file, or one that never ends, is refused with an Errors naming
// the bound, after reading at most one byte more.
func ReadFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if st, err := fh.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > MaxFileSize {
		return nil, tooLarge(path)
	}
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge(path)
	}
	return data, nil
}

type decoder struct {
	file  string
	errs  Errors
	lines map[string]*yaml.Node
	f     *File
	// keyPaths records where each key hash was declared.
	keyPaths map[apikey.Hash]string
	// keyIDs records the tenant and path where each key id was first
	// given.
	keyIDs map[string][2]string
	// overridePaths records the node of each plan and tenant override.
	tenantNodes map[string]*yaml.Node
	// cls holds what names classes until the classes section is known.
	cls classDecoding
}

// Parse decodes and validates a policy file. name is used in error
// messages. The error, when the file is not valid, is an Errors listing
// every problem.
func Parse(name string, data []byte) (*File, error) {
	f, _, err := ParseTree(name, data)
	return f, err
}

// ParseTree is Parse that also returns the root node of the file's YAML
// document, valid file or not, for a tool that points at keys by their
// position (admitctl check's warnings and suggestions) without parsing
// the file again. The node is nil when data is not one YAML document;
// the caller must not change it.
func ParseTree(name string, data []byte) (*File, *yaml.Node, error) {
	if len(data) > MaxFileSize {
		return nil, nil, tooLarge(name)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if err == nil {
		// A second document would be ignored silently: refuse it.
		var extra yaml.Node
		if e := dec.Decode(&extra); e == nil {
			return nil, nil, Errors{{File: name, Line: extra.Line, Column: 1,
				Msg: "a second YAML document (after ---): a policy file holds one"}}
		} else if !errors.Is(e, io.EOF) {
			err = e
		}
	}
	if err != nil {
		line := 0
		msg := err.Error()
		msg = strings.TrimPrefix(msg, "yaml: ")
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if n, tail, ok := strings.Cut(rest, ":"); ok {
				if l, err := strconv.Atoi(n); err == nil {
					line, msg = l, strings.TrimSpace(tail)
				}
			}
		}
		return nil, nil, Errors{{File: name, Line: line, Column: 1, Msg: "invalid YAML: " + msg}}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil, Errors{{File: name, Line: 1, Column: 1, Msg: "empty file: at least one policy is needed"}}
	}
	root := doc.Content[0]
	nodes, cycle := countNodes(root, MaxNodes)
	if cycle != nil {
		return nil, root, Errors{{File: name, Line: cycle.Line, Column: cycle.Column,
			Msg: fmt.Sprintf("alias *%s refers to a node that contains it: it would expand without end", cycle.Value)}}
	}
	if nodes > MaxNodes {
		return nil, root, Errors{{File: name, Line: 1, Column: 1,
			Msg: fmt.Sprintf("document too large: more than %d nodes with its aliases expanded (the bound is config.MaxNodes); nothing of it was loaded", MaxNodes)}}
	}
	// About half the nodes are keys, whose positions lines records.
	d := &decoder{
		file: name, lines: make(map[string]*yaml.Node, nodes/2), f: edgeDefaults(defaults()),
		keyPaths: map[apikey.Hash]string{}, keyIDs: map[string][2]string{}, tenantNodes: map[string]*yaml.Node{},
	}
	d.f.Source = name
	d.decodeRoot(root)
	d.validate(root)
	if len(d.errs) == 0 {
		if err := d.f.Config.Validate(); err != nil {
			d.fieldErrors(err, root)
		}
	}
	if len(d.errs) > 0 {
		d.errs.sort()
		return nil, root, d.errs
	}
	return d.f, root, nil
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	e := &Error{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

// fieldErrors locates the *limits.FieldError values in err by their path.
func (d *decoder) fieldErrors(err error, root *yaml.Node) {
	var leaves []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		leaves = append(leaves, e)
	}
	walk(err)
	for _, e := range leaves {
		var fe *limits.FieldError
		if !errors.As(e, &fe) {
			d.errorf(root, "", "%v", e)
			continue
		}
		if d.reported(fe.Path) {
			continue
		}
		d.errorf(d.locate(fe.Path, root), fe.Path, "%s", fe.Msg)
	}
}

// reported reports whether an error was already given for path: the
// semantic checks do not repeat what decoding found.
func (d *decoder) reported(path string) bool {
	for _, e := range d.errs {
		if e.Path == path {
			return true
		}
	}
	return false
}

// locate returns the node recorded for path, or for its nearest recorded
// ancestor.
func (d *decoder) locate(path string, root *yaml.Node) *yaml.Node {
	for p := path; p != ""; {
		if n, ok := d.lines[p]; ok {
			return n
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return root
}

// countNodes returns the number of nodes of the tree under root with its
// aliases expanded (each alias counts the nodes it stands for), or
// limit+1 when there are more than limit, and the alias that refers to a
// node containing it, which would expand without end, if there is one.
// The size of each anchored node is computed once, so counting costs
// the document's own nodes however far its aliases expand; the walk keeps
// its own stack, so no nesting can exhaust the goroutine's.
func countNodes(root *yaml.Node, limit int) (int, *yaml.Node) {
	type frame struct {
		n    *yaml.Node
		next int // the child to visit next
		size int // the nodes counted so far: n and its visited children
	}
	const open = -1 // the size of an anchored node being counted
	sizes := map[*yaml.Node]int{}
	if root.Anchor != "" {
		sizes[root] = open
	}
	stack := []frame{{n: root, size: 1}}
	for {
		top := &stack[len(stack)-1]
		if top.size > limit {
			return limit + 1, nil
		}
		if top.next == len(top.n.Content) {
			size := top.size
			if top.n.Anchor != "" {
				sizes[top.n] = size
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return size, nil
			}
			stack[len(stack)-1].size += size
			continue
		}
		c := top.n.Content[top.next]
		top.next++
		if c.Kind == yaml.AliasNode && c.Alias != nil {
			target := c.Alias
			if size, ok := sizes[target]; ok {
				if size == open {
					return 0, c
				}
				top.size += size
				continue
			}
			c = target
		}
		if c.Anchor != "" {
			sizes[c] = open
		}
		stack = append(stack, frame{n: c, size: 1})
	}
}

// resolve follows aliases. Parse has checked that the document, with its
// aliases expanded, is within MaxNodes.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

type field struct {
	name string
	fn   func(n *yaml.Node, path string)
}

// mapping decodes a mapping node whose keys must be among fields, each
// exactly once. It returns false when n is not a mapping.
func (d *decoder) mapping(n *yaml.Node, path string, fields ...field) bool {
	n = d.resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, got %s", describe(n))
		return false
	}
	d.each(n, path, func(k, v *yaml.Node, p string) {
		if k.Value == "<<" {
			d.errorf(k, path, "merge keys (<<) are not supported")
			return
		}
		for _, f := range fields {
			if f.name == k.Value {
				f.fn(v, p)
				return
			}
		}
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.name
		}
		d.errorf(k, p, "unknown key %q (want one of %s)", k.Value, strings.Join(names, ", "))
	})
	return true
}

// pairs iterates a mapping with free-form keys (plan, tenant and policy
// names), reporting duplicates.
func (d *decoder) pairs(n *yaml.Node, path string, fn func(key string, k, v *yaml.Node, path string)) {
	n = d.resolve(n)
	if n.Kind != yaml.MappingNode {
		if !isNull(n) {
			d.errorf(n, path, "expected a mapping, got %s", describe(n))
		}
		return
	}
	d.each(n, path, func(k, v *yaml.Node, p string) { fn(k.Value, k, v, p) })
}

// each walks the entries of mapping n, reporting keys that are not
// non-empty plain strings and duplicate keys, records each key's position
// under its path, and calls fn for the others.
func (d *decoder) each(n *yaml.Node, path string, fn func(k, v *yaml.Node, path string)) {
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := d.resolve(n.Content[i])
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			d.errorf(k, path, "keys must be non-empty plain strings")
			continue
		}
		p := join(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, p, "duplicate key (first set at line %d)", first.Line)
			continue
		}
		seen[k.Value] = k
		d.lines[p] = k
		fn(k, n.Content[i+1], p)
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unsupported node"
}

func (d *decoder) scalar(n *yaml.Node, path string) (string, bool) {
	n = d.resolve(n)
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.errorf(n, path, "expected a value, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) str(dst *string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if s, ok := d.scalar(n, path); ok {
			*dst = s
		}
	}
}

func (d *decoder) name(dst *string, what string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if s, ok := d.scalar(n, path); ok {
			if !validName(s) {
				d.errorf(d.resolve(n), path, "%q is not a valid %s name (letters, digits, '-', '_' and '.', at most 64)", s, what)
				return
			}
			*dst = s
		}
	}
}

func (d *decoder) boolean(dst *bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		switch s {
		case "true":
			*dst = true
		case "false":
			*dst = false
		default:
			d.errorf(d.resolve(n), path, "unknown value %q (want one of true, false)", s)
		}
	}
}

// amount reads a scalar amount (with k/M/G suffixes), reporting a bad one.
func (d *decoder) amount(n *yaml.Node, path string) (int64, bool) {
	s, ok := d.scalar(n, path)
	if !ok {
		return 0, false
	}
	v, err := parseAmount(s)
	if err != nil {
		d.errorf(d.resolve(n), path, "%v", err)
		return 0, false
	}
	return v, true
}

// positive decodes an amount (a limit, burst or cost) that must be > 0 and
// at most limits.MaxAmount; set records that it was given.
func (d *decoder) positive(dst *int64, set *bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		v, ok := d.amount(n, path)
		if !ok {
			return
		}
		if v <= 0 {
			d.errorf(d.resolve(n), path, "must be > 0, got %d", v)
			return
		}
		if v > limits.MaxAmount {
			d.errorf(d.resolve(n), path, "must be <= %d (MaxAmount), got %d", limits.MaxAmount, v)
			return
		}
		*dst = v
		if set != nil {
			*set = true
		}
	}
}

func (d *decoder) integer(dst *int, min int) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		v, ok := d.amount(n, path)
		if !ok {
			return
		}
		if v < int64(min) || v > 1<<31 {
			d.errorf(d.resolve(n), path, "must be between %d and %d, got %d", min, 1<<31, v)
			return
		}
		*dst = int(v)
	}
}

func (d *decoder) duration(dst *time.Duration, allowZero bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		v, err := parseDuration(s)
		if err != nil {
			d.errorf(d.resolve(n), path, "%v", err)
			return
		}
		if v < 0 || v == 0 && !allowZero {
			d.errorf(d.resolve(n), path, "must be > 0, got %s", s)
			return
		}
		*dst = v
	}
}

func (d *decoder) enum(dst interface{ UnmarshalText([]byte) error }) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		if err := dst.UnmarshalText([]byte(s)); err != nil {
			d.errorf(d.resolve(n), path, "%v", err)
		}
	}
}

// list decodes a sequence of scalars; a single scalar counts as a list of
// one when one is true.
func (d *decoder) list(dst *[]string, one bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		n = d.resolve(n)
		if one && n.Kind == yaml.ScalarNode && !isNull(n) {
			*dst = []string{n.Value}
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "expected a list, got %s", describe(n))
			return
		}
		seen := map[string]int{}
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			s, ok := d.scalar(e, p)
			if !ok {
				continue
			}
			d.lines[p] = d.resolve(e)
			if j, dup := seen[s]; dup {
				d.errorf(d.resolve(e), p, "%q already listed at %s[%d]", s, path, j)
				continue
			}
			seen[s] = i
			*dst = append(*dst, s)
		}
	}
}

func (d *decoder) decodeRoot(root *yaml.Node) {
	f := d.f
	version := 1
	sawPolicies := false
	if !d.mapping(root, "",
		field{"version", d.integer(&version, 1)},
		field{"policies", func(n *yaml.Node, p string) { sawPolicies = true; d.decodePolicies(n, p) }},
		field{"default_plan", d.name(&f.Config.Plans.Default, "plan")},
		field{"plans", d.decodePlans},
		field{"tenants", d.decodeTenants},
		field{"identity", d.decodeIdentity},
		field{"http", d.decodeHTTP},
		field{"metrics", d.decodeMetrics},
		field{"logging", d.decodeLogging},
		field{"prices", d.decodePrices},
		field{"models", d.decodeModels},
		field{"stores", d.decodeStores},
		field{"classes", d.decodeClasses},
		field{"budgets", d.decodeBudgets},
		field{"directory", d.decodeDirectory},
		field{"tools", d.tools(&f.Tools)},
		field{"mcp_servers", d.decodeMCPServers},
		field{"deployments", d.decodeDeployments},
	) {
		return
	}
	if version != 1 {
		d.errorf(d.lines["version"], "version", "unsupported version %d (this build reads version 1)", version)
	}
	if !sawPolicies {
		d.errorf(root, "policies", "missing: at least one policy is needed")
	}
}

func (d *decoder) decodePolicies(n *yaml.Node, path string) {
	n = d.resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list of policies, got %s", describe(n))
		return
	}
	if len(n.Content) == 0 {
		d.errorf(n, path, "at least one policy is needed")
	}
	for i, e := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.lines[p] = d.resolve(e)
		d.decodePolicy(e, p)
	}
}

func (d *decoder) decodePolicy(n *yaml.Node, path string) {
	index := len(d.f.Config.Policies)
	var (
		pol        admission.Policy
		info       PolicyInfo
		ops        []string
		keys       []string
		unit       string
		limitSet   bool
		location   string
		locationAt *yaml.Node
	)
	ok := d.mapping(n, path,
		field{"name", d.name(&pol.Name, "policy")},
		field{"description", d.str(&info.Description)},
		field{"match", func(n *yaml.Node, p string) {
			d.mapping(n, p, append([]field{
				{"operations", d.list(&ops, false)},
				{"routes", d.list(&info.Routes, false)},
				{"methods", d.list(&info.Methods, false)},
				{"models", d.list(&pol.Match.Models, false)},
			}, d.matchMCP(&info)...)...)
		}},
		field{"key", d.list(&keys, true)},
		field{"unit", d.str(&unit)},
		field{"algorithm", d.enum(&pol.Algorithm)},
		field{"limit", d.positive(&pol.Limit, &limitSet)},
		field{"per", d.duration(&pol.Per, false)},
		field{"burst", d.positive(&pol.Burst, nil)},
		field{"period", d.enum(&pol.Period)},
		field{"location", func(n *yaml.Node, p string) {
			location, _ = d.scalar(n, p)
			locationAt = d.resolve(n)
		}},
		field{"max_cost", d.positive(&pol.MaxCost, nil)},
		field{"bounds", d.name(&info.Bounds, "policy")},
		field{"queue", func(n *yaml.Node, p string) {
			d.mapping(n, p,
				field{"size", d.integer(&pol.Queue.Size, 0)},
				field{"per_tenant", d.integer(&pol.Queue.PerTenant, 1)},
				field{"timeout", d.duration(&pol.Queue.Timeout, false)},
				field{"order", d.enum(&pol.Queue.Order)},
				field{"shares", d.decodeShares(index)},
			)
		}},
		field{"mode", d.enum(&pol.Mode)},
		field{"store", d.str(&pol.Store)},
		field{"on_store_error", d.enum(&pol.OnStoreError)},
		field{"replicas", d.integer(&pol.Replicas, 1)},
		field{"max_partitions", d.integer(&pol.MaxPartitions, 1)},
		field{"overflow", d.enum(&pol.Overflow)},
		field{"idle_timeout", d.duration(&pol.IdleTimeout, false)},
		field{"max_hold", d.duration(&pol.MaxHold, false)},
		field{"retry_hint", d.duration(&pol.RetryHint, false)},
		field{"warn", d.warn(&info.Warn)},
		field{"soft", d.boolean(&info.Soft)},
		field{"budget", d.boolean(&info.Budget)},
	)
	if !ok {
		return
	}
	if pol.Name == "" {
		if _, given := d.lines[path+".name"]; !given {
			d.errorf(d.lines[path], path+".name", "missing")
		}
	}
	if !limitSet {
		if _, given := d.lines[path+".limit"]; !given {
			d.errorf(d.lines[path], path+".limit", "missing")
		}
	}
	if _, given := d.lines[path+".algorithm"]; !given {
		d.errorf(d.lines[path], path+".algorithm", "missing (want one of token_bucket, fixed_window, sliding_window, sliding_log, concurrency, quota)")
	}
	if unit != "" {
		if !validName(unit) {
			d.errorf(d.lines[path+".unit"], path+".unit", "%q is not a valid unit name", unit)
		}
		pol.Unit = limits.Unit(unit)
	}
	for i, k := range keys {
		var kp limits.KeyPart
		if err := kp.UnmarshalText([]byte(k)); err != nil {
			d.errorf(d.locate(fmt.Sprintf("%s.key[%d]", path, i), nil), fmt.Sprintf("%s.key[%d]", path, i), "%s", strings.Replace(err.Error(), "unknown key", "unknown key part", 1))
			continue
		}
		pol.Key = append(pol.Key, kp)
	}
	if location != "" {
		loc, err := time.LoadLocation(location)
		if err != nil {
			d.errorf(locationAt, path+".location", "unknown time zone %q", location)
		} else {
			pol.Location = loc
		}
		if pol.Algorithm != limits.Quota || pol.Period == limits.PeriodFixed {
			d.errorf(locationAt, path+".location", "only a day or month quota has a location")
		}
	}
	if _, given := d.lines[path+".period"]; given && pol.Algorithm != limits.Quota {
		d.errorf(d.lines[path+".period"], path+".period", "only a quota has a period")
	}
	if info.Bounds != "" && pol.Algorithm != limits.Quota {
		d.errorf(d.lines[path+".bounds"], path+".bounds", "only a quota bounds another policy")
	}
	if len(info.Methods) > 0 && len(info.Routes) == 0 {
		d.errorf(d.lines[path+".match.methods"], path+".match.methods", "methods need routes to apply to")
	}
	methods := info.Methods
	if len(methods) == 0 {
		methods = allMethods
	}
	for i, m := range info.Methods {
		if !isMethod(m) {
			d.errorf(d.lines[fmt.Sprintf("%s.match.methods[%d]", path, i)], fmt.Sprintf("%s.match.methods[%d]", path, i), "%q is not an HTTP method", m)
		}
	}
	for i, r := range info.Routes {
		if !strings.HasPrefix(r, "/") || strings.ContainsAny(r, " \t") {
			d.errorf(d.lines[fmt.Sprintf("%s.match.routes[%d]", path, i)], fmt.Sprintf("%s.match.routes[%d]", path, i), "%q is not a route pattern (write /v1/items/{id})", r)
		}
		for _, m := range methods {
			ops = append(ops, m+" "+r)
		}
	}
	pol.Match.Operations = ops
	d.budgetPolicy(&pol, &info, path)
	if at := d.lines[path+".budget"]; at != nil && info.Budget {
		switch {
		case pol.Algorithm != limits.Quota:
			d.errorf(at, path+".budget", "only a quota is a budget (this policy is a %s)", pol.Algorithm)
		case info.Soft:
			d.errorf(at, path+".budget", "a soft quota never refuses: it cannot be a budget; remove budget (or soft)")
		case pol.DetectsLoops():
			d.errorf(at, path+".budget", "a loop policy (keyed by fingerprint) cannot be a budget: its refusal is the loop's")
		case pol.Overflow == limits.OverflowEvict:
			d.errorf(at, path+".budget", "overflow: evict would drop a budget's partition when the table is full, and its session would start the budget again; use overflow: reject (or shared)")
		}
	}
	d.f.Config.Policies = append(d.f.Config.Policies, pol)
	d.f.Policies = append(d.f.Policies, info)
}

// allMethods are the methods a route matches when a policy names none.
var allMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}

func isMethod(m string) bool {
	for _, x := range allMethods {
		if x == m {
			return true
		}
	}
	return false
}

// overrideNode decodes one plan or tenant override of a policy.
func (d *decoder) override(n *yaml.Node, path string) limits.Override {
	var o limits.Override
	if d.mapping(n, path,
		field{"limit", d.positive(&o.Limit, nil)},
		field{"burst", d.positive(&o.Burst, nil)},
		field{"per", d.duration(&o.Per, false)},
	) && len(d.resolve(n).Content) == 0 {
		d.errorf(d.resolve(n), path, "an override needs limit, burst or per")
	}
	return o
}

func (d *decoder) decodePlans(n *yaml.Node, path string) {
	pl := &d.f.Config.Plans
	pl.Plans = map[string]map[string]limits.Override{}
	d.pairs(n, path, func(plan string, k, v *yaml.Node, p string) {
		if !validName(plan) {
			d.errorf(k, p, "%q is not a valid plan name", plan)
		}
		os := map[string]limits.Override{}
		d.pairs(v, p, func(pol string, _, v *yaml.Node, p string) {
			os[pol] = d.override(v, p)
		})
		pl.Plans[plan] = os
	})
}

func (d *decoder) decodeTenants(n *yaml.Node, path string) {
	pl := &d.f.Config.Plans
	pl.Tenants = map[string]limits.TenantPlan{}
	d.pairs(n, path, func(tenant string, k, v *yaml.Node, p string) {
		d.tenantNodes[tenant] = k
		if !ValidTenant(tenant) {
			d.errorf(k, p, "%q is not a valid tenant name (1 to %d printable characters)", tenant, maxTenantName)
		}
		var tp limits.TenantPlan
		d.mapping(v, p,
			field{"plan", d.name(&tp.Plan, "plan")},
			field{"api_keys", func(n *yaml.Node, p string) { d.decodeKeys(tenant, n, p) }},
			field{"overrides", func(n *yaml.Node, p string) {
				tp.Overrides = map[string]limits.Override{}
				d.pairs(n, p, func(pol string, _, v *yaml.Node, p string) {
					tp.Overrides[pol] = d.override(v, p)
				})
			}},
		)
		pl.Tenants[tenant] = tp
	})
}

func (d *decoder) decodeKeys(tenant string, n *yaml.Node, path string) {
	n = d.resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list of key hashes, got %s", describe(n))
		return
	}
	id := &d.f.Identity
	if id.Keys == nil {
		id.Keys = map[apikey.Hash]apikey.Identity{}
	}
	for i, e := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		e = d.resolve(e)
		d.lines[p] = e
		var hash, keyID, user, class string
		if e.Kind == yaml.MappingNode {
			d.mapping(e, p,
				field{"hash", d.str(&hash)},
				field{"id", d.name(&keyID, "key id")},
				field{"user", d.str(&user)},
				field{"class", d.str(&class)},
			)
			if hash == "" {
				if _, given := d.lines[p+".hash"]; !given {
					d.errorf(e, p+".hash", "missing")
				}
				continue
			}
		} else if s, ok := d.scalar(e, p); ok {
			hash = s
		} else {
			continue
		}
		if !ValidUser(user) {
			d.errorf(d.lines[p+".user"], p+".user", "the user is not 0 to %d printable characters", maxUser)
		}
		at := e
		if x, ok := d.lines[p+".hash"]; ok {
			at = x
		}
		h, err := apikey.ParseHash(hash)
		if err != nil {
			d.errorf(at, p, "%v", err)
			continue
		}
		if first, dup := d.keyPaths[h]; dup {
			d.errorf(at, p, "key hash already used at %s", first)
			continue
		}
		d.keyPaths[h] = p
		if keyID == "" {
			keyID = h.ID()
		}
		// One tenant's keys may share an id (a key and the one replacing
		// it); another tenant's key under it would share its partitions.
		if first, ok := d.keyIDs[keyID]; ok && first[0] != tenant {
			if x, ok := d.lines[p+".id"]; ok {
				at = x
			}
			d.errorf(at, p+".id", "key id %q is already a key of tenant %q at %s: a key id names the keys of one tenant", keyID, first[0], first[1])
			continue
		} else if !ok {
			d.keyIDs[keyID] = [2]string{tenant, p}
		}
		id.Keys[h] = apikey.Identity{Tenant: tenant, KeyID: keyID, User: user}
		d.keyClass(keyID, class, p)
	}
}

func (d *decoder) decodeIdentity(n *yaml.Node, path string) {
	id := &d.f.Identity
	var proxies []string
	var anonymous string
	d.mapping(n, path,
		field{"api_key_headers", d.list(&id.KeyHeaders, true)},
		field{"trusted_proxies", d.list(&proxies, false)},
		field{"client_ip_header", d.str(&id.ClientIPHeader)},
		field{"anonymous", d.str(&anonymous)},
		field{"anonymous_tenant", d.str(&id.AnonymousTenant)},
		field{"failed_auth", d.decodeFailedAuth},
		field{"session", d.decodeSession},
	)
	d.checkSessionHeaders(path)
	id.RequireKey = d.either(path+".anonymous", anonymous, "allow", "deny")
	switch strings.ToLower(id.ClientIPHeader) {
	case "x-forwarded-for":
		id.ClientIPHeader = "X-Forwarded-For"
	case "forwarded":
		id.ClientIPHeader = "Forwarded"
	default:
		d.errorf(d.lines[path+".client_ip_header"], path+".client_ip_header", "unknown header %q (want one of X-Forwarded-For, Forwarded)", id.ClientIPHeader)
	}
	for i, s := range proxies {
		p := fmt.Sprintf("%s.trusted_proxies[%d]", path, i)
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				d.errorf(d.lines[p], p, "%q is not an address or CIDR prefix", s)
				continue
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		if pfx.Masked() != pfx {
			d.errorf(d.lines[p], p, "%q has host bits set (did you mean %s?)", s, pfx.Masked())
			continue
		}
		id.TrustedProxies = append(id.TrustedProxies, pfx)
	}
	if id.AnonymousTenant == "" {
		d.errorf(d.lines[path+".anonymous_tenant"], path+".anonymous_tenant", "must not be empty")
	}
}

func (d *decoder) decodeFailedAuth(n *yaml.Node, path string) {
	fa := &d.f.Identity.FailedAuth
	d.mapping(n, path,
		field{"enabled", d.boolean(&fa.Enabled)},
		field{"limit", d.positive(&fa.Limit, nil)},
		field{"per", d.duration(&fa.Per, false)},
		field{"max_addresses", d.integer(&fa.MaxAddresses, 1)},
	)
}

func (d *decoder) decodeHTTP(n *yaml.Node, path string) {
	h := &d.f.HTTP
	var exempt []string
	exemptSet := false
	var maxBody, uploadRate string
	d.mapping(n, path,
		field{"exempt", func(n *yaml.Node, p string) { exemptSet = true; d.list(&exempt, false)(n, p) }},
		field{"max_body", d.str(&maxBody)},
		field{"body_timeout", d.duration(&h.BodyTimeout, true)},
		field{"quota_status", d.integer(&h.QuotaStatus, 0)},
		field{"shadow_header", d.boolean(&h.ShadowHeader)},
		field{"upload_min_rate", d.str(&uploadRate)},
		field{"upload_grace", d.duration(&h.UploadGrace, false)},
		field{"max_uploads", d.integer(&h.MaxUploads, 1)},
		field{"max_uploads_per_tenant", d.integer(&h.MaxUploadsPerTenant, 1)},
	)
	if uploadRate != "" {
		v, err := parseSize(uploadRate)
		if err != nil || v <= 0 {
			d.errorf(d.lines[path+".upload_min_rate"], path+".upload_min_rate", "%q is not a size a second (write 1MiB or 262144)", uploadRate)
		}
		h.UploadMinRate = v
	}
	if h.MaxUploads > 0 && h.MaxUploadsPerTenant > h.MaxUploads {
		d.errorf(d.lines[path+".max_uploads_per_tenant"], path+".max_uploads_per_tenant", "%d is more than max_uploads %d", h.MaxUploadsPerTenant, h.MaxUploads)
	}
	if exemptSet {
		h.Exempt = exempt
		for i, e := range exempt {
			if !strings.HasPrefix(e, "/") {
				p := fmt.Sprintf("%s.exempt[%d]", path, i)
				d.errorf(d.lines[p], p, "%q is not a path", e)
			}
		}
	}
	if maxBody != "" {
		v, err := parseSize(maxBody)
		if err != nil || v < 0 {
			d.errorf(d.lines[path+".max_body"], path+".max_body", "%q is not a size (write 1048576, 512KiB or 1MiB)", maxBody)
		}
		h.MaxBody = v
	}
	if h.QuotaStatus != 403 && h.QuotaStatus != 429 {
		d.errorf(d.lines[path+".quota_status"], path+".quota_status", "unknown status %d (want one of 403, 429)", h.QuotaStatus)
	}
}

func (d *decoder) decodeMetrics(n *yaml.Node, path string) {
	m := &d.f.Metrics
	d.mapping(n, path,
		field{"enabled", d.boolean(&m.Enabled)},
		field{"listen", d.str(&m.Listen)},
		field{"path", d.str(&m.Path)},
		field{"top_tenants", d.integer(&m.TopTenants, 1)},
		field{"cardinality_limit", d.integer(&m.CardinalityLimit, 1)},
	)
	if !strings.HasPrefix(m.Path, "/") {
		d.errorf(d.lines[path+".path"], path+".path", "%q is not a path", m.Path)
	}
	if m.TopTenants > 1000 {
		d.errorf(d.lines[path+".top_tenants"], path+".top_tenants", "at most 1000, got %d", m.TopTenants)
	}
	if m.CardinalityLimit > 0 && m.TopTenants >= m.CardinalityLimit {
		d.errorf(d.lines[path+".top_tenants"], path+".top_tenants", "%d does not fit under cardinality_limit %d", m.TopTenants, m.CardinalityLimit)
	}
}

// either decodes the value v of the setting at key, which has two: off,
// the default (also when v is empty), and on. It reports whether v is on
// and refuses any other value with its line.
func (d *decoder) either(key, v, off, on string) bool {
	switch v {
	case "", off:
		return false
	case on:
		return true
	}
	d.errorf(d.lines[key], key, "unknown value %q (want one of %s, %s)", v, off, on)
	return false
}

// minDecisionSample is the smallest logging.decisions.sample above 0: one
// admitted decision in a billion, so that one in round(1/sample) stays a
// count (a smaller fraction would overflow it).
const minDecisionSample = 1e-9

func (d *decoder) decodeLogging(n *yaml.Node, path string) {
	l := &d.f.Logging
	var level, sample, sessions string
	d.mapping(n, path,
		field{"level", d.str(&level)},
		field{"sessions", d.str(&sessions)},
		field{"format", d.str(&l.Format)},
		field{"decisions", func(n *yaml.Node, p string) {
			d.mapping(n, p,
				field{"sample", d.str(&sample)},
				field{"rejections", d.boolean(&l.Rejections)},
				field{"max_per_second", d.integer(&l.MaxPerSecond, 1)},
			)
		}},
	)
	if level != "" {
		if err := l.Level.UnmarshalText([]byte(level)); err != nil {
			d.errorf(d.lines[path+".level"], path+".level", "unknown level %q (want one of debug, info, warn, error)", level)
		}
	}
	if l.Format != "json" && l.Format != "text" {
		d.errorf(d.lines[path+".format"], path+".format", "unknown format %q (want one of json, text)", l.Format)
	}
	l.HashSessions = d.either(path+".sessions", sessions, "raw", "hash")
	if sample != "" {
		v, err := strconv.ParseFloat(sample, 64)
		if err != nil || !(v == 0 || v >= minDecisionSample && v <= 1) {
			d.errorf(d.lines[path+".decisions.sample"], path+".decisions.sample", "%q is not a fraction between 0 and 1 (0, or at least %g: one in a billion)", sample, minDecisionSample)
		}
		l.DecisionSample = v
	}
	_ = slog.LevelInfo
}

// validate checks what spans entries: names, references, plans, keys.
func (d *decoder) validate(root *yaml.Node) {
	f := d.f
	d.expandMCP()
	d.validateStores()
	d.validateClasses()
	pols := f.Config.Policies
	byName := map[string]int{}
	for i := range pols {
		p := &pols[i]
		path := fmt.Sprintf("policies[%d]", i)
		// Without its algorithm the other fields cannot be judged.
		if _, given := d.lines[path+".algorithm"]; given {
			if err := p.Validate(path); err != nil {
				d.fieldErrors(err, root)
			}
		}
		if j, dup := byName[p.Name]; dup {
			d.errorf(d.lines[path+".name"], path+".name", "%q already used by policies[%d]", p.Name, j)
			continue
		}
		byName[p.Name] = i
	}
	for i := range pols {
		b := f.Policies[i].Bounds
		if b == "" {
			continue
		}
		path := fmt.Sprintf("policies[%d].bounds", i)
		j, ok := byName[b]
		if !ok {
			d.errorf(d.lines[path], path, "no policy %q", b)
			continue
		}
		t := &pols[j]
		if !t.Algorithm.IsRate() || t.Algorithm == limits.Quota {
			d.errorf(d.lines[path], path, "%q is a %s, not a rate policy", b, t.Algorithm)
			continue
		}
		if span := quotaSpan(&pols[i]); span < t.Per {
			d.errorf(d.lines[path], path, "the quota's period (%v) is shorter than the window of %q (%v): it cannot bound it", span, b, t.Per)
		}
	}
	for _, p := range planProblems(pols, &f.Config.Plans, f.Identity.AnonymousTenant) {
		at := d.lines[p.path]
		if strings.HasPrefix(p.path, "tenants.") && !strings.Contains(strings.TrimPrefix(p.path, "tenants."), ".") {
			at = d.tenantNodes[strings.TrimPrefix(p.path, "tenants.")]
		}
		d.errorf(at, p.path, "%s", p.msg)
	}
	d.validateDirectory()
}

// quotaSpan returns the shortest length of a quota's period.
func quotaSpan(p *admission.Policy) time.Duration {
	switch p.Period {
	case limits.PeriodDay:
		return 24 * time.Hour
	case limits.PeriodMonth:
		return 28 * 24 * time.Hour
	}
	return p.Per
}
