package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestSessionHeader: the session is read from the first session header
// present, counted under the tenant by a session-keyed policy, and a
// value that is not a bounded printable id is refused with 400 before
// any policy sees it; without a session policy the header is not read.
func TestSessionHeader(t *testing.T) {
	perSession := admission.Policy{Name: "session-calls", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession},
		Algorithm: limits.Quota, Limit: 1, Per: 24 * time.Hour}
	perTenant := admission.Policy{Name: "tenant-calls", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.Quota, Limit: 1000, Per: 24 * time.Hour}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	serve := func(h http.Handler, headers map[string][]string) (int, string) {
		r := httptest.NewRequest("POST", "/v1/x", nil)
		for k, v := range headers {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{perSession, perTenant}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{MaxSessionLength: 16}))
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(ok)
	for i, s := range []struct {
		headers map[string][]string
		want    int
	}{
		{map[string][]string{"X-Session-Id": {"s1"}}, 200},
		{map[string][]string{"X-Session-Id": {"s1"}}, 403},                           // its budget of one call is spent
		{map[string][]string{"X-Session-Id": {"s2"}}, 200},                           // another session
		{map[string][]string{"Mcp-Session-Id": {"s3"}}, 200},                         // the MCP header
		{map[string][]string{"X-Session-Id": {"s4"}, "Mcp-Session-Id": {"s1"}}, 200}, // the first header wins
		{nil, 200}, // no session: the session policy does not apply
		{nil, 200},
		{map[string][]string{"X-Session-Id": {"a b"}}, 400},
		{map[string][]string{"X-Session-Id": {"s\x1fx"}}, 400},
		{map[string][]string{"X-Session-Id": {"séance"}}, 400},
		{map[string][]string{"X-Session-Id": {""}}, 400},
		{map[string][]string{"X-Session-Id": {strings.Repeat("s", 17)}}, 400},
		{map[string][]string{"X-Session-Id": {strings.Repeat("s", 16)}}, 200},
		{map[string][]string{"X-Session-Id": {"s5", "s6"}}, 400},
	} {
		code, body := serve(h, s.headers)
		if code != s.want {
			t.Errorf("request %d (%q): status %d; want %d (%s)", i, s.headers, code, s.want, body)
		}
		if code == 400 && !strings.Contains(body, "invalid-session") {
			t.Errorf("request %d: body %s; want the problem type invalid-session", i, body)
		}
	}
	// Without a session policy an invalid header is not refused.
	plain, err := admission.New(admission.Config{Policies: []admission.Policy{perTenant}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err = httpadmit.New(plain)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := serve(mw.Handler(ok), map[string][]string{"X-Session-Id": {"a b"}}); code != 200 {
		t.Errorf("no session policy, session header %q: status %d; want 200 (%s)", "a b", code, body)
	}
	// A session policy installed on the controller itself, not through
	// the middleware, still finds a valid session: its budget binds.
	if err := plain.SetConfig(admission.Config{Policies: []admission.Policy{perSession, perTenant}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{200, 403} {
		if code, body := serve(mw.Handler(ok), map[string][]string{"X-Session-Id": {"later"}}); code != want {
			t.Errorf("session policy installed by SetConfig, call %d: status %d; want %d (%s)", i+1, code, want, body)
		}
	}
}
