package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission/limits"
)

// The tools section (see docs/mcp.md in the repository) declares the
// MCP tools behind the program (of its unnamed MCP server; each entry of
// the mcp_servers section declares its own): an MCP request is admitted
// as the operation limits.MCPOperation(server, method, tool), where tool
// is the declared name or limits.OtherTool, so a policy keyed by
// operation counts each declared tool apart and every label a tool name
// can reach is one the file wrote.
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

// Tools is a tool set (the tools section, or an mcp_servers entry's
// tools): the tools of one MCP server, in file order. The zero Tools
// declares none.
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

// MaxMCPServers bounds the mcp_servers section, and so the server names
// an operation or a metric label can take.
const MaxMCPServers = 16

// MCPServer is one entry of the mcp_servers section: an upstream MCP
// server a gateway serves under its name (llmproxy: at /mcp/{name}),
// with its own tool set. A name the section does not declare serves
// nothing, so every server name an operation holds is one the file
// wrote.
//
//	mcp_servers:
//	  files:
//	    url: http://files.internal:8080/mcp
//	    key_env: FILES_MCP_KEY               # optional: sent as a bearer token
//	    tools:
//	      - {name: read_file}
//	      - {name: write_file, cost: 5, write: true}
//	  search:
//	    url: http://search.internal:8080/mcp
//	    tools: [{name: search}]
//	policies:
//	  - {name: file-writes, match: {servers: [files], tools: ["@writes"]}, key: [tenant], algorithm: token_bucket, limit: 5, per: 1m}
type MCPServer struct {
	// URL is the server's streamable HTTP endpoint: http or https,
	// without credentials.
	URL string
	// KeyEnv, when set, names the environment variable holding the key
	// the program sends the server as "Authorization: Bearer <key>".
	KeyEnv string
	// Tools is the server's tool set, as the tools section is the
	// unnamed server's; tool names may repeat across servers.
	Tools Tools
}

// tools returns the decoder of a tool set into t.
func (d *decoder) tools(t *Tools) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		n = d.resolve(n)
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "expected a list of tools, got %s", describe(n))
			return
		}
		if len(n.Content) > MaxTools {
			d.errorf(n, path, "%d tools: at most %d (config.MaxTools)", len(n.Content), MaxTools)
			return
		}
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
}

func (d *decoder) decodeMCPServers(n *yaml.Node, path string) {
	if n := d.resolve(n); n.Kind == yaml.MappingNode && len(n.Content)/2 > MaxMCPServers {
		d.errorf(n, path, "%d servers: at most %d (config.MaxMCPServers)", len(n.Content)/2, MaxMCPServers)
		return
	}
	d.pairs(n, path, func(name string, k, v *yaml.Node, p string) {
		if !limits.ValidServerName(name) {
			d.errorf(k, p, "%.140q is not an MCP server name (1 to %d lower-case letters, digits, '_' and '-'; not %s)", name, limits.MaxServerName, limits.DefaultServer)
			return
		}
		var s MCPServer
		if !d.mapping(v, p,
			field{"url", d.str(&s.URL)},
			field{"key_env", d.str(&s.KeyEnv)},
			field{"tools", d.tools(&s.Tools)},
		) {
			return
		}
		if s.URL == "" {
			d.errorf(d.keyAt(p, "url"), p+".url", "missing: the server's streamable HTTP endpoint")
		} else if msg := urlProblem(s.URL, "name the variable holding the key in key_env"); msg != "" {
			d.errorf(d.keyAt(p, "url"), p+".url", "%s", msg)
		}
		if s.KeyEnv != "" {
			d.envVar(p, "key_env", s.KeyEnv)
		}
		if d.f.MCPServers == nil {
			d.f.MCPServers = map[string]MCPServer{}
		}
		d.f.MCPServers[name] = s
	})
}

// MCPServerNames returns the names of the mcp_servers section, sorted.
func (f *File) MCPServerNames() []string { return slices.Sorted(maps.Keys(f.MCPServers)) }

// MCPTools returns the tool set of the MCP server named server: the
// tools section for "", else the mcp_servers entry's (nil when the file
// declares no such server).
func (f *File) MCPTools(server string) *Tools {
	if server == "" {
		return &f.Tools
	}
	if s, ok := f.MCPServers[server]; ok {
		return &s.Tools
	}
	return nil
}

// matchMCP decodes a policy's MCP match, match.servers, match.tools and
// match.mcp_methods, into info.
func (d *decoder) matchMCP(info *PolicyInfo) []field {
	return []field{
		{"servers", d.list(&info.Servers, false)},
		{"tools", d.list(&info.Tools, false)},
		{"mcp_methods", d.list(&info.MCPMethods, false)},
	}
}

