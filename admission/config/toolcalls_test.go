package config_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
)

// TestPriceToolCalls: prices.tool_calls prices the built-in tools' calls
// in US dollars per thousand; another tool, a negative or a malformed
// fee is refused with its path.
func TestPriceToolCalls(t *testing.T) {
	const policy = "policies:\n  - {name: spend, algorithm: quota, unit: cost, period: month, limit: 100M}\n"
	f := must(config.Parse("tools.yaml", []byte(policy+"prices:\n  tool_calls: {web_search: 25, file_search: 0}\n")))
	if got := f.Prices.ToolCalls; len(got) != 2 || got[config.ToolWebSearch] != 25 || got[config.ToolFileSearch] != 0 {
		t.Errorf("tool_calls = %v; want web_search 25, file_search 0", got)
	}
	if f := must(config.Parse("none.yaml", []byte(policy))); f.Prices.ToolCalls != nil {
		t.Errorf("no tool_calls = %v; want none (the defaults apply)", f.Prices.ToolCalls)
	}
	for _, tt := range []struct{ section, want string }{
		{"{code_interpreter: 30}", "prices.tool_calls.code_interpreter"},
		{"{web_search: -1}", "prices.tool_calls.web_search"},
		{"{file_search: cheap}", "prices.tool_calls.file_search"},
		{"[web_search]", "prices.tool_calls"},
	} {
		_, err := config.Parse("bad.yaml", []byte(policy+"prices:\n  tool_calls: "+tt.section+"\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("tool_calls: %s: %v; want an error at %s", tt.section, err, tt.want)
		}
	}
}
