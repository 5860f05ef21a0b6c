package shadow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/shadow"
)

func parse(t *testing.T, extra string) *config.File {
	t.Helper()
	f, err := config.Parse("policies.yaml", []byte(`
policies:
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 1, per: 1m}
`+extra))
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
			log := shadow.FileLogger(&buf, &parse(t, tc.section).Logging)
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
			obs, err := shadow.FileObserver(&f.Logging, shadow.FileLogger(&buf, &f.Logging), nil, counted)
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
