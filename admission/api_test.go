package admission_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/apinames"
)

// maxExported bounds the consumer API: what a service author meets in
// package admission. The vocabulary of policies lives in admission/limits,
// the store contract in admission/backend. (95: Controller.TryAdmitAll
// and its Member, deciding several requests as one; 96:
// Controller.Remaining, what a caller has left, read without writing; 97:
// Ticket.SettleContext, a settlement whose observers see the request's
// trace; 98: ReasonLoop, the refusal of a loop policy, whose fingerprint
// type is limits.Fingerprint; 99: Controller.AllShadow, read by adapters
// that refuse without a policy; 100: Controller.Observer, where those
// adapters report the decisions they make without a policy.)
const maxExported = 100

// TestExportedNames counts the package's exported names (types, functions,
// methods, constants and variables; not struct fields or interface
// methods), requires a doc comment on each, and keeps the count within
// maxExported. Run with -v to see the count by kind.
func TestExportedNames(t *testing.T) {
	count := apinames.ExportedNames(t, ".")
	total := 0
	for _, n := range count {
		total += n
	}
	t.Logf("admission exports %d names: %d types, %d funcs, %d methods, %d consts, %d vars",
		total, count["type"], count["func"], count["method"], count["const"], count["var"])
	if total > maxExported {
		t.Errorf("admission exports %d names; want at most %d (the vocabulary belongs in admission/limits, the store contract in admission/backend)", total, maxExported)
	}
}
