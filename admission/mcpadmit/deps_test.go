package mcpadmit_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSDKStaysHere: the MCP SDK is linked by this package and the
// programs that use it, never by the core or the HTTP middlewares.
func TestSDKStaysHere(t *testing.T) {
	const mod = "github.com/sluicehq/sluice"
	for _, pkg := range []string{mod + "/admission", mod + "/admission/httpadmit", mod + "/admission/echoadmit", mod + "/admission/config"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		if strings.Contains(string(out), "github.com/modelcontextprotocol/") {
			t.Errorf("%s links the MCP SDK:\n%s", pkg, out)
		}
	}
}
