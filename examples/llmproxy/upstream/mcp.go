package upstream

import (
	"context"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tools of the simulated MCP server: one that reads, one that
// writes (declared write: true in the demo policy file, whose writes
// have a lower limit).
const (
	MCPSearchTool = "search"
	MCPWriteTool  = "write_file"
)

// MCPSearchArgs are the arguments of the search tool.
type MCPSearchArgs struct {
	Query string `json:"query" jsonschema:"what to look for"`
}

// MCPWriteArgs are the arguments of the write_file tool.
type MCPWriteArgs struct {
	Path    string `json:"path" jsonschema:"the file to write"`
	Content string `json:"content" jsonschema:"what to write in it"`
}

// MCPResult is what both tools answer.
type MCPResult struct {
	Result string `json:"result"`
}

// NewMCP returns a simulated MCP server on MCP's streamable HTTP
// transport, built with the official Go SDK, serving the tools search
// (it finds one document named after the query) and write_file (it
// pretends to write, and says how many bytes). Nothing is stored: the
// demo gateway limits these calls, it needs no real tool behind them.
func NewMCP() http.Handler {
	server := mcp.NewServer(&mcp.Implementation{Name: "llmproxy-simulated-tools", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: MCPSearchTool, Description: "Search the documents (simulated)."},
		func(_ context.Context, _ *mcp.CallToolRequest, in MCPSearchArgs) (*mcp.CallToolResult, MCPResult, error) {
			return nil, MCPResult{Result: "1 document found: " + clip(in.Query) + ".txt"}, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: MCPWriteTool, Description: "Write a file (simulated: nothing is stored)."},
		func(_ context.Context, _ *mcp.CallToolRequest, in MCPWriteArgs) (*mcp.CallToolResult, MCPResult, error) {
			return nil, MCPResult{Result: "wrote " + strconv.Itoa(len(in.Content)) + " bytes to " + clip(in.Path)}, nil
		})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
}
