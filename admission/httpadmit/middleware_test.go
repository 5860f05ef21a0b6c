package httpadmit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
	"github.com/sluicehq/sluice/internal/poll"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	keyNoisy  = "sk-noisy-0001"
	keySteady = "sk-steady-0002"
)

var keys = httpadmit.KeyTable{
	apikey.Sum(keyNoisy):  {Tenant: "noisy", KeyID: "k1"},
	apikey.Sum(keySteady): {Tenant: "steady", KeyID: "k2"},
}

type decisions struct {
	admission.NopObserver
	n atomic.Int64
}

func (d *decisions) Decision(*admission.Decision) { d.n.Add(1) }

// setup serves ok behind the middleware on loopback with a fake clock.
func setup(t *testing.T, policies []admission.Policy, opts ...httpadmit.Option) (*httptest.Server, *admissiontest.Clock, *decisions) {
	t.Helper()
	clk := admissiontest.NewClock(t0)
	obs := &decisions{}
	ctl, err := admission.New(admission.Config{Policies: policies}, admission.WithClock(clk), admission.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]httpadmit.Option{
		httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{Keys: keys}),
		httpadmit.WithLogger(slog.New(slog.DiscardHandler)),
	}, opts...)
	mw, err := httpadmit.New(ctl, opts...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items/{id}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "healthy") })
	mux.HandleFunc("POST /v1/upload", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		io.WriteString(w, "stored")
	})
	srv := httptest.NewServer(mw.Handler(mux))
	t.Cleanup(srv.Close)
	return srv, clk, obs
}

func call(t *testing.T, srv *httptest.Server, method, path, key string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp
}

func intHeader(t *testing.T, resp *http.Response, name string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(resp.Header.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("%s = %q; want a number", name, resp.Header.Get(name))
	}
	return v
}

func perTenant(limit int64) admission.Policy {
	return admission.Policy{
		Name: "per-tenant", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.TokenBucket, Limit: limit, Per: time.Second,
	}
}

// burst sends n concurrent requests for key and counts the statuses.
func burst(t *testing.T, srv *httptest.Server, key string, n int) (ok, limited int, last429 *http.Response) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := call(t, srv, "GET", "/v1/items/1", key)
			mu.Lock()
			defer mu.Unlock()
			switch resp.StatusCode {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				limited++
				last429 = resp
			default:
				t.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	return ok, limited, last429
}

// TestNoisyAndSteadyTenants: with a per-tenant bucket of 10 per second,
// a noisy tenant bursting 50 requests gets exactly 10 and then 429s whose
// headers match the policy, while a steady tenant sending one request per
// 100 ms never sees a 429.
func TestNoisyAndSteadyTenants(t *testing.T) {
	srv, clk, _ := setup(t, []admission.Policy{perTenant(10)})
	ok, limited, rej := burst(t, srv, keyNoisy, 50)
	if ok != 10 || limited != 40 {
		t.Fatalf("noisy burst: %d admitted, %d limited; want 10, 40", ok, limited)
	}
	// One token comes back every 100 ms: Retry-After rounds up to 1 s; the
	// bucket is full again after 1 s.
	if got := intHeader(t, rej, "Retry-After"); got != 1 {
		t.Errorf("Retry-After = %d; want 1", got)
	}
	if got, want := rej.Header.Get("RateLimit-Policy"), `"per-tenant";q=10;w=1`; got != want {
		t.Errorf("RateLimit-Policy = %q; want %q", got, want)
	}
	if got, want := rej.Header.Get("RateLimit"), `"per-tenant";r=0;t=1`; got != want {
		t.Errorf("RateLimit = %q; want %q", got, want)
	}
	if l, r, s := intHeader(t, rej, "X-RateLimit-Limit"), intHeader(t, rej, "X-RateLimit-Remaining"), intHeader(t, rej, "X-RateLimit-Reset"); l != 10 || r != 0 || s != 1 {
		t.Errorf("X-RateLimit-Limit/Remaining/Reset = %d/%d/%d; want 10/0/1", l, r, s)
	}
	var p httpadmit.Problem
	if ct := rej.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if err := json.NewDecoder(rej.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.Type != "urn:sluice:problem:rate-limited" || p.Status != 429 || p.RetryAfter != 1 || p.Policy != "per-tenant" {
		t.Errorf("problem = %+v", p)
	}
	for i := range 30 {
		resp := call(t, srv, "GET", "/v1/items/1", keySteady)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("steady request %d at +%v: status %d; want 200", i, clk.Now().Sub(t0), resp.StatusCode)
		}
		// Admitted responses carry the headers too: the steady tenant
		// spends one token per 100 ms and gets one back, so it stays at 9.
		if got := intHeader(t, resp, "X-RateLimit-Remaining"); got != 9 {
			t.Errorf("steady request %d: X-RateLimit-Remaining = %d; want 9", i, got)
		}
		if got, want := resp.Header.Get("RateLimit"), `"per-tenant";r=9;t=1`; got != want {
			t.Errorf("steady request %d: RateLimit = %q; want %q", i, got, want)
		}
		clk.Advance(100 * time.Millisecond)
	}
}

