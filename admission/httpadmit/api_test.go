package httpadmit_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/apinames"
)

// maxExported bounds the package's API: a net/http middleware. What only
// the LLM gateway needs (OpenAI- and Anthropic-style headers, retry
// hints) and the body deadline live in internal/limitheaders and
// internal/bodywatch, which the gateway shares.
const maxExported = 60

// TestExportedNames counts the package's exported names (types,
// functions, methods, constants and variables; not struct fields or
// interface methods), requires a doc comment on each, and keeps the count
// within maxExported. Run with -v to see them.
func TestExportedNames(t *testing.T) {
	count := apinames.ExportedNames(t, ".")
	total := 0
	for _, n := range count {
		total += n
	}
	t.Logf("httpadmit exports %d names: %d types, %d funcs, %d methods, %d consts, %d vars",
		total, count["type"], count["func"], count["method"], count["const"], count["var"])
	if total > maxExported {
		t.Errorf("httpadmit exports %d names; want at most %d (helpers the gateway shares belong in internal/limitheaders or internal/bodywatch)", total, maxExported)
	}
}
