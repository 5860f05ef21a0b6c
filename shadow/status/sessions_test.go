package status_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/fingerprint"
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

// With HashSessions the page shows a session's pseudonym, never its id,
// among the top sessions and the loops.
func TestStatusPageHashesSessions(t *testing.T) {
	page, err := status.NewPage(status.Config{Stats: func() []admission.PolicyStats {
		return []admission.PolicyStats{{Name: "session-steps", Unit: limits.UnitSteps, Limit: 10}, {Name: "loops", Unit: limits.UnitRequests, Limit: 5}}
	}, HashSessions: true})
	if err != nil {
		t.Fatal(err)
	}
	page.Settled(admission.Settlement{Policy: "session-steps", Tenant: "acme", Session: "secret-run", Limit: 10, Remaining: 7})
	page.Decision(&admission.Decision{Status: admission.Status{Policy: "loops", Limit: 5, Window: time.Minute}, Outcome: admission.Rejected,
		Reason: admission.ReasonLoop, Tenant: "acme", Session: "secret-run", Operation: "POST /v1/chat/completions"})
	v := page.View()
	if s := v.Policies[0].Sessions; len(s) != 1 || s[0].Session != apikey.HashSession("secret-run") || s[0].Used != 3 {
		t.Errorf("sessions %+v; want the pseudonym of secret-run, 3 used", s)
	}
	if l := v.Policies[1].Loops; len(l) != 1 || l[0].Session != apikey.HashSession("secret-run") || l[0].Step != "POST /v1/chat/completions" {
		t.Errorf("loops %+v; want the pseudonym of secret-run and its step", l)
	}
}

// The page lists, for a loop policy, the sessions it refused in the
// window, the most refusals first, with the evidence of the last one:
// the operation of the step repeated and the policy's figures, never
// the step's arguments. A shadow loop policy's would-rejects are listed
// as what it would refuse. Following is bounded, a looping flood keeps
// the sessions refused most, and a session idle for the window leaves
// the list and starts counting again.
func TestStatusPageLoops(t *testing.T) {
	loop := func(name string, mode limits.Mode, limit int64) admission.Policy {
		return admission.Policy{Name: name, Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession, limits.KeyFingerprint},
			Algorithm: limits.SlidingLog, Limit: limit, Per: 2 * time.Minute, Mode: mode, Overflow: limits.OverflowEvict}
	}
	r := newStatusRig(t, shadow.RecorderConfig{}, loop("loops-shadow", limits.Shadow, 2), loop("loops", limits.Enforce, 3))
	step := func(tenant, session, tool, query string) {
		t.Helper()
		tk, err := r.ctl.Admit(context.Background(), admission.Request{Tenant: tenant, Session: session,
			Operation: "mcp tools/call " + tool, Fingerprint: fingerprint.ToolCall(tool, []byte(`{"query":"`+query+`"}`))})
		var rej *admission.Rejection
		switch {
		case err == nil:
			tk.Done()
		case !errors.As(err, &rej) || rej.Reason != admission.ReasonLoop:
			t.Fatalf("%s/%s: %v; want admitted or refused as a loop", tenant, session, err)
		}
	}
	for range 6 { // 3 served, 3 refused by loops; 4 would-rejects of loops-shadow
		step("acme", "run-a", "search", "secret-query")
	}
	step("acme", "run-b", "write_file", "x")
	for range 4 { // 3 served, 1 refused
		step("acme", "run-b", "write_file", "y")
	}
	for i := range 10 { // distinct steps: never a loop
		step("globex", "run-c", "search", strconv.Itoa(i))
	}
	loops := func(policy string) []status.Loop {
		for _, p := range r.status(t).Policies {
			if p.Policy == policy {
				return p.Loops
			}
		}
		return nil
	}
	var got []string
	for _, l := range loops("loops") {
		got = append(got, fmt.Sprintf("%s/%s=%d %s %d/%v", l.Tenant, l.Session, l.Refusals, l.Step, l.Limit, l.Window))
	}
	if want := "acme/run-a=3 mcp tools/call search 3/2m0s acme/run-b=1 mcp tools/call write_file 3/2m0s"; strings.Join(got, " ") != want {
		t.Errorf("loops of policy loops: %q; want %q", strings.Join(got, " "), want)
	}
	if l := loops("loops-shadow"); len(l) != 2 || l[0].Session != "run-a" || l[0].Refusals != 4 || l[1].Session != "run-b" || l[1].Refusals != 2 {
		t.Errorf("loops of the shadow policy: %+v; want run-a 4 would-rejects, run-b 2", l)
	}
	_, html := r.get(t, "/status")
	for _, want := range []string{
		`<h3>loops (refused)</h3>`, `<h3>loops-shadow (would refuse)</h3>`,
		`<tr data-session="run-a"><td>acme</td><td>run-a</td><td>3</td><td>mcp tools/call search</td><td>3 within 2m0s</td>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q:\n%s", want, html)
		}
	}
	if strings.Contains(html, "secret-query") {
		t.Error("the page shows a step's arguments")
	}

	// A flood of looping sessions, each refused once: the page follows
	// at most 64 of them and still lists the sessions refused most.
	for i := range 500 {
		for range 4 {
			step("flood", "s-"+strconv.Itoa(i), "search", "q")
		}
	}
	if l := loops("loops"); len(l) != status.DefaultTop || l[0].Session != "run-a" || l[1].Session != "run-b" {
		t.Errorf("after the flood: %+v; want run-a and run-b first, %d listed", l, status.DefaultTop)
	}

	// Idle for the window: gone; refused again, counted from one.
	r.clk.Advance(shadow.DefaultWindow + time.Second)
	if l := loops("loops"); len(l) != 0 {
		t.Errorf("after an idle window: %+v; want none", l)
	}
	for range 4 {
		step("acme", "run-a", "search", "secret-query")
	}
	if l := loops("loops"); len(l) != 1 || l[0].Refusals != 1 {
		t.Errorf("refused again after an idle window: %+v; want run-a with 1 refusal", l)
	}
}
