package tenantname_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/tenantname"
)

// TestSafe: an ordinary name is itself, without allocating; a hostile one
// is short, printable, valid UTF-8, keeps a prefix of the name, and
// differs from the hostile names it could be confused with.
func TestSafe(t *testing.T) {
	long := strings.Repeat("é", 1000)
	for _, tc := range []struct {
		name, in string
		same     bool
		prefix   string
	}{
		{"ordinary", "acme-corp", true, ""},
		{"at the bound", strings.Repeat("t", tenantname.Max), true, ""},
		{"over the bound", strings.Repeat("t", tenantname.Max+1), false, "ttt"},
		{"long multibyte", long, false, "éé"},
		{"invalid UTF-8", "acme\xc3", false, "acme?~"},
		{"control character", "a\x1b[31mb", false, "a?[31mb~"},
		{"C1 control", "a\u0085b", false, "a?b~"},
		{"reserved", "__other__", false, "__other__~"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tenantname.Safe(tc.in, "__other__")
			if (got == tc.in) != tc.same {
				t.Fatalf("Safe(%.40q) = %.40q; want the name itself: %v", tc.in, got, tc.same)
			}
			if tc.same {
				if n := testing.AllocsPerRun(10, func() { _ = tenantname.Safe(tc.in, "__other__") }); n != 0 {
					t.Errorf("Safe allocates %v times; want 0", n)
				}
				return
			}
			if !utf8.ValidString(got) || len(got) > tenantname.Max || !strings.HasPrefix(got, tc.prefix) {
				t.Errorf("Safe(%.40q) = %q; want valid UTF-8 of at most %d bytes starting %q", tc.in, got, tenantname.Max, tc.prefix)
			}
			for _, r := range got {
				if unicode.IsControl(r) {
					t.Errorf("Safe(%.40q) = %q holds the control character %U", tc.in, got, r)
				}
			}
			if other := tenantname.Safe(tc.in+"x", "__other__"); other == got {
				t.Errorf("Safe(%.40q) = Safe of the name with one more byte", tc.in)
			}
		})
	}
}
