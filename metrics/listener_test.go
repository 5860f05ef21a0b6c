package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/metrics"
)

const exposePolicy = `
policies:
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 1, per: 1m}
`

// exposure returns the metrics section of a policy file with extra, as
// a program passes it to Expose.
func exposure(t *testing.T, extra string) metrics.Exposure {
	t.Helper()
	f, err := config.Parse("policies.yaml", []byte(exposePolicy+extra))
	if err != nil {
		t.Fatal(err)
	}
	return metrics.Exposure{Enabled: f.Metrics.Enabled, Path: f.Metrics.Path, Listen: f.Metrics.Listen}
}

// body GETs (or sends method to) url and returns the status and body.
func body(t *testing.T, method, url string) string {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

func TestExpose(t *testing.T) {
	scrape := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "metrics") })
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })
	type probe struct{ method, path, want string }
	for _, tc := range []struct {
		name, section string
		main          []probe // on the handler Expose returns
		separate      []probe // on the metrics listener, when there is one
	}{
		{"disabled", "metrics: {enabled: false}", []probe{{"GET", "/metrics", "200 app"}}, nil},
		{"main listener", "", []probe{
			{"GET", "/metrics", "200 metrics"},
			{"HEAD", "/metrics", "200 "},
			{"POST", "/metrics", "405 method not allowed"},
			{"GET", "/metrics/", "200 app"},
			{"GET", "/claims", "200 app"},
		}, nil},
		{"own path", "metrics: {path: /internal/prom}", []probe{
			{"GET", "/internal/prom", "200 metrics"},
			{"GET", "/metrics", "200 app"},
		}, nil},
		{"own listener", "metrics: {listen: '127.0.0.1:0', path: /prom}", []probe{
			{"GET", "/prom", "200 app"},
		}, []probe{
			{"GET", "/prom", "200 metrics"},
			{"GET", "/claims", "404 404 page not found"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := exposure(t, tc.section)
			h, ml, err := metrics.Expose(e, scrape, app)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			for _, p := range tc.main {
				if got := body(t, p.method, srv.URL+p.path); got != p.want {
					t.Errorf("%s %s = %q; want %q", p.method, p.path, got, p.want)
				}
			}
			if (ml != nil) != (tc.separate != nil) {
				t.Fatalf("metrics listener = %v; want one: %v", ml, tc.separate != nil)
			}
			if ml == nil {
				return
			}
			for _, p := range tc.separate {
				if got := body(t, p.method, "http://"+ml.Addr()+p.path); got != p.want {
					t.Errorf("metrics listener: %s %s = %q; want %q", p.method, p.path, got, p.want)
				}
			}
			if err := ml.Close(); err != nil {
				t.Errorf("Close = %v", err)
			}
			if _, err := http.Get("http://" + ml.Addr() + "/prom"); err == nil {
				t.Errorf("metrics listener still answers after Close")
			}
		})
	}
	// A listen address already taken is an error, not a silent default.
	e := exposure(t, "metrics: {listen: '127.0.0.1:0'}")
	_, ml, err := metrics.Expose(e, scrape, app)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close()
	e.Listen = ml.Addr()
	if _, _, err := metrics.Expose(e, scrape, app); err == nil {
		t.Errorf("Expose on %s, already in use: no error", ml.Addr())
	}
}

// A disabled section needs no metrics handler; an enabled one does.
func TestExposeHandlers(t *testing.T) {
	app := http.NotFoundHandler()
	off := exposure(t, "metrics: {enabled: false}")
	if h, ml, err := metrics.Expose(off, nil, app); err != nil || ml != nil || h == nil {
		t.Errorf("disabled Expose(nil, app) = %v, %v, %v; want app, nil, nil", h, ml, err)
	}
	on := exposure(t, "")
	if _, _, err := metrics.Expose(on, nil, app); err == nil {
		t.Errorf("enabled Expose(nil, app): no error")
	}
	if _, _, err := metrics.Expose(off, app, nil); err == nil {
		t.Errorf("Expose(h, nil): no error")
	}
}
