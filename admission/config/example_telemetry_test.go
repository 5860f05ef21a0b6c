package config_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/config"
)

// The logging section in a service: a logger at the file's level and
// format, and the decision log in front of the other observers (in a
// program, the metrics.Observer), which writes every rejection.
func ExampleFile_Observer() {
	f, _ := config.Parse("policies.yaml", []byte(`
policies:
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 1, per: 1m}
logging: {level: info, format: json, decisions: {rejections: true}}
`))
	var out bytes.Buffer // os.Stderr in a program
	obs, _ := f.Observer(f.Logger(&out))
	ctl, _ := admission.New(f.Config, admission.WithObserver(obs),
		admission.WithClock(admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	for range 2 {
		_, err := ctl.Admit(context.Background(), admission.Request{Tenant: "acme"})
		fmt.Println("rate limited:", errors.Is(err, admission.ErrRateLimited))
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var rec map[string]any
		_ = json.Unmarshal(sc.Bytes(), &rec)
		fmt.Println(rec["level"], rec["msg"], rec["policy"], rec["decision"], rec["reason"], rec["tenant"])
	}
	// Output:
	// rate limited: false
	// rate limited: true
	// WARN admission decision rpm rejected rate acme
}

// The metrics section in a service: with metrics.listen unset the scrape
// path is answered ahead of the application (so the admission middleware
// inside it never limits the scrape) and every other path goes to the
// application.
func ExampleMetrics_Expose() {
	f, _ := config.Parse("policies.yaml", []byte(`
policies:
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 60, per: 1m}
metrics: {enabled: true, path: /metrics}
`))
	// In a program: metrics.NewPrometheus(...).Handler, and the
	// application behind httpadmit.
	scrape := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "admission_decisions_total ...") })
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "claims") })
	h, ml, err := f.Metrics.Expose(scrape, app)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("separate listener:", ml != nil)
	for _, path := range []string{"/metrics", "/claims"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, rec.Code, rec.Body)
	}
	// Output:
	// separate listener: false
	// /metrics 200 admission_decisions_total ...
	// /claims 200 claims
}
