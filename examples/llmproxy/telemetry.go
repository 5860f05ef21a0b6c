package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/requestlog"
	"github.com/sluicehq/sluice/shadow/status"
)

// meterName is the instrumentation scope of the gateway's own instruments.
const meterName = "github.com/sluicehq/sluice/examples/llmproxy"

// telemetry is what the proxy reports: the admission metrics (package
// metrics) and the gateway's own instruments on one meter provider, served
// at /metrics in the Prometheus exposition format and, when a receiver is
// named, pushed over OTLP/HTTP; and the shadow decision log (package
// shadow) on the proxy's logger.
type telemetry struct {
	prom     *metrics.Prometheus
	metrics  *metrics.Observer
	rollout  *shadow.Recorder
	status   *status.Page                         // /status on the operator listener
	ctl      atomic.Pointer[admission.Controller] // the status page's source, set once built
	observer admission.Observer
	handler  http.Handler
	otlp     string // where the metrics are pushed, for the banner; empty when they are not
	stopped  bool   // shutdown ran
}

// otlpSettings say where and how often the metrics are pushed over
// OTLP/HTTP.
type otlpSettings struct {
	// endpoint is --otlp-endpoint; empty defers to the OTEL_EXPORTER_OTLP_*
	// variables, and without them nothing is pushed.
	endpoint string
	// interval is --otlp-interval; 0 defers to OTEL_METRIC_EXPORT_INTERVAL,
	// else one minute.
	interval time.Duration
}

// The variables that name an OTLP receiver. Either one turns the push on
// without --otlp-endpoint; the exporter reads them (and the other
// OTEL_EXPORTER_OTLP_* variables: headers, timeout, compression,
// certificates) itself.
const (
	otlpEndpointEnv        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	otlpMetricsEndpointEnv = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
)

// otlpReader returns the reader that pushes the metrics to the receiver o
// names every interval (and once more at shutdown), and a description of
// where for the banner; nil and "" when no receiver is named.
//
// Precedence, most first: --otlp-endpoint, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT
// (used as is), OTEL_EXPORTER_OTLP_ENDPOINT (with /v1/metrics appended).
// The flag replaces only the endpoint: the other variables still apply.
func otlpReader(o otlpSettings) (sdkmetric.Reader, string, error) {
	if o.interval < 0 {
		return nil, "", fmt.Errorf("--otlp-interval must be >= 0, got %s", o.interval)
	}
	var opts []otlpmetrichttp.Option
	var where string
	switch {
	case o.endpoint != "":
		u, err := otlpEndpointURL(o.endpoint)
		if err != nil {
			return nil, "", err
		}
		where = config.RedactURL(u)
		opts = append(opts, otlpmetrichttp.WithEndpointURL(u))
	case os.Getenv(otlpMetricsEndpointEnv) != "":
		where = "$" + otlpMetricsEndpointEnv
	case os.Getenv(otlpEndpointEnv) != "":
		where = "$" + otlpEndpointEnv
	default:
		return nil, "", nil
	}
	// New only builds the client: nothing is sent until the first push.
	exp, err := otlpmetrichttp.New(context.Background(), opts...)
	if err != nil {
		return nil, "", fmt.Errorf("otlp exporter: %w", err)
	}
	var ropts []sdkmetric.PeriodicReaderOption
	if o.interval > 0 {
		ropts = append(ropts, sdkmetric.WithInterval(o.interval))
	}
	return sdkmetric.NewPeriodicReader(exp, ropts...), where, nil
}

// otlpEndpointURL checks --otlp-endpoint (the exporter would silently fall
// back to localhost on a bad URL) and gives a URL without a path the
// receivers' usual /v1/metrics.
func otlpEndpointURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--otlp-endpoint: %q is not an http:// or https:// URL", config.RedactURL(s))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/metrics"
	}
	return u.String(), nil
}

func newTelemetry(f *config.File, log *slog.Logger, push otlpSettings) (*telemetry, error) {
	reader, where, err := otlpReader(push)
	if err != nil {
		return nil, err
	}
	var popts []sdkmetric.Option
	if reader != nil {
		popts = append(popts, sdkmetric.WithReader(reader))
	}
	prom, err := metrics.NewPrometheus(f.Metrics.CardinalityLimit, popts...)
	if err != nil {
		if reader != nil {
			_ = reader.Shutdown(context.Background())
		}
		return nil, err
	}
	t := &telemetry{prom: prom, handler: prom.Handler, otlp: where}
	mopts := []metrics.Option{metrics.WithMeterProvider(prom.Provider)}
	if f.Metrics.TopTenants > 0 {
		mopts = append(mopts, metrics.WithTopK(f.Metrics.TopTenants))
	}
	t.metrics, err = metrics.New(mopts...)
	if err != nil {
		t.close()
		return nil, err
	}
	// The rollout report of /debug/rollout: per policy, what it rejected
	// (or, in shadow, would reject) over the last 15 minutes, and from whom.
	// The status page of /status: every policy's figures, the tenants
	// refused, shadow ratios against the rollout threshold, reloads.
	if t.rollout, err = shadow.NewRecorder(shadow.RecorderConfig{}); err == nil {
		t.status, err = status.NewPage(status.Config{Stats: func() []admission.PolicyStats {
			if c := t.ctl.Load(); c != nil {
				return c.Stats()
			}
			return nil
		}, HashSessions: f.Logging.HashSessions}, status.WithRecorder(t.rollout))
	}
	if err == nil {
		t.observer, err = shadow.FileObserver(&f.Logging, log, t.metrics, t.rollout, t.status)
	}
	if err != nil {
		t.close()
		return nil, err
	}
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

// shutdown pushes the last figures to the OTLP receiver, if any, within
// ctx, and stops the exporters. The provider goes first: the admission
// metrics are read from their cells at collection, so the last push needs
// the observer's callbacks still registered. A second call does nothing.
func (t *telemetry) shutdown(ctx context.Context) error {
	if t.stopped {
		return nil
	}
	t.stopped = true
	err := t.prom.Provider.Shutdown(ctx)
	if t.metrics != nil {
		err = errors.Join(err, t.metrics.Close())
	}
	return err
}

func (t *telemetry) close() { _ = t.shutdown(context.Background()) }

// countRequestLog exports the request log's records as
// llmproxy.request_log.records, by outcome: written, or dropped because
// the disk could not keep up.
func (t *telemetry) countRequestLog(l *requestlog.Writer) error {
	m := t.prom.Provider.Meter(meterName)
	c, err := m.Int64ObservableCounter("llmproxy.request_log.records",
		metric.WithDescription("Requests written to the request log, and those dropped because writing fell behind."))
	if err != nil {
		return err
	}
	written, dropped := metric.WithAttributes(attribute.String("outcome", "written")), metric.WithAttributes(attribute.String("outcome", "dropped"))
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(c, int64(l.Written()), written)
		o.ObserveInt64(c, int64(l.Dropped()), dropped)
		return nil
	}, c)
	return err
}
