package admission_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestStdlibOnly keeps the core free of outside dependencies: adapters,
// exporters and stores depend on admission, never the reverse. The core
// is five packages: the vocabulary of limits, the store contract, the
// in-memory store, the controller and the provider-budget store beside
// it; together they import only the standard library, and the lower ones
// never the upper ones.
func TestStdlibOnly(t *testing.T) {
	const mod = "github.com/sluicehq/sluice/admission"
	allowed := map[string][]string{
		mod + "/limits":   {},
		mod + "/backend":  {mod + "/limits"},
		mod + "/memstore": {mod + "/limits", mod + "/backend"},
		mod:               {mod + "/limits", mod + "/backend", mod + "/memstore"},
		mod + "/upstream": {mod + "/limits", mod + "/backend", mod + "/memstore"},
	}
	for pkg, want := range allowed {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, p := range strings.Fields(string(out)) {
			if p != pkg && !slices.Contains(want, p) {
				t.Errorf("%s depends on %s; it may import only the standard library and %v", pkg, p, want)
			}
		}
	}
}
