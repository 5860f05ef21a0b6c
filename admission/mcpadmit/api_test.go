package mcpadmit_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/apinames"
)

// maxExported bounds the package's API: one middleware, its options and
// the shape of its refusals.
const maxExported = 20

// TestExportedNames requires a doc comment on each exported name and
// keeps their count within maxExported.
func TestExportedNames(t *testing.T) {
	count := apinames.ExportedNames(t, ".")
	total := 0
	for _, n := range count {
		total += n
	}
	if total > maxExported {
		t.Errorf("mcpadmit exports %d names; want at most %d", total, maxExported)
	}
}
