package mcpadmit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/mcpadmit"
)

// An MCP server whose tool calls are limited to two an hour.
func Example() {
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "tool-calls", Match: limits.Match{Operations: []string{limits.MCPOperation("", "tools/call", limits.OtherTool)}},
		Algorithm: limits.TokenBucket, Limit: 2, Per: time.Hour,
	}}}, admission.WithClock(admissiontest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))))
	defer ctl.Close()
	mw, _ := mcpadmit.New(ctl)

	server := mcp.NewServer(&mcp.Implementation{Name: "clock", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "now", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "noon"}}}, nil
		})
	server.AddReceivingMiddleware(mw.Wrap)

	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, _ := server.Connect(ctx, st, nil)
	defer ss.Close()
	cs, _ := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	defer cs.Close()
	for range 3 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "now"})
		var je *jsonrpc.Error
		if errors.As(err, &je) {
			fmt.Println(je.Code, je.Message)
			fmt.Println(string(je.Data))
			continue
		}
		fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	}
	// Output:
	// noon
	// noon
	// -32029 Limit of 2 requests per 1h0m0s reached (policy tool-calls, rate): retry after 30m0s.
	// {"policy":"tool-calls","reason":"rate","retryable":true,"retry_after_ms":1800000,"limit":2,"unit":"requests","remaining":0}
}
