package grpcadmit_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/apinames"
)

// maxExported bounds the package's API: one interceptor value with its
// options and Apply (one reload step), the context accessors and the
// client side. 23 since WithSessions: the session keys are the one
// identity rule httpadmit reads that apikey.Rules does not hold.
const maxExported = 23

// TestExportedNames counts the package's exported names, requires a doc
// comment on each, and keeps the count within maxExported. Run with -v to
// see them.
func TestExportedNames(t *testing.T) {
	total := 0
	for _, n := range apinames.ExportedNames(t, ".") {
		total += n
	}
	t.Logf("grpcadmit exports %d names", total)
	if total > maxExported {
		t.Errorf("grpcadmit exports %d names; want at most %d", total, maxExported)
	}
}
