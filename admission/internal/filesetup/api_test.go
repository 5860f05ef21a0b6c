package filesetup_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/apinames"
)

// TestExportedNames requires a doc comment on each exported name of the
// packages built on this one, and keeps them few: FromFile, its Setup
// and options, and the pieces it is made of.
func TestExportedNames(t *testing.T) {
	for _, dir := range []string{"../../httpadmit/httpadmitfile", "../../grpcadmit/grpcadmitfile"} {
		total := 0
		for _, n := range apinames.ExportedNames(t, dir) {
			total += n
		}
		if total > 20 {
			t.Errorf("%s exports %d names; want at most 20", dir, total)
		}
	}
}