// expandMCP adds to each policy's Match.Operations the operations of its
// MCP match, once the tools and mcp_servers sections are known:
// match.servers names the servers it applies to (limits.DefaultServer:
// the unnamed one; absent: every server); match.tools names tool calls
// of tools those servers declare (WritesTag: all their write tools,
// limits.OtherTool: the undeclared ones); match.mcp_methods names
// methods, tools/call being every tool (or the tools of match.tools). A
// policy with match.servers alone matches every MCP request to them.
func (d *decoder) expandMCP() {
	pols := d.f.Config.Policies
	for i := range pols {
		info := &d.f.Policies[i]
		if len(info.Servers) == 0 && len(info.Tools) == 0 && len(info.MCPMethods) == 0 {
			continue
		}
		path := fmt.Sprintf("policies[%d].match", i)
		if len(pols[i].Match.Models) > 0 {
			d.errorf(d.lines[path+".models"], path+".models", "an MCP request has no model: match.models cannot be combined with match.servers, match.tools or match.mcp_methods")
		}
		servers := d.matchedServers(info.Servers, path+".servers")
		tools := d.matchedTools(info.Tools, servers, path+".tools")
		methods := info.MCPMethods
		switch {
		case len(methods) > 0:
		case len(info.Tools) > 0 || len(info.Servers) == 0:
			methods = []string{limits.MCPToolsCall}
		default:
			methods = limits.MCPMethods
		}
		var ops []string
		for j, m := range methods {
			p := fmt.Sprintf("%s.mcp_methods[%d]", path, j)
			switch {
			case !slices.Contains(limits.MCPMethods, m):
				d.errorf(d.lines[p], p, "%.140q is not an MCP method that is admitted (want one of %s)", m, strings.Join(limits.MCPMethods, ", "))
			case m == limits.MCPToolsCall:
				for k, s := range servers {
					for _, t := range tools[k] {
						ops = append(ops, limits.MCPOperation(s, m, t))
					}
				}
			case len(info.Tools) > 0:
				d.errorf(d.lines[p], p, "match.tools selects tool calls: %q cannot be matched with them (write a policy of its own)", m)
			default:
				for _, s := range servers {
					ops = append(ops, limits.MCPOperation(s, m, ""))
				}
			}
		}
		pols[i].Match.Operations = append(pols[i].Match.Operations, ops...)
	}
}

// matchedServers returns the servers names (a policy's match.servers)
// select, "" standing for the unnamed one: every server when names is
// empty.
func (d *decoder) matchedServers(names []string, path string) []string {
	if len(names) == 0 {
		return append([]string{""}, d.f.MCPServerNames()...)
	}
	var out []string
	for j, n := range names {
		p := fmt.Sprintf("%s[%d]", path, j)
		switch _, ok := d.f.MCPServers[n]; {
		case n == limits.DefaultServer:
			out = append(out, "")
		case ok:
			out = append(out, n)
		default:
			d.errorf(d.lines[p], p, "%.140q is not declared in the mcp_servers section (or %s, the unnamed server)", n, limits.DefaultServer)
		}
	}
	return out
}

// matchedTools returns, for each of servers, the tool labels that names
// (a policy's match.tools) select among its tools, every label when
// names is empty. A name must be a tool of one of the servers at least.
func (d *decoder) matchedTools(names, servers []string, path string) [][]string {
	out := make([][]string, len(servers))
	for k, s := range servers {
		t := d.f.MCPTools(s)
		if len(names) == 0 {
			for _, tl := range t.List {
				out[k] = append(out[k], tl.Name)
			}
			out[k] = append(out[k], limits.OtherTool)
			continue
		}
		for _, n := range names {
			switch _, ok := t.byName[n]; {
			case n == WritesTag:
				for _, tl := range t.List {
					if tl.Write && !slices.Contains(out[k], tl.Name) {
						out[k] = append(out[k], tl.Name)
					}
				}
			case (ok || n == limits.OtherTool) && !slices.Contains(out[k], n):
				out[k] = append(out[k], n)
			}
		}
	}
	where := "the tools section"
	if !slices.Equal(servers, []string{""}) {
		where = "the tools of the servers matched (the tools section, mcp_servers' tools)"
	}
	for j, n := range names {
		found := n == limits.OtherTool
		for k, s := range servers {
			if n == WritesTag {
				found = found || slices.ContainsFunc(d.f.MCPTools(s).List, func(tl Tool) bool { return tl.Write })
			} else {
				found = found || slices.Contains(out[k], n)
			}
		}
		p := fmt.Sprintf("%s[%d]", path, j)
		switch {
		case found:
		case n == WritesTag:
			d.errorf(d.lines[p], p, "%s declares no tool with write: true", where)
		default:
			d.errorf(d.lines[p], p, "%.140q is not declared in %s", n, where)
		}
	}
	return out
}
