package limits

// MCP requests (the Model Context Protocol's tool calls, resource reads
// and prompt gets) are admitted as operations named by MCPOperation, so
// that a policy matches and keys them like any other request: "mcp
// tools/call search" for a call of the declared tool search, "mcp
// tools/call __other__" for a tool the policy file does not declare, "mcp
// resources/read" for a method other than tools/call. Only declared tool
// names reach an operation, so a policy keyed by operation has a bounded
// set of tool partitions and a metric by tool a bounded set of labels.

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
// method: "mcp " + method, followed by " " + tool when tool is not empty.
// Callers pass for tool the bounded label of a tool call's name (the
// declared name, or OtherTool), and "" for other methods.
func MCPOperation(method, tool string) string {
	if tool == "" {
		return "mcp " + method
	}
	return "mcp " + method + " " + tool
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