// TestNoisyNeighbourGlobalPolicy is the same traffic under one global
// bucket: the noisy tenant's burst takes everything and the steady tenant
// is refused too. Per-tenant keys are what prevents it.
func TestNoisyNeighbourGlobalPolicy(t *testing.T) {
	global := perTenant(10)
	global.Name, global.Key = "global", nil
	srv, clk, _ := setup(t, []admission.Policy{global})
	if ok, _, _ := burst(t, srv, keyNoisy, 50); ok != 10 {
		t.Fatalf("noisy burst admitted %d; want 10", ok)
	}
	refused := 0
	for range 10 {
		if resp := call(t, srv, "GET", "/v1/items/1", keySteady); resp.StatusCode == http.StatusTooManyRequests {
			refused++
		}
		burst(t, srv, keyNoisy, 5)
		clk.Advance(100 * time.Millisecond)
	}
	if refused == 0 {
		t.Error("steady tenant was never refused under a global policy; want the noisy neighbour to starve it")
	}
}

func TestSpoofedForwardedForIgnoredFromUntrustedPeer(t *testing.T) {
	perIP := admission.Policy{Name: "per-ip", Key: []limits.KeyPart{limits.KeyIPPrefix},
		Algorithm: limits.FixedWindow, Limit: 1, Per: time.Hour}
	srv, _, _ := setup(t, []admission.Policy{perIP})
	if resp := call(t, srv, "GET", "/v1/items/1", "", "X-Forwarded-For", "203.0.113.1"); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	for _, xff := range []string{"203.0.113.2", "198.51.100.7, 203.0.113.3", "2001:db8::1"} {
		if resp := call(t, srv, "GET", "/v1/items/1", "", "X-Forwarded-For", xff); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("spoofed X-Forwarded-For %q from an untrusted peer: status %d; want 429 (same partition)", xff, resp.StatusCode)
		}
	}
	if resp := call(t, srv, "GET", "/v1/items/1", "", "Forwarded", "for=192.0.2.60"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("spoofed Forwarded: status %d; want 429", resp.StatusCode)
	}
}

func TestForwardedForFromTrustedProxy(t *testing.T) {
	perIP := admission.Policy{Name: "per-ip", Key: []limits.KeyPart{limits.KeyIPPrefix},
		Algorithm: limits.FixedWindow, Limit: 1, Per: time.Hour}
	srv, _, _ := setup(t, []admission.Policy{perIP}, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")},
	}))
	steps := []struct {
		xff  string
		want int
	}{
		{"203.0.113.1", 200},
		{"203.0.113.2", 200},
		{"203.0.113.1", 429},
		{"6.6.6.6, 203.0.113.1, 10.1.1.1", 429}, // leftmost is the client's claim: ignored
		{"2001:db8:1:2::1", 200},
		{"2001:db8:1:2::ffff", 429}, // same /64
		{"2001:db8:1:3::1", 200},
	}
	for _, s := range steps {
		if resp := call(t, srv, "GET", "/v1/items/1", "", "X-Forwarded-For", s.xff); resp.StatusCode != s.want {
			t.Errorf("X-Forwarded-For %q via a trusted proxy: status %d; want %d", s.xff, resp.StatusCode, s.want)
		}
	}
}

