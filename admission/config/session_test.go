package config_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

const sessionBudget = "version: 1\npolicies:\n" +
	"  - {name: session-steps, key: [tenant, session], unit: steps, algorithm: quota, period: fixed, per: 7d, limit: 200, budget: true}\n"

func TestSessionSection(t *testing.T) {
	f, err := config.Parse("default.yaml", []byte(sessionBudget))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Identity.Session
	if !slices.Equal(s.Headers, []string{"X-Session-Id", "Mcp-Session-Id"}) || !slices.Equal(s.Body, []string{"metadata.session_id", "metadata.user_id"}) || s.MaxLength != 128 {
		t.Errorf("default identity.session = %+v; want headers X-Session-Id, Mcp-Session-Id, body metadata.session_id, metadata.user_id, max_length 128", s)
	}
	p := f.Config.Policies[0]
	if !slices.Equal(p.Key, []limits.KeyPart{limits.KeyTenant, limits.KeySession}) || p.Unit != limits.UnitSteps || !f.Policies[0].Budget {
		t.Errorf("policy = key %v, unit %s, budget %v; want [tenant session], steps, true", p.Key, p.Unit, f.Policies[0].Budget)
	}
	f, err = config.Parse("set.yaml", []byte(sessionBudget+"identity:\n  session: {headers: x-agent-run, body: [user], max_length: 64}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := f.Identity.Session; !slices.Equal(s.Headers, []string{"X-Agent-Run"}) || !slices.Equal(s.Body, []string{"user"}) || s.MaxLength != 64 {
		t.Errorf("identity.session = %+v; want X-Agent-Run, user, 64", s)
	}
	for src, want := range map[string]string{
		"identity:\n  session: {max_length: 0}\n":                                "bad.yaml:5:25: identity.session.max_length: must be between 1 and",
		"identity:\n  session: {max_length: 4096}\n":                             "bad.yaml:5:13: identity.session.max_length: must be at most 1024, got 4096",
		"identity:\n  session: {headers: [X-Session-Id, 'a b']}\n":               "bad.yaml:5:37: identity.session.headers[1]: \"a b\" is not a header name",
		"identity:\n  session: {headers: [Authorization]}\n":                     "identity.session.headers[0]: Authorization carries credentials",
		"identity:\n  api_key_headers: [X-Key]\n  session: {headers: [x-key]}\n": "identity.session.headers[0]: X-Key carries credentials",
		"identity:\n  session: {body: [metadata.session]}\n":                     "identity.session.body[0]: unknown field \"metadata.session\"",
		"identity:\n  session: {header: X-Session-Id}\n":                         "identity.session.header: unknown key",
	} {
		_, err := config.Parse("bad.yaml", []byte(sessionBudget+src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", src, err, want)
		}
	}
	for src, want := range map[string]string{
		"  - {name: s, key: [session], unit: steps, algorithm: quota, per: 1d, limit: 5}\n":                                   "bad.yaml:4:15: policies[1].key: session must be combined with tenant",
		"  - {name: s, key: [tenant, session], algorithm: token_bucket, per: 1m, limit: 5, budget: true}\n":                   "bad.yaml:4:83: policies[1].budget: only a quota is a budget",
		"  - {name: s, key: [tenant, session], algorithm: quota, per: 1d, limit: 5, soft: true, warn: [50%], budget: true}\n": "policies[1].budget: a soft quota never refuses",
		"  - {name: s, key: [tenant, sessions], algorithm: quota, per: 1d, limit: 5}\n":                                       "policies[1].key[1]: unknown key part \"sessions\"",
		"  - {name: s, key: [tenant, session], algorithm: quota, per: 1d, limit: 5, overflow: evict, budget: true}\n":         "policies[1].budget: overflow: evict would drop a budget's partition",
	} {
		_, err := config.Parse("bad.yaml", []byte(sessionBudget+src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", src, err, want)
		}
	}
}

// logging.sessions says how logs write a session: raw by default, hash on
// request; anything else is refused with its line.
func TestLoggingSessions(t *testing.T) {
	const policy = "policies:\n  - {name: rpm, algorithm: token_bucket, limit: 10, per: 1m}\n"
	for _, tt := range []struct {
		section string
		hash    bool
	}{{"", false}, {"logging: {sessions: raw}\n", false}, {"logging: {sessions: hash}\n", true}} {
		f := must(config.Parse("s.yaml", []byte(policy+tt.section)))
		if f.Logging.HashSessions != tt.hash {
			t.Errorf("%q: HashSessions = %v; want %v", tt.section, f.Logging.HashSessions, tt.hash)
		}
	}
	_, err := config.Parse("s.yaml", []byte(policy+"logging:\n  sessions: sha1\n"))
	if err == nil || !strings.Contains(err.Error(), "s.yaml:4") || !strings.Contains(err.Error(), "logging.sessions") {
		t.Errorf("sessions: sha1: %v; want an error at s.yaml:4, logging.sessions", err)
	}
}
