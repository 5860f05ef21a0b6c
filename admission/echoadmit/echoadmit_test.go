package echoadmit_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/echoadmit"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

const key = "sk-echo-1"

func newServer(t testing.TB, cfg echoadmit.Config, policies ...admission.Policy) *httptest.Server {
	srv, _ := newServerWith(t, cfg, nil, policies...)
	return srv
}

// newServerWith serves the echo routes of newEcho on a loopback port.
func newServerWith(t testing.TB, cfg echoadmit.Config, opts []httpadmit.Option, policies ...admission.Policy) (*httptest.Server, *testEnv) {
	e, env := newEcho(t, cfg, opts, policies...)
	srv := httptest.NewServer(e)
	if tt, ok := t.(*testing.T); ok {
		tt.Cleanup(func() { close(env.release); srv.Close() })
	}
	return srv, env
}

// newEcho returns the echo routes behind the middleware built with opts,
// with a fake clock; "/v1/hold" waits for the returned release channel.
func newEcho(t testing.TB, cfg echoadmit.Config, opts []httpadmit.Option, policies ...admission.Policy) (*echo.Echo, *testEnv) {
	clk := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctl, err := admission.New(admission.Config{Policies: policies}, admission.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, append([]httpadmit.Option{httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
		Keys: map[apikey.Hash]httpadmit.Identity{apikey.Sum(key): {Tenant: "acme"}},
	})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	env := &testEnv{clk: clk, ctl: ctl, release: make(chan struct{})}
	e := echo.New()
	e.HideBanner = true
	e.Use(echoadmit.Middleware(mw, cfg))
	e.GET("/v1/items/:id", func(c echo.Context) error { return c.String(http.StatusOK, "item "+c.Param("id")) })
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	e.GET("/v1/hold", func(c echo.Context) error { <-env.release; return c.NoContent(http.StatusOK) })
	return e, env
}

// testEnv is what a test drives besides the server.
type testEnv struct {
	clk     *admissiontest.Clock
	ctl     *admission.Controller
	release chan struct{}
}

func get(t testing.TB, srv *httptest.Server, path, k string) (*http.Response, string) {
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	if k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

var itemsPolicy = admission.Policy{
	Name: "items", Key: []limits.KeyPart{limits.KeyTenant},
	Match:     limits.Match{Operations: []string{"GET /v1/items/:id"}},
	Algorithm: limits.FixedWindow, Limit: 2, Per: time.Minute,
}

func TestEchoContract(t *testing.T) {
	srv := newServer(t, echoadmit.Config{}, itemsPolicy)
	for i, want := range []int{200, 200, 429} {
		resp, _ := get(t, srv, fmt.Sprintf("/v1/items/%d", i), key)
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d; want %d", i, resp.StatusCode, want)
		}
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != fmt.Sprint(max(0, 1-i)) {
			t.Errorf("request %d: X-RateLimit-Remaining = %q; want %d", i, got, max(0, 1-i))
		}
		if want == 429 && (resp.Header.Get("Retry-After") != "60" || resp.Header.Get("Content-Type") != "application/problem+json") {
			t.Errorf("429: headers %v", resp.Header)
		}
	}
	for range 5 {
		if resp, _ := get(t, srv, "/healthz", key); resp.StatusCode != 200 {
			t.Errorf("health: %d", resp.StatusCode)
		}
	}
	if resp, _ := get(t, srv, "/v1/items/1", "sk-unknown"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unknown key: %d; want 401", resp.StatusCode)
	}
}

func TestEchoHooks(t *testing.T) {
	var denied []string
	srv := newServer(t, echoadmit.Config{
		Skipper: func(c echo.Context) bool { return c.QueryParam("skip") == "1" },
		IdentifierExtractor: func(c echo.Context) (httpadmit.Identity, error) {
			if u := c.Request().Header.Get("X-User"); u != "" {
				return httpadmit.Identity{Tenant: u}, nil
			}
			return httpadmit.Identity{}, httpadmit.ErrNoCredentials
		},
		DenyHandler: func(c echo.Context, identifier string, err error) error {
			denied = append(denied, identifier)
			var rej *admission.Rejection
			if !errors.As(err, &rej) {
				t.Errorf("DenyHandler err %T", err)
			}
			return c.JSON(http.StatusTooManyRequests, map[string]string{"error": "slow down"})
		},
		ErrorHandler: func(c echo.Context, err error) error {
			return echo.NewHTTPError(http.StatusUnauthorized, "who are you")
		},
	}, itemsPolicy)
	do := func(path, user string) int {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if user != "" {
			req.Header.Set("X-User", user)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	steps := []struct {
		path, user string
		want       int
	}{
		{"/v1/items/1", "bob", 200}, {"/v1/items/1", "bob", 200}, {"/v1/items/1", "bob", 429},
		{"/v1/items/1?skip=1", "bob", 200}, {"/v1/items/1", "eve", 200}, {"/v1/items/1", "", 401},
	}
	for i, s := range steps {
		if got := do(s.path, s.user); got != s.want {
			t.Errorf("step %d %s as %q: %d; want %d", i, s.path, s.user, got, s.want)
		}
	}
	if len(denied) != 1 || denied[0] != "bob" {
		t.Errorf("DenyHandler identifiers = %v; want [bob]", denied)
	}
}

// An echo server admitting two requests per minute per tenant on its item
// route; the third gets the 429 contract.
func Example() {
	clk := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{itemsPolicy}}, admission.WithClock(clk))
	mw, _ := httpadmit.New(ctl, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
		Keys: map[apikey.Hash]httpadmit.Identity{apikey.Sum(key): {Tenant: "acme"}},
	}))
	e := echo.New()
	e.Use(echoadmit.Middleware(mw, echoadmit.Config{}))
	e.GET("/v1/items/:id", func(c echo.Context) error { return c.String(http.StatusOK, "item") })
	for range 3 {
		req := httptest.NewRequest("GET", "/v1/items/7", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "items";r=1;t=60
	// 200 "items";r=0;t=60
	// 429 "items";r=0;t=60
}

// A service with its own authentication names the caller with an
// IdentifierExtractor; the httpadmit middleware's options (here the
// precise Retry-After-Ms) hold on echo too.
func Example_identifierExtractor() {
	clk := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-tenant", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.TokenBucket, Limit: 5, Per: time.Second, Burst: 1,
	}}}, admission.WithClock(clk))
	mw, _ := httpadmit.New(ctl, httpadmit.WithRetryAfterMs(true))
	e := echo.New()
	e.Use(echoadmit.Middleware(mw, echoadmit.Config{
		IdentifierExtractor: func(c echo.Context) (httpadmit.Identity, error) {
			// Stands for a session validated by the service's own login.
			if c.Request().Header.Get("X-Session") != "valid" {
				return httpadmit.Identity{}, errors.New("no valid session")
			}
			return httpadmit.Identity{Tenant: "acme"}, nil
		},
	}))
	e.GET("/v1/claims", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	for _, session := range []string{"valid", "valid", "forged"} {
		req := httptest.NewRequest("GET", "/v1/claims", nil)
		req.Header.Set("X-Session", session)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(strings.TrimSpace(fmt.Sprint(rec.Code, " ", rec.Header().Get("Retry-After-Ms"))))
	}
	// Output:
	// 200
	// 429 200
	// 401
}
