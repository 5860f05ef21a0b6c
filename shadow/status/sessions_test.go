package status_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/status"
)

// The page lists, for a policy keyed by session, the sessions with the
// most spent of their budget in the window, most first, at most Top,
// under every tenant's own name; a policy keyed by tenant lists none.
// Following sessions is bounded, and sessions idle for the window leave
// the list.
func TestStatusPageTopSessions(t *testing.T) {
	budget := admission.Policy{Name: "session-tokens", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession},
		Unit: limits.UnitTokens, Algorithm: limits.Quota, Limit: 10_000, Per: 24 * time.Hour}
	tenantTPM := admission.Policy{Name: "tenant-tpm", Key: []limits.KeyPart{limits.KeyTenant},
		Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Minute}
	r := newStatusRig(t, shadow.RecorderConfig{}, budget, tenantTPM)
	ctx := context.Background()
	spend := func(tenant, session string, tokens int64) {
		t.Helper()
		tk, err := r.ctl.Admit(ctx, admission.Request{Tenant: tenant, Session: session, Tokens: 2000})
		if err != nil {
			t.Fatalf("%s/%s: %v", tenant, session, err)
		}
		tk.Settle(admission.Usage{Tokens: tokens, TokensKnown: true})
	}
	spend("acme", "run-a", 500)
	spend("acme", "run-b", 3000)
	spend("acme", "run-a", 400) // run-a: 900 in all
	spend("globex", "run-a", 100)
	spend("acme", "", 5000) // no session: the tenant's only

	view := func() map[string][]status.Session {
		_, body := r.get(t, "/status.json")
		var st status.View
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		out := map[string][]status.Session{}
		for _, p := range st.Policies {
			out[p.Policy] = p.Sessions
		}
		return out
	}
	got := view()
	var order []string
	for _, s := range got["session-tokens"] {
		order = append(order, s.Tenant+"/"+s.Session+"="+strconv.FormatInt(s.Used, 10))
		if s.Limit != 10_000 {
			t.Errorf("%s/%s: limit %d; want 10000", s.Tenant, s.Session, s.Limit)
		}
	}
	if want := "acme/run-b=3000 acme/run-a=900 globex/run-a=100"; strings.Join(order, " ") != want {
		t.Errorf("top sessions %q; want %q", strings.Join(order, " "), want)
	}
	if len(got["tenant-tpm"]) != 0 {
		t.Errorf("a policy keyed by tenant lists sessions %v", got["tenant-tpm"])
	}
	_, html := r.get(t, "/status")
	if !strings.Contains(html, `<table class="sessions" data-policy="session-tokens">`) || !strings.Contains(html, `<tr data-session="run-b"><td>acme</td><td>run-b</td><td>3000 tokens</td>`) {
		t.Errorf("the page has no table of the top sessions:\n%s", html)
	}

	// A flood of sessions: the page follows at most 64 of the policy's
	// and shows the Top largest; those spending most are kept.
	for i := range 500 {
		spend("flood", "s-"+strconv.Itoa(i), int64(i))
	}
	top := view()["session-tokens"]
	if len(top) != status.DefaultTop || top[0].Session != "run-b" || top[1].Session != "run-a" || top[2].Session != "s-499" || top[4].Session != "s-497" {
		t.Errorf("after the flood: %+v; want run-b, run-a, s-499, s-498, s-497", top)
	}

	// Idle for the window: gone from the list.
	r.clk.Advance(shadow.DefaultWindow + time.Second)
	if top := view()["session-tokens"]; len(top) != 0 {
		t.Errorf("after an idle window: %+v; want none", top)
	}
}

// With HashSessions the page shows a session's pseudonym, never its id.
func TestStatusPageHashesSessions(t *testing.T) {
	page, err := status.NewPage(status.Config{Stats: func() []admission.PolicyStats {
		return []admission.PolicyStats{{Name: "session-steps", Unit: limits.UnitSteps, Limit: 10}}
	}, HashSessions: true})
	if err != nil {
		t.Fatal(err)
	}
	page.Settled(admission.Settlement{Policy: "session-steps", Tenant: "acme", Session: "secret-run", Limit: 10, Remaining: 7})
	v := page.View()
	if s := v.Policies[0].Sessions; len(s) != 1 || s[0].Session != apikey.HashSession("secret-run") || s[0].Used != 3 {
		t.Errorf("sessions %+v; want the pseudonym of secret-run, 3 used", s)
	}
}
