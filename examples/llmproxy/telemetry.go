package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/shadow"
)

// meterName is the instrumentation scope of the gateway's own instruments.
const meterName = "github.com/sluicehq/sluice/examples/llmproxy"

// telemetry is what the proxy reports: the admission metrics (package
// metrics) and the gateway's own instruments on one meter provider, served
// at /metrics in the Prometheus exposition format, and the shadow decision
// log (package shadow) on the proxy's logger.
type telemetry struct {
	prom     *metrics.Prometheus
	metrics  *metrics.Observer
	rollout  *shadow.Recorder
	observer admission.Observer
	handler  http.Handler
}

func newTelemetry(f *config.File, log *slog.Logger) (*telemetry, error) {
	prom, err := metrics.NewPrometheus(f.Metrics.CardinalityLimit)
	if err != nil {
		return nil, err
	}
	t := &telemetry{prom: prom, handler: prom.Handler}
	mopts := []metrics.Option{metrics.WithMeterProvider(prom.Provider)}
	if f.Metrics.TopTenants > 0 {
		mopts = append(mopts, metrics.WithTopK(f.Metrics.TopTenants))
	}
	t.metrics, err = metrics.New(mopts...)
	if err != nil {
		t.close()
		return nil, err
	}
	lc := shadow.LogConfig{Rate: float64(f.Logging.MaxPerSecond)}
	if f.Logging.Rejections {
		lc.RejectSample = 1
	}
	dlog, err := shadow.NewLog(lc, shadow.WithLogger(log))
	if err != nil {
		t.close()
		return nil, err
	}
	// The rollout report of /debug/rollout: per policy, what it rejected
	// (or, in shadow, would reject) over the last 15 minutes, and from whom.
	t.rollout, err = shadow.NewRecorder(shadow.RecorderConfig{})
	if err != nil {
		t.close()
		return nil, err
	}
	t.observer = shadow.Join(t.metrics, dlog, t.rollout)
	return t, nil
}

// rolloutHandler answers the rollout report: a sentence per policy ("if
// enforced now, policy X would reject 3.2% of requests, 90% of them from
// tenant T"), or the report as JSON with ?format=json.
func (t *telemetry) rolloutHandler(w http.ResponseWriter, r *http.Request) {
	rep := t.rollout.Report(5)
	if r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, rep.String())
}

// watch points the gauges (in flight, queue depth, partitions) at ctl.
func (t *telemetry) watch(ctl *admission.Controller) { t.metrics.Watch(ctl) }

func (t *telemetry) meter() metric.Meter { return t.prom.Provider.Meter(meterName) }

func (t *telemetry) close() {
	if t.metrics != nil {
		_ = t.metrics.Close()
	}
	_ = t.prom.Provider.Shutdown(context.Background())
}
