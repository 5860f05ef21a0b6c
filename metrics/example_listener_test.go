package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/metrics"
)

// The metrics section in a service: with metrics.listen unset the scrape
// path is answered ahead of the application (so the admission middleware
// inside it never limits the scrape) and every other path goes to the
// application.
func ExampleExpose() {
	f, _ := config.Parse("policies.yaml", []byte(`
policies:
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 60, per: 1m}
metrics: {enabled: true, path: /metrics}
`))
	// In a program: NewPrometheus(...).Handler, and the
	// application behind httpadmit.
	scrape := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "admission_decisions_total ...") })
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "claims") })
	e := metrics.Exposure{Enabled: f.Metrics.Enabled, Path: f.Metrics.Path, Listen: f.Metrics.Listen}
	h, ml, err := metrics.Expose(e, scrape, app)
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
