package metrics_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/metrics"
)

// The observer goes into the controller, the controller back into the
// observer (for its gauges), and the Prometheus handler onto /metrics.
func Example() {
	prom, err := metrics.NewPrometheus(0) // 0: metrics.DefaultCardinalityLimit
	if err != nil {
		panic(err)
	}
	defer prom.Provider.Shutdown(context.Background())
	obs, err := metrics.New(metrics.WithMeterProvider(prom.Provider))
	if err != nil {
		panic(err)
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "tenant-rpm", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.FixedWindow, Limit: 2, Per: time.Minute,
	}}}, admission.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	obs.Watch(ctl)

	for range 3 {
		tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: "acme"})
		if errors.Is(err, admission.ErrRateLimited) {
			continue
		}
		tk.Done()
	}

	// What a scrape of prom.Handler (mounted on /metrics) returns:
	rec := httptest.NewRecorder()
	prom.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "admission_decisions_total") ||
			strings.HasPrefix(line, "admission_tenant_decisions_total") {
			fmt.Println(line)
		}
	}
	// Output:
	// admission_decisions_total{decision="admitted",mode="enforce",policy="tenant-rpm",reason="none"} 2
	// admission_decisions_total{decision="rejected",mode="enforce",policy="tenant-rpm",reason="rate"} 1
	// admission_tenant_decisions_total{decision="admitted",policy="tenant-rpm",tenant="acme"} 2
	// admission_tenant_decisions_total{decision="rejected",policy="tenant-rpm",tenant="acme"} 1
}
