package config

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission/limits"
)

// The tools section (see docs/mcp.md in the repository) declares the
// MCP tools behind the program: an MCP request is admitted as the
// operation limits.MCPOperation(method, tool), where tool is the
// declared name or limits.OtherTool, so a policy keyed by operation
// counts each declared tool apart and every label a tool name can reach
// is one the file wrote.
//
//	tools:
//	  - {name: search}                       # cost 1
//	  - {name: write_file, cost: 5, write: true}
//	policies:
//	  - {name: tool-calls, match: {tools: [search, write_file]}, key: [tenant, operation], algorithm: token_bucket, limit: 60, per: 1m}
//	  - {name: writes, match: {tools: ["@writes"]}, key: [tenant], algorithm: token_bucket, limit: 5, per: 1m}
//	  - {name: mcp-reads, match: {mcp_methods: [resources/read]}, key: [tenant], algorithm: concurrency, limit: 4}

// MaxTools bounds the tools section, and so the tool names a metric
// label can take.
const MaxTools = 256

// WritesTag, in match.tools, names every tool declared with write: true.
const WritesTag = "@writes"

// Tool is one entry of the tools section.
type Tool struct {
	// Name is the tool's name as MCP clients call it.
	Name string
	// Cost is what one call costs in unit cost (default 1): the amount a
	// policy counting cost is charged, besides one request and one step.
	Cost int64
	// Write marks a tool that changes something; match.tools: ["@writes"]
	// selects them all, for the lower limits writes deserve.
	Write bool
}

// Tools is the tools section: the tool set of the MCP servers behind the
// program, in file order. The zero Tools declares none.
type Tools struct {
	List   []Tool
	byName map[string]int
}

// Lookup returns the declared tool named name.
func (t *Tools) Lookup(name string) (Tool, bool) {
	i, ok := t.byName[name]
	if !ok {
		return Tool{}, false
	}
	return t.List[i], true
}

// Label returns the bounded name of tool name: name when the file
// declares it, else limits.OtherTool.
func (t *Tools) Label(name string) string {
	if _, ok := t.byName[name]; ok {
		return name
	}
	return limits.OtherTool
}

// Cost returns the cost of one call of tool name: its declared cost, 1
// for an undeclared tool.
func (t *Tools) Cost(name string) int64 {
	if tl, ok := t.Lookup(name); ok {
		return tl.Cost
	}
	return 1
}

func (d *decoder) decodeTools(n *yaml.Node, path string) {
	n = d.resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list of tools, got %s", describe(n))
		return
	}
	if len(n.Content) > MaxTools {
		d.errorf(n, path, "%d tools: at most %d (config.MaxTools)", len(n.Content), MaxTools)
		return
	}
	t := &d.f.Tools
	t.byName = map[string]int{}
	for i, e := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		tl := Tool{Cost: 1}
		if !d.mapping(e, p,
			field{"name", d.str(&tl.Name)},
			field{"cost", d.positive(&tl.Cost, nil)},
			field{"write", d.boolean(&tl.Write)},
		) {
			continue
		}
		switch j, dup := t.byName[tl.Name]; {
		case !limits.ValidToolName(tl.Name) || tl.Name == limits.OtherTool:
			d.errorf(d.resolve(e), p+".name", "%.140q is not a tool name (1 to %d letters, digits, '_', '-', '.', '/')", tl.Name, limits.MaxToolName)
		case dup:
			d.errorf(d.resolve(e), p+".name", "%q already declared at %s[%d]", tl.Name, path, j)
		default:
			t.byName[tl.Name] = len(t.List)
			t.List = append(t.List, tl)
		}
	}
}

// matchMCP decodes a policy's MCP match, match.tools and
// match.mcp_methods, into info.
func (d *decoder) matchMCP(info *PolicyInfo) []field {
	return []field{
		{"tools", d.list(&info.Tools, false)},
		{"mcp_methods", d.list(&info.MCPMethods, false)},
	}
}

// expandMCP adds to each policy's Match.Operations the operations of its
// MCP match, once the tools section is known: match.tools names tool
// calls of declared tools (WritesTag: all the write tools, limits.OtherTool: the
// undeclared ones); match.mcp_methods names methods, tools/call being
// every tool (or the tools of match.tools).
func (d *decoder) expandMCP() {
	pols := d.f.Config.Policies
	for i := range pols {
		info := &d.f.Policies[i]
		if len(info.Tools) == 0 && len(info.MCPMethods) == 0 {
			continue
		}
		path := fmt.Sprintf("policies[%d].match", i)
		if len(pols[i].Match.Models) > 0 {
			d.errorf(d.lines[path+".models"], path+".models", "an MCP request has no model: match.models cannot be combined with match.tools or match.mcp_methods")
		}
		tools := d.matchedTools(info.Tools, path+".tools")
		methods := info.MCPMethods
		if len(methods) == 0 {
			methods = []string{limits.MCPToolsCall}
		}
		var ops []string
		for j, m := range methods {
			switch {
			case !slices.Contains(limits.MCPMethods, m):
				d.errorf(d.lines[fmt.Sprintf("%s.mcp_methods[%d]", path, j)], fmt.Sprintf("%s.mcp_methods[%d]", path, j),
					"%.140q is not an MCP method that is admitted (want one of %s)", m, strings.Join(limits.MCPMethods, ", "))
			case m == limits.MCPToolsCall:
				for _, t := range tools {
					ops = append(ops, limits.MCPOperation(m, t))
				}
			case len(info.Tools) > 0:
				d.errorf(d.lines[fmt.Sprintf("%s.mcp_methods[%d]", path, j)], fmt.Sprintf("%s.mcp_methods[%d]", path, j),
					"match.tools selects tool calls: %q cannot be matched with them (write a policy of its own)", m)
			default:
				ops = append(ops, limits.MCPOperation(m, ""))
			}
		}
		pols[i].Match.Operations = append(pols[i].Match.Operations, ops...)
	}
}

// matchedTools returns the tool labels that names (a policy's
// match.tools) select, every label when names is empty.
func (d *decoder) matchedTools(names []string, path string) []string {
	t := &d.f.Tools
	if len(names) == 0 {
		all := make([]string, 0, len(t.List)+1)
		for _, tl := range t.List {
			all = append(all, tl.Name)
		}
		return append(all, limits.OtherTool)
	}
	var out []string
	for j, n := range names {
		p := fmt.Sprintf("%s[%d]", path, j)
		switch _, ok := t.byName[n]; {
		case n == WritesTag:
			writes := 0
			for _, tl := range t.List {
				if tl.Write && !slices.Contains(out, tl.Name) {
					out = append(out, tl.Name)
					writes++
				}
			}
			if writes == 0 {
				d.errorf(d.lines[p], p, "the tools section declares no tool with write: true")
			}
		case ok || n == limits.OtherTool:
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		default:
			d.errorf(d.lines[p], p, "%.140q is not declared in the tools section", n)
		}
	}
	return out
}