func TestClientAddr(t *testing.T) {
	ic := &httpadmit.IdentityConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}}
	fwd := &httpadmit.IdentityConfig{TrustedProxies: ic.TrustedProxies, ClientIPHeader: "Forwarded"}
	tests := []struct {
		ic     *httpadmit.IdentityConfig
		peer   string
		header string
		value  string
		want   string
	}{
		{ic, "192.0.2.1:1234", "X-Forwarded-For", "203.0.113.9", "192.0.2.1"},
		{ic, "10.0.0.1:1234", "X-Forwarded-For", "203.0.113.9", "203.0.113.9"},
		{ic, "10.0.0.1:1234", "X-Forwarded-For", "1.1.1.1, 203.0.113.9, 10.2.2.2", "203.0.113.9"},
		{ic, "10.0.0.1:1234", "X-Forwarded-For", "garbage, 10.2.2.2", "10.2.2.2"},
		{ic, "10.0.0.1:1234", "", "", "10.0.0.1"},
		{ic, "[fd00::1]:443", "X-Forwarded-For", "2001:db8:a:b:1:2:3:4", "2001:db8:a:b::"},
		{ic, "[2001:db8::7]:443", "", "", "2001:db8::"},
		{ic, "[::ffff:192.0.2.3]:80", "", "", "192.0.2.3"},
		{fwd, "10.0.0.1:1", "Forwarded", `for=198.51.100.1;proto=https, for="[2001:db8:cafe::17]:4711"`, "2001:db8:cafe::"},
		{fwd, "10.0.0.1:1", "Forwarded", `for=198.51.100.1, for=10.9.9.9`, "198.51.100.1"},
		{fwd, "10.0.0.1:1", "X-Forwarded-For", "203.0.113.9", "10.0.0.1"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.peer
		if tt.header != "" {
			r.Header.Set(tt.header, tt.value)
		}
		if got := tt.ic.ClientAddr(r); got.String() != tt.want {
			t.Errorf("ClientAddr(peer %s, %s: %q) = %s; want %s", tt.peer, tt.header, tt.value, got, tt.want)
		}
	}
}

func TestUnknownKeyIs401WithoutPartition(t *testing.T) {
	srv, _, obs := setup(t, []admission.Policy{perTenant(1)})
	for i := range 5 {
		resp := call(t, srv, "GET", "/v1/items/1", "sk-not-a-key")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("unknown key %d: status %d; want 401", i, resp.StatusCode)
		}
		if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") || resp.Header.Get("RateLimit") != "" {
			t.Errorf("unknown key: headers %v", resp.Header)
		}
	}
	if n := obs.n.Load(); n != 0 {
		t.Errorf("unknown keys caused %d decisions; want 0 (no partition)", n)
	}
	if resp := call(t, srv, "GET", "/v1/items/1", "", "X-Api-Key", keyNoisy); resp.StatusCode != 200 {
		t.Errorf("key in X-API-Key: status %d; want 200", resp.StatusCode)
	}
}

func TestRequireKey(t *testing.T) {
	srv, _, _ := setup(t, []admission.Policy{perTenant(5)}, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{Keys: keys, RequireKey: true}))
	if resp := call(t, srv, "GET", "/v1/items/1", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no key: status %d; want 401", resp.StatusCode)
	}
}

func TestExemptAndSkipper(t *testing.T) {
	global := perTenant(1)
	global.Key = nil
	global.Per = time.Hour
	srv, _, _ := setup(t, []admission.Policy{global},
		httpadmit.WithSkipper(func(r *http.Request) bool { return r.Header.Get("X-Internal") == "yes" }))
	if resp := call(t, srv, "GET", "/v1/items/1", keyNoisy); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	for i := range 20 {
		if resp := call(t, srv, "GET", "/healthz", keyNoisy); resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
			t.Fatalf("health check %d: status %d, RateLimit %q; want 200 and no limit headers", i, resp.StatusCode, resp.Header.Get("RateLimit"))
		}
		if resp := call(t, srv, "GET", "/v1/items/1", keyNoisy, "X-Internal", "yes"); resp.StatusCode != 200 {
			t.Fatalf("skipped request %d: status %d", i, resp.StatusCode)
		}
	}
	if resp := call(t, srv, "GET", "/v1/items/1", keyNoisy); resp.StatusCode != 429 {
		t.Errorf("limited request: status %d; want 429", resp.StatusCode)
	}
}

// TestOperationFromRoute matches policies on "METHOD route" from the
// pattern the mux routed to.
func TestOperationFromRoute(t *testing.T) {
	clk := admissiontest.NewClock(t0)
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "items", Match: limits.Match{Operations: []string{"GET /v1/items/{id}"}},
		Algorithm: limits.FixedWindow, Limit: 1, Per: time.Hour,
	}}}, admission.WithClock(clk))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items/{id}", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v1/other", func(w http.ResponseWriter, r *http.Request) {})
	mw, _ := httpadmit.New(ctl, httpadmit.WithRoutes(mux))
	srv := httptest.NewServer(mw.Handler(mux))
	defer srv.Close()
	for i, s := range []struct {
		path string
		want int
	}{{"/v1/items/1", 200}, {"/v1/items/2", 429}, {"/v1/other", 200}, {"/v1/other", 200}, {"/nowhere", 404}} {
		if resp := call(t, srv, "GET", s.path, ""); resp.StatusCode != s.want {
			t.Errorf("step %d GET %s: status %d; want %d", i, s.path, resp.StatusCode, s.want)
		}
	}
}

