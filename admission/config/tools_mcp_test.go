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
	if !f.Config.Policies[1].Matches(limits.MCPOperation("", "tools/call", f.Tools.Label("write_file")), "") ||
		f.Config.Policies[1].Matches(limits.MCPOperation("", "tools/call", f.Tools.Label("search")), "") ||
		f.Config.Policies[1].Matches(limits.MCPOperation("", "tools/call", f.Tools.Label("unknown")), "") {
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
		{"tools:\n  - {name: search}\n" + pol("{tools: [search], models: [gpt-4o]}"), "match.models cannot be combined with match.servers, match.tools"},
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

const serversFile = "version: 1\n" +
	"tools:\n" +
	"  - {name: search}\n" +
	"mcp_servers:\n" +
	"  files:\n" +
	"    url: https://files.internal/mcp\n" +
	"    key_env: FILES_MCP_KEY\n" +
	"    tools:\n" +
	"      - {name: search, cost: 2}\n" +
	"      - {name: write_file, cost: 5, write: true}\n" +
	"  web: {url: 'http://web.internal:8080/mcp'}\n" +
	"policies:\n" +
	"  - {name: file-writes, match: {servers: [files], tools: ['@writes']}, key: [tenant], algorithm: token_bucket, limit: 5, per: 1m}\n" +
	"  - {name: searches, match: {tools: [search]}, key: [tenant, operation], algorithm: token_bucket, limit: 60, per: 1m}\n" +
	"  - {name: web-all, match: {servers: [web]}, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}\n" +
	"  - {name: reads, match: {servers: [default, web], mcp_methods: [resources/read]}, key: [tenant], algorithm: concurrency, limit: 4}\n" +
	"  - {name: all-calls, match: {mcp_methods: [tools/call]}, key: [tenant], algorithm: token_bucket, limit: 600, per: 1m}\n"

// TestMCPServersSection: the mcp_servers section declares servers, each
// with its URL, key variable and tool set (a tool name may repeat across
// servers, with its own cost); match.servers narrows a policy's MCP
// match to its servers (default: the unnamed one), and without it a
// policy's MCP match covers every server.
func TestMCPServersSection(t *testing.T) {
	f, err := config.Parse("servers.yaml", []byte(serversFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.MCPServerNames(); !slices.Equal(got, []string{"files", "web"}) {
		t.Errorf("MCPServerNames() = %q; want [files web]", got)
	}
	if s := f.MCPServers["files"]; s.URL != "https://files.internal/mcp" || s.KeyEnv != "FILES_MCP_KEY" {
		t.Errorf("mcp_servers.files = %+v", s)
	}
	if got := f.MCPTools("files").Cost("search"); got != 2 {
		t.Errorf("files' search costs %d; want 2", got)
	}
	if got := f.MCPTools("").Cost("search"); got != 1 {
		t.Errorf("the unnamed server's search costs %d; want 1", got)
	}
	if f.MCPTools("nope") != nil {
		t.Error("MCPTools(nope) is not nil: an undeclared server has no tools")
	}
	for i, want := range [][]string{
		{"mcp/files tools/call write_file"},
		{"mcp tools/call search", "mcp/files tools/call search"},
		{"mcp/web tools/call __other__", "mcp/web initialize", "mcp/web tools/list", "mcp/web resources/read", "mcp/web resources/list", "mcp/web resources/templates/list",
			"mcp/web resources/subscribe", "mcp/web resources/unsubscribe", "mcp/web prompts/get", "mcp/web prompts/list", "mcp/web completion/complete", "mcp/web logging/setLevel"},
		{"mcp resources/read", "mcp/web resources/read"},
		{"mcp tools/call search", "mcp tools/call __other__", "mcp/files tools/call search", "mcp/files tools/call write_file", "mcp/files tools/call __other__", "mcp/web tools/call __other__"},
	} {
		if got := f.Config.Policies[i].Match.Operations; !slices.Equal(got, want) {
			t.Errorf("policies[%d].Match.Operations = %q; want %q", i, got, want)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{"mcp_servers:\n  Files: {url: 'http://a/mcp'}\n", `mcp_servers.Files: "Files" is not an MCP server name`},
		{"mcp_servers:\n  default: {url: 'http://a/mcp'}\n", `mcp_servers.default: "default" is not an MCP server name`},
		{"mcp_servers:\n  a: {}\n", "mcp_servers.a.url: missing"},
		{"mcp_servers:\n  a: {url: 'ftp://a/mcp'}\n", `mcp_servers.a.url: "ftp://a/mcp" is not an http:// or https:// URL`},
		{"mcp_servers:\n  a: {url: 'http://u:p@a/mcp'}\n", "mcp_servers.a.url: must not hold credentials"},
		{"mcp_servers:\n  a: {url: 'http://a/mcp', key_env: 'my key'}\n", "mcp_servers.a.key_env: \"my key\" is not an environment variable name"},
		{"mcp_servers:\n  a: {url: 'http://a/mcp', tools: [{name: s}, {name: s}]}\n", "mcp_servers.a.tools[1].name: \"s\" already declared"},
		{"mcp_servers:\n  a: {url: 'http://a/mcp', token: x}\n", `unknown key "token"`},
		{"mcp_servers:\n" + func() string {
			var b strings.Builder
			for i := range config.MaxMCPServers + 1 {
				b.WriteString("  s" + strings.Repeat("x", i) + ": {url: 'http://a/mcp'}\n")
			}
			return b.String()
		}(), "at most 16 (config.MaxMCPServers)"},
		{"mcp_servers:\n  a: {url: 'http://a/mcp'}\npolicies:\n  - {name: p, match: {servers: [b]}, algorithm: token_bucket, limit: 1, per: 1m}\n",
			`policies[0].match.servers[0]: "b" is not declared in the mcp_servers section`},
		{"mcp_servers:\n  a: {url: 'http://a/mcp', tools: [{name: s}]}\npolicies:\n  - {name: p, match: {servers: [default], tools: [s]}, algorithm: token_bucket, limit: 1, per: 1m}\n",
			`policies[0].match.tools[0]: "s" is not declared in the tools section`},
		{"tools: [{name: u}]\nmcp_servers:\n  a: {url: 'http://a/mcp', tools: [{name: s}]}\npolicies:\n  - {name: p, match: {servers: [a], tools: [u]}, algorithm: token_bucket, limit: 1, per: 1m}\n",
			`policies[0].match.tools[0]: "u" is not declared in the tools of the servers matched`},
		{"mcp_servers:\n  a: {url: 'http://a/mcp', tools: [{name: s}]}\npolicies:\n  - {name: p, match: {servers: [a], tools: ['@writes']}, algorithm: token_bucket, limit: 1, per: 1m}\n",
			`policies[0].match.tools[0]: the tools of the servers matched (the tools section, mcp_servers' tools) declares no tool with write: true`},
		{"mcp_servers:\n  a: {url: 'http://a/mcp'}\npolicies:\n  - {name: p, match: {servers: [a], models: [gpt-4o]}, algorithm: token_bucket, limit: 1, per: 1m}\n",
			"match.models cannot be combined with match.servers"},
	} {
		src := "version: 1\n" + tc.src
		if !strings.Contains(src, "policies:") {
			src += "policies:\n  - {name: p, algorithm: token_bucket, limit: 1, per: 1m}\n"
		}
		_, err := config.Parse("bad.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tc.src, err, tc.want)
		}
	}
}
