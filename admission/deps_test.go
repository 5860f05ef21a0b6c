package admission_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStdlibOnly keeps the core free of outside dependencies: adapters,
// exporters and stores depend on admission, never the reverse.
func TestStdlibOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/sluicehq/sluice/admission" {
			t.Errorf("admission depends on %s; it may import only the standard library", p)
		}
	}
}
