package config_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
)

const exposePolicy = `
policies:
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 1, per: 1m}
`

func parse(t *testing.T, extra string) *config.File {
	t.Helper()
	f, err := config.Parse("policies.yaml", []byte(exposePolicy+extra))
	if err != nil {
		t.Fatal(err)
	}
	return f
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
			f := parse(t, tc.section)
			h, ml, err := f.Metrics.Expose(scrape, app)
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
	f := parse(t, "metrics: {listen: '127.0.0.1:0'}")
	_, ml, err := f.Metrics.Expose(scrape, app)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close()
	f.Metrics.Listen = ml.Addr()
	if _, _, err := f.Metrics.Expose(scrape, app); err == nil {
		t.Errorf("Expose on %s, already in use: no error", ml.Addr())
	}
}

// Reading policy files must not link the OpenTelemetry and Prometheus
// modules, nor any adapter: the packages that act on a section read it
// from the File.
func TestNoAdapterDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		adapter := false
		for _, a := range []string{"admission/httpadmit", "admission/echoadmit", "admission/httpretry", "admission/redisstore", "metrics", "shadow", "weights"} {
			adapter = adapter || strings.HasPrefix(p, "github.com/sluicehq/sluice/"+a)
		}
		if adapter || strings.HasPrefix(p, "go.opentelemetry.io/") || strings.HasPrefix(p, "github.com/prometheus/") {
			t.Errorf("admission/config depends on %s", p)
		}
	}
}

// A disabled section needs no metrics handler; an enabled one does.
func TestExposeHandlers(t *testing.T) {
	app := http.NotFoundHandler()
	off := parse(t, "metrics: {enabled: false}")
	if h, ml, err := off.Metrics.Expose(nil, app); err != nil || ml != nil || h == nil {
		t.Errorf("disabled Expose(nil, app) = %v, %v, %v; want app, nil, nil", h, ml, err)
	}
	on := parse(t, "")
	if _, _, err := on.Metrics.Expose(nil, app); err == nil {
		t.Errorf("enabled Expose(nil, app): no error")
	}
	if _, _, err := off.Metrics.Expose(app, nil); err == nil {
		t.Errorf("Expose(h, nil): no error")
	}
}
