package limitheaders_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

// TestSetLimitHeadersIn: the values held in a caller's Values are the
// ones SetLimitHeaders allocates, with and without a tightest policy, and
// a value appended to a field later does not overwrite its neighbour.
func TestSetLimitHeadersIn(t *testing.T) {
	rate := admission.Status{Policy: "rpm", Algorithm: limits.TokenBucket, Limit: 600, Remaining: 599, Reset: 100 * time.Millisecond, Window: time.Minute}
	unlimited := admission.Status{Policy: "none", Algorithm: limits.TokenBucket, Window: time.Minute}
	for _, sts := range [][]admission.Status{{rate}, {unlimited}} {
		want, got := http.Header{}, http.Header{}
		limitheaders.SetLimitHeaders(want, sts)
		var vals limitheaders.Values
		limitheaders.SetLimitHeadersIn(got, sts, &vals)
		if !reflect.DeepEqual(got, want) || len(got) == 0 {
			t.Errorf("SetLimitHeadersIn(%s) = %v; want %v", sts[0].Policy, got, want)
		}
		policy := vals[0]
		got.Add(limitheaders.HeaderRateLimitPolicy, "extra")
		if vals[1] != got.Get(limitheaders.HeaderRateLimit) || vals[0] != policy {
			t.Errorf("SetLimitHeadersIn(%s): adding a RateLimit-Policy value changed the held values to %q", sts[0].Policy, vals)
		}
	}
}

// TestEnforcedDropsFailedOpen: a policy that admitted without its failed
// store has no figures, and stays out of the headers like a shadow one.
func TestEnforcedDropsFailedOpen(t *testing.T) {
	sts := []admission.Status{
		{Policy: "open", Mode: limits.Enforce, Limit: 10, FailedOpen: true},
		{Policy: "shadow", Mode: limits.Shadow, Limit: 10, Remaining: 3},
		{Policy: "rpm", Mode: limits.Enforce, Limit: 10, Remaining: 4, Reset: time.Second},
	}
	got := limitheaders.Enforced(sts)
	if len(got) != 1 || got[0].Policy != "rpm" {
		t.Fatalf("Enforced = %+v; want rpm alone", got)
	}
}