// TestSettledOnPanicAndClientGone holds a concurrency permit in a handler
// that panics, then in one whose client goes away: the permit comes back
// each time.
func TestSettledOnPanicAndClientGone(t *testing.T) {
	clk := admissiontest.NewClock(t0)
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "inflight", Algorithm: limits.Concurrency, Limit: 1,
	}}}, admission.WithClock(clk))
	mw, _ := httpadmit.New(ctl)
	started := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic(http.ErrAbortHandler)
		case "/slow":
			started <- struct{}{}
			<-r.Context().Done()
		}
	})))
	srv.Config.ErrorLog = nil
	srv.Start()
	defer srv.Close()
	if _, err := srv.Client().Get(srv.URL + "/panic"); err == nil {
		t.Fatal("panicking handler: want a transport error")
	}
	if resp := call(t, srv, "GET", "/ok", ""); resp.StatusCode != 200 {
		t.Fatalf("after a panic: status %d; want 200 (permit released)", resp.StatusCode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
		_, err := srv.Client().Do(req)
		done <- err
	}()
	<-started
	if resp := call(t, srv, "GET", "/ok", ""); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("while /slow runs: status %d; want 429", resp.StatusCode)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	poll.Until(t, time.Second, "a request admitted after the client left", func() bool {
		return call(t, srv, "GET", "/ok", "").StatusCode == http.StatusOK
	})
}

func TestBodyLimitBeforeAdmission(t *testing.T) {
	srv, _, obs := setup(t, []admission.Policy{perTenant(100)}, httpadmit.WithMaxBody(16))
	req, _ := http.NewRequest("POST", srv.URL+"/v1/upload", strings.NewReader(strings.Repeat("x", 64)))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("oversized body: status %d %q; want 413 problem", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if n := obs.n.Load(); n != 0 {
		t.Errorf("oversized body reached admission (%d decisions)", n)
	}
	// A chunked body has no length: the reader stops it at the limit.
	req, _ = http.NewRequest("POST", srv.URL+"/v1/upload", io.MultiReader(strings.NewReader(strings.Repeat("y", 64))))
	req.ContentLength = -1
	resp, err = srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized chunked body: status %d; want 413", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", srv.URL+"/v1/upload", strings.NewReader("small"))
	resp, err = srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("small body: status %d; want 200", resp.StatusCode)
	}
}

func TestQuotaStatus(t *testing.T) {
	quota := admission.Policy{Name: "daily", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: 1}
	for _, tc := range []struct {
		opt  []httpadmit.Option
		want int
	}{{nil, 403}, {[]httpadmit.Option{httpadmit.WithQuotaStatus(429)}, 429}} {
		srv, _, _ := setup(t, []admission.Policy{quota}, tc.opt...)
		call(t, srv, "GET", "/v1/items/1", keyNoisy)
		resp := call(t, srv, "GET", "/v1/items/1", keyNoisy)
		if resp.StatusCode != tc.want {
			t.Errorf("exhausted quota: status %d; want %d", resp.StatusCode, tc.want)
		}
		// The day ends at midnight UTC, 12 h after t0.
		if got := intHeader(t, resp, "Retry-After"); got != 12*3600 {
			t.Errorf("exhausted quota: Retry-After %d; want %d", got, 12*3600)
		}
		if got, want := resp.Header.Get("RateLimit-Policy"), `"daily";q=1;w=86400`; got != want {
			t.Errorf("RateLimit-Policy = %q; want %q", got, want)
		}
	}
}

func TestStatusCode(t *testing.T) {
	tests := []struct {
		reason admission.Reason
		quota  int
		want   int
	}{
		{admission.ReasonRate, 0, 429},
		{admission.ReasonConcurrency, 0, 429},
		{admission.ReasonQueueFull, 0, 429},
		{admission.ReasonQueueTimeout, 0, 429},
		{admission.ReasonQuota, 0, 403},
		{admission.ReasonQuota, 429, 429},
		{admission.ReasonStoreUnavailable, 0, 503},
		{admission.ReasonOverflow, 0, 503},
		{admission.ReasonLoop, 0, 403},
	}
	for _, tt := range tests {
		if got := limitheaders.StatusCode(&admission.Rejection{Reason: tt.reason}, tt.quota); got != tt.want {
			t.Errorf("StatusCode(%s, %d) = %d; want %d", tt.reason, tt.quota, got, tt.want)
		}
	}
}

