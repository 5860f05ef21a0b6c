package config_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/shadow"
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

func TestLogger(t *testing.T) {
	for _, tc := range []struct {
		name, section string
		wantDebug     bool
		wantInfo      bool
		json          bool
	}{
		{"defaults", "", false, true, true},
		{"debug text", "logging: {level: debug, format: text}", true, true, false},
		{"warn json", "logging: {level: warn, format: json}", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := parse(t, tc.section).Logger(&buf)
			log.Debug("d")
			log.Info("i")
			log.Warn("w", "client", strings.Repeat("x", 10_000))
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if got, want := len(lines), 1+btoi(tc.wantDebug)+btoi(tc.wantInfo); got != want {
				t.Fatalf("lines written = %d; want %d:\n%s", got, want, buf.String())
			}
			last := lines[len(lines)-1]
			if got := json.Valid([]byte(last)); got != tc.json {
				t.Errorf("JSON = %v; want %v: %s", got, tc.json, last)
			}
			// Strings are clipped: a client's 10 kB value does not reach the log.
			if len(last) > 2*shadow.MaxLogValue || !strings.Contains(last, "...") {
				t.Errorf("record of %d bytes; want the value clipped to %d: %.80s", len(last), shadow.MaxLogValue, last)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// counter is an observer that counts the decisions it is given.
type counter struct {
	admission.NopObserver
	n atomic.Int64
}

func (c *counter) Decision(*admission.Decision) { c.n.Add(1) }

func TestObserver(t *testing.T) {
	for _, tc := range []struct {
		name, section string
		wantLogged    int
		wantAdmitted  int
	}{
		{"defaults log rejections", "", 2, 0},
		{"rejections off", "logging: {decisions: {rejections: false}}", 0, 0},
		{"max_per_second bounds", "logging: {decisions: {max_per_second: 1}}", 1, 0},
		{"sample logs admitted decisions", "logging: {decisions: {sample: 1}}", 2, 1},
		{"a small sample logs a fraction", "logging: {decisions: {sample: 0.5}}", 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := parse(t, tc.section)
			var buf bytes.Buffer
			counted := &counter{}
			obs, err := f.Observer(f.Logger(&buf), nil, counted)
			if err != nil {
				t.Fatal(err)
			}
			ctl, err := admission.New(f.Config, admission.WithObserver(obs),
				admission.WithClock(admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
			if err != nil {
				t.Fatal(err)
			}
			rejected := 0
			for range 3 {
				if _, err := ctl.Admit(context.Background(), admission.Request{Tenant: "acme"}); err != nil {
					rejected++
				}
			}
			if rejected != 2 || counted.n.Load() != 3 {
				t.Fatalf("rejected %d, observer saw %d decisions; want 2 and 3", rejected, counted.n.Load())
			}
			logged, admitted := 0, 0
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				var rec struct{ Level, Policy, Decision, Tenant string }
				if l == "" {
					continue
				}
				if err := json.Unmarshal([]byte(l), &rec); err != nil {
					t.Fatalf("%q: %v", l, err)
				}
				if rec.Decision == "rejected" && rec.Policy == "rpm" && rec.Tenant == "acme" && rec.Level == "WARN" {
					logged++
				}
				if rec.Decision == "admitted" && rec.Policy == "rpm" && rec.Tenant == "acme" && rec.Level == "INFO" {
					admitted++
				}
			}
			if logged != tc.wantLogged || admitted != tc.wantAdmitted {
				t.Errorf("rejections logged = %d, admitted decisions logged = %d; want %d and %d:\n%s", logged, admitted, tc.wantLogged, tc.wantAdmitted, buf.String())
			}
		})
	}
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
// modules: the metrics observer is passed in.
func TestNoMetricsDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.opentelemetry.io/") || strings.HasPrefix(p, "github.com/prometheus/") || p == "github.com/sluicehq/sluice/metrics" {
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
