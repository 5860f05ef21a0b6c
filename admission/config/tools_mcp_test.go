package config_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

const toolsFile = "version: 1\n" +
	"tools:\n" +
	"  - {name: search}\n" +
	"  - {name: write_file, cost: 5, write: true}\n" +
	"  - {name: delete_file, cost: 2k, write: true}\n" +
	"policies:\n" +
	"  - {name: all-tools, match: {mcp_methods: [tools/call]}, key: [tenant, operation], algorithm: token_bucket, limit: 60, per: 1m}\n" +
	"  - {name: writes, match: {tools: ['@writes', write_file]}, key: [tenant], algorithm: token_bucket, limit: 5, per: 1m}\n" +
	"  - {name: reads, match: {mcp_methods: [resources/read, prompts/get]}, key: [tenant], algorithm: concurrency, limit: 4}\n" +
	"  - {name: mixed, match: {routes: [/v1/chat/completions], methods: [POST], tools: [search, __other__]}, key: [tenant, session], unit: steps, algorithm: quota, per: 7d, limit: 200, budget: true}\n"

// TestToolsSection: the tools section declares tools, their costs and
// writes, and the MCP match of a policy becomes the operations of the
// tool calls and methods it names (see limits.MCPOperation).
func TestToolsSection(t *testing.T) {
	f, err := config.Parse("tools.yaml", []byte(toolsFile))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]config.Tool{
		"search":      {Name: "search", Cost: 1},
		"write_file":  {Name: "write_file", Cost: 5, Write: true},
		"delete_file": {Name: "delete_file", Cost: 2000, Write: true},
	} {
		if got, ok := f.Tools.Lookup(name); !ok || got != want {
			t.Errorf("Tools.Lookup(%s) = %+v, %v; want %+v", name, got, ok, want)
		}
	}
	if got := f.Tools.Label("rm_rf"); got != limits.OtherTool {
		t.Errorf("Tools.Label(rm_rf) = %q; want %q", got, limits.OtherTool)
	}
	if got := f.Tools.Cost("rm_rf"); got != 1 {
		t.Errorf("Tools.Cost(rm_rf) = %d; want 1", got)
	}
	for i, want := range [][]string{
		{"mcp tools/call search", "mcp tools/call write_file", "mcp tools/call delete_file", "mcp tools/call __other__"},
		{"mcp tools/call write_file", "mcp tools/call delete_file"},
		{"mcp resources/read", "mcp prompts/get"},
		{"POST /v1/chat/completions", "mcp tools/call search", "mcp tools/call __other__"},
	} {
		if got := f.Config.Policies[i].Match.Operations; !slices.Equal(got, want) {
			t.Errorf("policies[%d].Match.Operations = %q; want %q", i, got, want)
		}
	}
	if !f.Config.Policies[1].Matches(limits.MCPOperation("tools/call", f.Tools.Label("write_file")), "") ||
		f.Config.Policies[1].Matches(limits.MCPOperation("tools/call", f.Tools.Label("search")), "") ||
		f.Config.Policies[1].Matches(limits.MCPOperation("tools/call", f.Tools.Label("unknown")), "") {
		t.Error("the writes policy must match write_file and delete_file calls, and neither search nor an undeclared tool")
	}
}

// TestToolsErrors: a tool set or MCP match that cannot be what the
// operator meant is refused with its line.
func TestToolsErrors(t *testing.T) {
	pol := func(match string) string {
		return "policies:\n  - {name: p, match: " + match + ", key: [tenant], algorithm: token_bucket, limit: 5, per: 1m}\n"
	}
	for _, tc := range []struct{ src, want string }{
		{"tools:\n  - {name: search}\n" + pol("{tools: [serch]}"), `policies[0].match.tools[0]: "serch" is not declared in the tools section`},
		{"tools:\n  - {name: search}\n" + pol("{tools: ['@writes']}"), "policies[0].match.tools[0]: the tools section declares no tool with write: true"},
		{pol("{tools: [search]}"), `"search" is not declared`},
		{"tools:\n  - {name: search}\n" + pol("{tools: [search], models: [gpt-4o]}"), "match.models cannot be combined with match.tools"},
		{pol("{mcp_methods: [tools/cal]}"), `policies[0].match.mcp_methods[0]: "tools/cal" is not an MCP method that is admitted`},
		{pol("{mcp_methods: [ping]}"), `"ping" is not an MCP method that is admitted`},
		{"tools:\n  - {name: search}\n" + pol("{tools: [search], mcp_methods: [tools/call, resources/read]}"), `policies[0].match.mcp_methods[1]: match.tools selects tool calls: "resources/read" cannot be matched`},
		{"tools:\n  - {name: 'a b'}\n" + pol("{}"), `tools[0].name: "a b" is not a tool name`},
		{"tools:\n  - {name: " + strings.Repeat("x", 129) + "}\n" + pol("{}"), "tools[0].name: \"xxxx"},
		{"tools:\n  - {name: __other__}\n" + pol("{}"), `tools[0].name: "__other__" is not a tool name`},
		{"tools:\n  - {name: s}\n  - {name: s}\n" + pol("{}"), `tools[1].name: "s" already declared at tools[0]`},
		{"tools:\n  - {name: s, cost: 0}\n" + pol("{}"), "tools[0].cost: must be > 0"},
		{"tools:\n  - {name: s, price: 1}\n" + pol("{}"), `unknown key "price"`},
		{"tools:\n" + strings.Repeat("  - {name: s}\n", config.MaxTools+1) + pol("{}"), "at most 256 (config.MaxTools)"},
	} {
		_, err := config.Parse("bad.yaml", []byte("version: 1\n"+tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tc.src, err, tc.want)
		}
	}
}