func TestHeaderSyntax(t *testing.T) {
	sts := []admission.Status{
		{Policy: "tpm", Unit: limits.UnitTokens, Algorithm: limits.SlidingWindow, Limit: 100000, Window: time.Minute, Remaining: 4200, Reset: 16100 * time.Millisecond},
		{Policy: "inflight", Algorithm: limits.Concurrency, Limit: 8, Remaining: 7},
	}
	h := http.Header{}
	limitheaders.SetLimitHeaders(h, sts)
	want := map[string]string{
		"RateLimit-Policy":      `"tpm";q=100000;w=60;sluice-qu="tokens", "inflight";q=8;qu="concurrent-requests"`,
		"RateLimit":             `"tpm";r=4200;t=17, "inflight";r=7;t=0`,
		"X-RateLimit-Limit":     "100000",
		"X-RateLimit-Remaining": "4200",
		"X-RateLimit-Reset":     "17",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q; want %q", k, got, v)
		}
	}
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{{time.Millisecond, "1"}, {time.Second, "1"}, {1001 * time.Millisecond, "2"}, {0, "1"}} {
		h := http.Header{}
		limitheaders.SetRetryAfter(h, tt.d)
		if got := h.Get("Retry-After"); got != tt.want {
			t.Errorf("SetRetryAfter(%v) = %q; want %q", tt.d, got, tt.want)
		}
	}
	h = http.Header{}
	limitheaders.SetRetryAfter(h, limits.Never)
	if got := h.Get("Retry-After"); got != "" {
		t.Errorf("SetRetryAfter(Never) = %q; want none", got)
	}
}

func TestIdentityFromContext(t *testing.T) {
	clk := admissiontest.NewClock(t0)
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-user", Key: []limits.KeyPart{limits.KeyTenant, limits.KeyUser},
		Algorithm: limits.FixedWindow, Limit: 1, Per: time.Hour,
	}}}, admission.WithClock(clk))
	mw, _ := httpadmit.New(ctl, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{RequireKey: true}))
	// The application's own authentication: a validated session header.
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-Test-Session"); u != "" {
				r = r.WithContext(httpadmit.ContextWithIdentity(r.Context(), httpadmit.Identity{Tenant: "acme", User: u}))
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(auth(mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))))
	defer srv.Close()
	for i, s := range []struct {
		user string
		want int
	}{{"alice", 200}, {"bob", 200}, {"alice", 429}, {"", 401}} {
		if resp := call(t, srv, "GET", "/", "", "X-Test-Session", s.user); resp.StatusCode != s.want {
			t.Errorf("step %d user %q: status %d; want %d", i, s.user, resp.StatusCode, s.want)
		}
	}
}

// TestShadowPolicyNotAdvertised: a shadow policy's figures stay out of the
// limit headers unless the shadow annotation is asked for.
func TestShadowPolicyNotAdvertised(t *testing.T) {
	shadow := perTenant(1)
	shadow.Name, shadow.Mode = "candidate", limits.Shadow
	srv, _, _ := setup(t, []admission.Policy{perTenant(10), shadow})
	for i := range 3 {
		resp := call(t, srv, "GET", "/v1/items/1", keyNoisy)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		if got, want := resp.Header.Get("RateLimit-Policy"), `"per-tenant";q=10;w=1`; got != want {
			t.Errorf("request %d: RateLimit-Policy = %q; want %q", i, got, want)
		}
		if got := resp.Header.Get(limitheaders.HeaderWouldReject); got != "" {
			t.Errorf("request %d: %s = %q without the option", i, limitheaders.HeaderWouldReject, got)
		}
	}
}

func TestExemptPrefix(t *testing.T) {
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{perTenant(1)}})
	mw, _ := httpadmit.New(ctl, httpadmit.WithExempt("/debug/*", "/healthz"))
	for path, want := range map[string]bool{
		"/debug": true, "/debug/": true, "/debug/pprof/heap": true, "/debugger": false,
		"/healthz": true, "/healthz/x": false, "/metrics": false,
		"/debug/../v1/items/1": false, "/debug/%2e%2e/v1/items/1": false, "/debug/..%2Fv1": false,
		"/healthz/.": false, "/debug//x": false, "/debug/./x": false,
	} {
		if got := mw.Snapshot().Exempt(httptest.NewRequest("GET", path, nil)); got != want {
			t.Errorf("Exempt(%s) = %v; want %v", path, got, want)
		}
	}
}

