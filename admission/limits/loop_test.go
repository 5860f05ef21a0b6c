package limits_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// TestLoopPolicy: a policy keyed by fingerprint is a loop policy, counted
// under a tenant and a session, of steps, over time, without a queue,
// evicting when its table is full; it waits for the body.
func TestLoopPolicy(t *testing.T) {
	loop := []limits.KeyPart{limits.KeyTenant, limits.KeySession, limits.KeyFingerprint}
	for _, tc := range []struct {
		name    string
		edit    func(p *limits.Policy)
		wantErr string
	}{
		{"valid", func(p *limits.Policy) {}, ""},
		{"steps", func(p *limits.Policy) { p.Unit = limits.UnitSteps }, ""},
		{"quota", func(p *limits.Policy) { p.Algorithm = limits.Quota }, ""},
		{"no session", func(p *limits.Policy) { p.Key = []limits.KeyPart{limits.KeyTenant, limits.KeyFingerprint} },
			"p.key: fingerprint must be combined with tenant and session"},
		{"no tenant", func(p *limits.Policy) { p.Key = []limits.KeyPart{limits.KeyFingerprint} },
			"p.key: fingerprint must be combined with tenant and session"},
		{"tokens", func(p *limits.Policy) { p.Unit = limits.UnitTokens }, "p.unit: a loop policy counts steps"},
		{"concurrency", func(p *limits.Policy) { p.Algorithm = limits.Concurrency }, "p.algorithm: a loop policy counts repeated steps over time"},
		{"queue", func(p *limits.Policy) { p.Queue.Size = 10 }, "p.queue.size: a loop policy cannot queue"},
		{"shared overflow", func(p *limits.Policy) { p.Overflow = limits.OverflowShared }, "p.overflow: a loop policy needs overflow: evict"},
	} {
		p := limits.Policy{Name: "loops", Key: loop, Algorithm: limits.SlidingLog, Limit: 5, Per: 2 * time.Minute, Overflow: limits.OverflowEvict}
		tc.edit(&p)
		err := p.Validate("p")
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: Validate = %v; want %q", tc.name, err, tc.wantErr)
		}
	}
	p := limits.Policy{Name: "loops", Key: loop, Algorithm: limits.SlidingLog, Limit: 5, Per: time.Minute, Overflow: limits.OverflowEvict}
	if !p.DetectsLoops() || p.DecidedAtBegin() {
		t.Errorf("DetectsLoops, DecidedAtBegin = %v, %v; want true, false", p.DetectsLoops(), p.DecidedAtBegin())
	}
	var k limits.KeyPart
	if err := k.UnmarshalText([]byte("fingerprint")); err != nil || k != limits.KeyFingerprint || k.String() != "fingerprint" {
		t.Errorf("UnmarshalText(fingerprint) = %v, %v; want limits.KeyFingerprint", k, err)
	}
	if (limits.Fingerprint{}).IsZero() != true || (limits.Fingerprint{1}).IsZero() {
		t.Error("Fingerprint.IsZero: want true for the zero value only")
	}
}
