package limits

// MCP requests (the Model Context Protocol's tool calls, resource reads
// and prompt gets) are admitted as operations named by MCPOperation, so
// that a policy matches and keys them like any other request: "mcp
// tools/call search" for a call of the declared tool search, "mcp
// tools/call __other__" for a tool the policy file does not declare, "mcp
// resources/read" for a method other than tools/call; a request to a
// named MCP server (a policy file's mcp_servers section) has the server
// in the first word: "mcp/files tools/call write_file". Only declared
// server and tool names reach an operation, so a policy keyed by
// operation has a bounded set of tool partitions and a metric by tool a
// bounded set of labels.

// MaxToolName bounds a tool name, in bytes (the length MCP recommends).
const MaxToolName = 128

// OtherTool is the tool label of a call of a tool the policy file does
// not declare.
const OtherTool = "__other__"

// MCPToolsCall is the MCP method of a tool call.
const MCPToolsCall = "tools/call"

// MCPMethods are the MCP client requests an MCP admission counts
// (initialize among them: each opens a session on the server); a
// client's other messages (ping, notifications, responses) are never
// limited, like a health check.
var MCPMethods = []string{
	MCPToolsCall, "initialize", "tools/list", "resources/read", "resources/list", "resources/templates/list",
	"resources/subscribe", "resources/unsubscribe", "prompts/get", "prompts/list",
	"completion/complete", "logging/setLevel",
}

// MCPOperation returns the admission operation of an MCP request of
// method to server: "mcp", or "mcp/" + server for a named server,
// then " " + method, then " " + tool when tool is not empty. Callers
// pass a declared server name ("" for the unnamed one), and for tool the
// bounded label of a tool call's name (the declared name, or
// OtherTool), "" for other methods.
func MCPOperation(server, method, tool string) string {
	op := "mcp"
	if server != "" {
		op += "/" + server
	}
	op += " " + method
	if tool != "" {
		op += " " + tool
	}
	return op
}

// MaxServerName bounds the name of an MCP server, in bytes.
const MaxServerName = 32

// DefaultServer is the name a policy's match gives the unnamed MCP
// server (llmproxy's /mcp, whose tools are the tools section's); no
// named server may take it.
const DefaultServer = "default"

// ValidServerName reports whether name can name an MCP server: 1 to
// MaxServerName bytes of lower-case letters, digits, '_' and '-',
// starting with a letter or a digit, and not DefaultServer. It is a
// path segment of llmproxy's route (/mcp/{server}) and a word of an
// operation.
func ValidServerName(name string) bool {
	if name == "" || len(name) > MaxServerName || name == DefaultServer || name[0] == '_' || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidToolName reports whether name can be a tool name: 1 to
// MaxToolName bytes of letters, digits, '_', '-', '.' and '/'.
func ValidToolName(name string) bool {
	if name == "" || len(name) > MaxToolName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.', c == '/':
		default:
			return false
		}
	}
	return true
}
