package budget_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/budget"
)

// FuzzVerify feeds hostile signature headers and bodies to Verify: it
// never panics, and accepts only what Sign produced for that body.
func FuzzVerify(f *testing.F) {
	now := time.Unix(1_767_225_600, 0)
	good := budget.Sign(secret, now, []byte(`{"tenant":"acme"}`))
	for _, h := range []string{good, "", "t=,v1=", "v1=" + good[len("t=1767225600,v1="):], "t=1767225600,v1=00,v1=zz", "t=-1,v1=ab", ",,,=,="} {
		f.Add(h, []byte(`{"tenant":"acme"}`))
	}
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := budget.Verify(secret, header, body, now, 5*time.Minute)
		if err == nil && budget.Sign(secret, now, body) != header && !signedWithin(header, body) {
			t.Errorf("Verify accepted %q for body %q", header, body)
		}
	})
}

// signedWithin reports whether header holds the t and v1 parts of a
// signature of body at a t within the tolerance of the fuzz's now.
func signedWithin(header string, body []byte) bool {
	for d := int64(-300); d <= 300; d++ {
		t, v1, _ := strings.Cut(budget.Sign(secret, time.Unix(1_767_225_600+d, 0), body), ",")
		if strings.Contains(header, t) && strings.Contains(header, v1) {
			return true
		}
	}
	return false
}
