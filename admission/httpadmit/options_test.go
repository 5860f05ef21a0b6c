package httpadmit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

// sessions stands for a service's own session store: the identity is
// looked up server side from an opaque session id, never read from a
// header the client fills in.
var sessions = map[string]httpadmit.Identity{
	"sess-alice": {Tenant: "acme", User: "alice"},
	"sess-bob":   {Tenant: "acme", User: "bob"},
}

var errNoSession = errors.New("no such session: sess-forged")

func sessionIdentity(r *http.Request) (httpadmit.Identity, error) {
	c, err := r.Cookie("session")
	if err != nil {
		return httpadmit.Identity{}, httpadmit.ErrNoCredentials
	}
	id, ok := sessions[c.Value]
	if !ok {
		return httpadmit.Identity{}, errNoSession
	}
	return id, nil
}

// TestWithIdentity: the function's identity partitions the requests (one
// per user per hour here); its error is a 401 without a partition and
// without its text; it replaces the API key lookup.
func TestWithIdentity(t *testing.T) {
	policy := admission.Policy{
		Name: "per-user", Key: []limits.KeyPart{limits.KeyTenant, limits.KeyUser},
		Algorithm: limits.FixedWindow, Limit: 1, Per: time.Hour,
	}
	srv, _, obs := setup(t, []admission.Policy{policy}, httpadmit.WithIdentity(sessionIdentity))
	for i, s := range []struct {
		cookie, key string
		want        int
	}{
		{"sess-alice", "", 200},
		{"sess-bob", "", 200},
		{"sess-alice", "", 429},
		{"sess-forged", "", 401},
		{"", "", 401},
		// A valid API key does not matter: the function decides.
		{"", keySteady, 401},
	} {
		var hdr []string
		if s.cookie != "" {
			hdr = []string{"Cookie", "session=" + s.cookie}
		}
		resp := call(t, srv, "GET", "/v1/items/1", s.key, hdr...)
		if resp.StatusCode != s.want {
			t.Fatalf("step %d (%q): status %d; want %d", i, s.cookie, resp.StatusCode, s.want)
		}
		if s.want != 401 {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		var p httpadmit.Problem
		if err := json.Unmarshal(body, &p); err != nil || p.Type != httpadmit.ProblemUnauthenticated || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("step %d: 401 body %s, headers %v; want the unauthenticated problem", i, body, resp.Header)
		}
		if strings.Contains(string(body), "no such session") {
			t.Errorf("step %d: the 401 shows the function's error: %s", i, body)
		}
	}
	// Three admitted or refused decisions; none for the three 401s.
	if n := obs.n.Load(); n != 3 {
		t.Errorf("%d decisions; want 3 (a refused identity gets no partition)", n)
	}
}

func TestUnauthenticated(t *testing.T) {
	other := errors.New("bad signature")
	for _, tt := range []struct {
		err  error
		want error
	}{{nil, nil}, {httpadmit.ErrUnknownKey, httpadmit.ErrUnknownKey}, {httpadmit.ErrNoCredentials, httpadmit.ErrNoCredentials}} {
		if got := httpadmit.Unauthenticated(tt.err); got != tt.want {
			t.Errorf("Unauthenticated(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
	if got := httpadmit.Unauthenticated(other); !errors.Is(got, httpadmit.ErrUnauthenticated) || !errors.Is(got, other) {
		t.Errorf("Unauthenticated(%v) = %v; want it to match ErrUnauthenticated and the error", other, got)
	}
}

// TestWithRejectionHandler: the handler writes its own status, headers
// and body from the typed rejection, and may fall back to the default
// answer; the default is problem+json when none is set.
func TestWithRejectionHandler(t *testing.T) {
	var mw *httpadmit.Middleware
	hook := func(w http.ResponseWriter, r *http.Request, rej *admission.Rejection) {
		if rej.Reason != admission.ReasonRate {
			mw.WriteRejection(w, rej)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", fmt.Sprint(limitheaders.Seconds(rej.RetryAfter)))
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"slow_down":%q,"remaining":%d}`, rej.Policy, rej.Status.Remaining)
	}
	clk := admissiontest.NewClock(t0)
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "rps", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket, Limit: 1, Per: time.Second,
			Match: limits.Match{Operations: []string{"GET /rate"}}},
		{Name: "daily", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Quota, Limit: 1, Period: limits.PeriodDay,
			Match: limits.Match{Operations: []string{"GET /quota"}}},
	}}, admission.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	mw, err = httpadmit.New(ctl, httpadmit.WithRejectionHandler(hook), httpadmit.WithQuotaStatus(429), httpadmit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rate", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /quota", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(mw.Handler(mux))
	defer srv.Close()
	for _, path := range []string{"/rate", "/quota"} {
		if resp := call(t, srv, "GET", path, ""); resp.StatusCode != 200 {
			t.Fatalf("first %s: status %d", path, resp.StatusCode)
		}
	}
	rate := call(t, srv, "GET", "/rate", "")
	body, _ := io.ReadAll(rate.Body)
	if rate.StatusCode != 503 || string(body) != `{"slow_down":"rps","remaining":0}` || rate.Header.Get("Retry-After") != "1" ||
		rate.Header.Get("Content-Type") != "application/json" || rate.Header.Get("RateLimit") != "" {
		t.Errorf("rate rejection through the handler: %d %v %s", rate.StatusCode, rate.Header, body)
	}
	// The fallback keeps the middleware's settings: 429 for a quota.
	quota := call(t, srv, "GET", "/quota", "")
	var p httpadmit.Problem
	if err := json.NewDecoder(quota.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if quota.StatusCode != 429 || p.Type != "urn:sluice:problem:quota-exceeded" || quota.Header.Get("RateLimit") == "" {
		t.Errorf("quota rejection through the fallback: %d %+v %v", quota.StatusCode, p, quota.Header)
	}
}

// TestInvalidCost: an estimate matching admission.ErrInvalidCost (a
// negative amount from the WithRequest function, or the controller's own
// refusal) answers 400 with its own problem type.
func TestInvalidCost(t *testing.T) {
	srv := bodyServer(t)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/x", nil)
	req.Header.Set("Authorization", "Bearer "+keySteady)
	req.Header.Set("Cost", "-5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p httpadmit.Problem
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || p.Type != httpadmit.ProblemInvalidCost || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("negative estimate: %d %+v; want 400 %s", resp.StatusCode, p, httpadmit.ProblemInvalidCost)
	}

	// The controller's own error, as a caller of Decide and WriteError
	// that fills the request itself gets it.
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{perTenant(10)}})
	mw, _ := httpadmit.New(ctl)
	r := httptest.NewRequest("GET", "/v1/x", nil)
	_, err = mw.Admit(httptest.NewRecorder(), r, admission.Request{Tenant: "t", Tokens: limits.MaxAmount + 1})
	if !errors.Is(err, admission.ErrInvalidCost) {
		t.Fatalf("Admit(tokens > MaxAmount) = %v; want ErrInvalidCost", err)
	}
	rec := httptest.NewRecorder()
	mw.Snapshot().WriteError(rec, r, err)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), httpadmit.ProblemInvalidCost) {
		t.Errorf("WriteError(ErrInvalidCost) = %d %s; want 400 %s", rec.Code, rec.Body, httpadmit.ProblemInvalidCost)
	}
}
