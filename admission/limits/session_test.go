package limits_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// TestSessionKey: a session is always counted under its tenant, and a
// policy keyed by session waits for the body (a session may be named
// there) and applies only to requests of a session.
func TestSessionKey(t *testing.T) {
	p := limits.Policy{Name: "s", Algorithm: limits.Quota, Limit: 200, Per: 24 * time.Hour, Unit: limits.UnitSteps}
	for _, tc := range []struct {
		key     []limits.KeyPart
		wantErr string
	}{
		{[]limits.KeyPart{limits.KeyTenant, limits.KeySession}, ""},
		{[]limits.KeyPart{limits.KeySession, limits.KeyTenant}, ""},
		{[]limits.KeyPart{limits.KeySession}, "policies[0].key: session must be combined with tenant"},
		{[]limits.KeyPart{limits.KeyUser, limits.KeySession}, "policies[0].key: session must be combined with tenant"},
	} {
		p.Key = tc.key
		err := p.Validate("policies[0]")
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Validate(key %v) = %v; want %q", tc.key, err, tc.wantErr)
		}
	}
	var k limits.KeyPart
	if err := k.UnmarshalText([]byte("session")); err != nil || k != limits.KeySession || k.String() != "session" {
		t.Errorf("UnmarshalText(session) = %v, %v; want limits.KeySession", k, err)
	}
	p = limits.Policy{Name: "calls", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession}, Algorithm: limits.Quota, Limit: 1, Per: time.Hour}
	if p.DecidedAtBegin() {
		t.Error("DecidedAtBegin() = true for a session-keyed policy of requests; want false")
	}
	for _, tc := range []struct {
		hasSession bool
		want       bool
	}{{true, true}, {false, false}} {
		if got := p.AppliesTo("op", "m", tc.hasSession); got != tc.want {
			t.Errorf("AppliesTo(hasSession %v) = %v; want %v", tc.hasSession, got, tc.want)
		}
	}
	p.Key = []limits.KeyPart{limits.KeyTenant}
	if !p.AppliesTo("op", "m", false) {
		t.Error("AppliesTo(no session) = false for a tenant policy; want true")
	}
}