// TestClientIPHeaderMustBeKnown: a forwarding header the middleware does
// not read (X-Real-IP, a CDN's own) is refused when the middleware is
// built or a configuration compiled, rather than X-Forwarded-For being
// read in its place: behind a proxy that sets only X-Real-IP, the
// X-Forwarded-For a client sends passes through untouched, and each
// request could name a fresh address to escape a per-address limit.
func TestClientIPHeaderMustBeKnown(t *testing.T) {
	perIP := admission.Policy{Name: "per-ip", Key: []limits.KeyPart{limits.KeyIP},
		Algorithm: limits.FixedWindow, Limit: 1, Per: time.Hour}
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, name := range []string{"X-Real-IP", "CF-Connecting-IP", "X-Forwarded-For, Forwarded", " Forwarded"} {
		ctl, err := admission.New(admission.Config{Policies: []admission.Policy{perIP}})
		if err != nil {
			t.Fatal(err)
		}
		ic := httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{TrustedProxies: loopback, ClientIPHeader: name})
		mw, err := httpadmit.New(ctl, ic, httpadmit.WithLogger(slog.New(slog.DiscardHandler)))
		if err == nil {
			// Show what the header would have let a client do.
			srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
			admitted := 0
			for i := range 3 {
				if call(t, srv, "GET", "/v1/items/1", "", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1)).StatusCode == http.StatusOK {
					admitted++
				}
			}
			srv.Close()
			t.Errorf("New with ClientIPHeader %q: no error; a client rotating X-Forwarded-For had %d of 3 requests admitted under a limit of 1 per address", name, admitted)
			continue
		}
		if !strings.Contains(err.Error(), "ClientIPHeader") {
			t.Errorf("New with ClientIPHeader %q: %v; want an error naming ClientIPHeader", name, err)
		}
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{perIP}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "X-Forwarded-For", "x-forwarded-for", "Forwarded", "forwarded"} {
		if _, err := mw.Compile(admission.Config{Policies: []admission.Policy{perIP}}, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{ClientIPHeader: name})); err != nil {
			t.Errorf("Compile with ClientIPHeader %q: %v; want it accepted", name, err)
		}
	}
	if _, err := mw.Compile(admission.Config{Policies: []admission.Policy{perIP}}, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{ClientIPHeader: "X-Real-IP"})); err == nil {
		t.Error("Compile with ClientIPHeader X-Real-IP: no error; want it refused")
	}
}

// TestTrustedProxyWrittenIPv4Mapped: a trusted proxy written in its
// IPv4-mapped form (::ffff:127.0.0.1, as a dual-stack socket lists it)
// is the IPv4 proxy it names. Were it never matched, every client behind
// it would share the proxy's partition of a per-address limit.
func TestTrustedProxyWrittenIPv4Mapped(t *testing.T) {
	perIP := admission.Policy{Name: "per-ip", Key: []limits.KeyPart{limits.KeyIP},
		Algorithm: limits.FixedWindow, Limit: 1, Per: time.Hour}
	for _, proxy := range []string{"::ffff:127.0.0.0/104", "::ffff:127.0.0.1/128"} {
		srv, _, _ := setup(t, []admission.Policy{perIP}, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix(proxy)},
		}))
		for _, s := range []struct {
			xff  string
			want int
		}{{"203.0.113.1", 200}, {"203.0.113.2", 200}, {"203.0.113.1", 429}} {
			if got := call(t, srv, "GET", "/v1/items/1", "", "X-Forwarded-For", s.xff).StatusCode; got != s.want {
				t.Errorf("trusted proxy %s, X-Forwarded-For %s: status %d; want %d", proxy, s.xff, got, s.want)
			}
		}
	}
	// A prefix that only happens to span the mapped range trusts no IPv4
	// peer: ::/64 is an IPv6 network.
	ic := &httpadmit.IdentityConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::/64")}}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	r.Header.Set("X-Forwarded-For", "203.0.113.9")
	if got := ic.ClientAddr(r); got.String() != "192.0.2.1" {
		t.Errorf("ClientAddr behind ::/64 = %s; want the peer 192.0.2.1", got)
	}
}
