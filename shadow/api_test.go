package shadow_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/apinames"
)

// maxExported bounds what package shadow itself exports: what runs next
// to a live controller. The request log lives in shadow/requestlog, the
// replay in shadow/replay, the status page in shadow/status.
const maxExported = 60

// TestExportedNames counts the exported names of package shadow and of
// its sub-packages (types, functions, methods, constants and variables;
// not struct fields or interface methods), requires a doc comment on
// each, and keeps shadow's own count within maxExported. Run with -v to
// see the counts by kind.
func TestExportedNames(t *testing.T) {
	for _, dir := range []string{".", "requestlog", "replay", "status"} {
		count := apinames.ExportedNames(t, dir)
		total := 0
		for _, n := range count {
			total += n
		}
		t.Logf("%s exports %d names: %d types, %d funcs, %d methods, %d consts, %d vars",
			dir, total, count["type"], count["func"], count["method"], count["const"], count["var"])
		if dir == "." && total > maxExported {
			t.Errorf("shadow exports %d names; want at most %d (the request log belongs in shadow/requestlog, the replay in shadow/replay, the status page in shadow/status)", total, maxExported)
		}
	}
}
