package upstream_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestStdlibOnly keeps the package on the core's floor: the standard
// library and the core's lower packages, never the controller.
func TestStdlibOnly(t *testing.T) {
	const mod = "github.com/sluicehq/sluice/admission"
	allowed := []string{mod + "/upstream", mod + "/limits", mod + "/backend", mod + "/memstore"}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", mod+"/upstream").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if !slices.Contains(allowed, p) {
			t.Errorf("upstream depends on %s; it may import only the standard library and %v", p, allowed[1:])
		}
	}
}
