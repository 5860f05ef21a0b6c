package config

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/shadow"
)

// This file wires the logging and metrics sections in a program that
// uses the library. It imports package shadow (standard library and the
// core only) for the decision log, but not package metrics, whose
// OpenTelemetry and Prometheus modules every reader of policy files would
// otherwise link: the metrics observer and its handler are passed in, as
// an admission.Observer and an http.Handler.

// Logger returns a logger as the logging section says: records at
// logging.level and above, written to w as JSON or text (logging.format),
// every string clipped (shadow.BoundedHandler) since records may quote
// what clients sent.
func (f *File) Logger(w io.Writer) *slog.Logger {
	l := &f.Logging
	opts := &slog.HandlerOptions{Level: l.Level}
	var h slog.Handler
	if l.Format == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(shadow.NewBoundedHandler(h))
}

// DecisionLogConfig returns the decision log settings of the
// logging.decisions section: every rejection when rejections is true
// (none otherwise), at most max_per_second records per second on average
// and at most max_per_second (or shadow.DefaultLogBurst, if fewer) at
// once. The decision log always writes would-reject and fail-open
// decisions, whatever rejections says. decisions.sample is not applied:
// the decision log writes no admitted decisions.
func (l *Logging) DecisionLogConfig() shadow.LogConfig {
	c := shadow.LogConfig{Rate: float64(l.MaxPerSecond), Burst: min(l.MaxPerSecond, shadow.DefaultLogBurst)}
	if l.Rejections {
		c.RejectSample = 1
	}
	if l.DecisionSample > 0 {
		// One admitted decision in round(1/sample): a fraction of 0.01
		// logs every hundredth.
		c.AdmitSample = max(1, int(math.Round(1/l.DecisionSample)))
	}
	return c
}

// Observer returns the observer to give admission.WithObserver (and
// WithObserver of a Watcher): the decision log of the logging.decisions
// section writing to log, followed by obs, typically a metrics.Observer.
// Nil entries of obs are skipped.
func (f *File) Observer(log *slog.Logger, obs ...admission.Observer) (admission.Observer, error) {
	dlog, err := shadow.NewLog(f.Logging.DecisionLogConfig(), shadow.WithLogger(log))
	if err != nil {
		return nil, err
	}
	all := []admission.Observer{dlog}
	for _, o := range obs {
		if o != nil {
			all = append(all, o)
		}
	}
	return shadow.Join(all...), nil
}

// Expose serves h, the metrics handler (metrics.Prometheus.Handler), as
// the metrics section says, and returns the handler to serve app with:
//
//   - metrics.enabled false: app itself, and no listener (h may be nil);
//   - metrics.listen empty: a handler that answers GET and HEAD of exactly
//     metrics.path with h and passes every other request to app. The
//     scrape is answered ahead of app, so the admission middleware inside
//     app never limits it, whatever http.exempt lists;
//   - metrics.listen set: app itself, and a MetricsListener serving h at
//     metrics.path on that address, to close at shutdown.
//
// Keep a separate listener private: the metrics name the heaviest tenants.
func (m *Metrics) Expose(h, app http.Handler) (http.Handler, *MetricsListener, error) {
	if app == nil {
		return nil, nil, errors.New("config: Expose needs an application handler")
	}
	if !m.Enabled {
		return app, nil, nil
	}
	if h == nil {
		return nil, nil, errors.New("config: metrics are enabled and Expose has no metrics handler")
	}
	if m.Listen == "" {
		return scrape(m.Path, h, app), nil, nil
	}
	ln, err := net.Listen("tcp", m.Listen)
	if err != nil {
		return nil, nil, err
	}
	ml := &MetricsListener{
		addr: ln.Addr().String(),
		srv: &http.Server{
			Handler:           scrape(m.Path, h, http.NotFoundHandler()),
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    16 << 10,
		},
	}
	ml.wg.Add(1)
	go func() {
		defer ml.wg.Done()
		if err := ml.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			ml.err = err
		}
	}()
	return app, ml, nil
}

// scrape answers GET and HEAD of exactly path with h (405 for other
// methods), and passes every other path to next. The path is compared as
// written in the file, not as a ServeMux pattern.
func scrape(path string, h, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// A MetricsListener serves the metrics on the address of metrics.listen.
type MetricsListener struct {
	addr string
	srv  *http.Server
	wg   sync.WaitGroup
	err  error // set by the serving goroutine before wg.Done
}

// Addr returns the address listened on, with the port chosen when
// metrics.listen names port 0.
func (l *MetricsListener) Addr() string { return l.addr }

// Close stops the listener and its connections, and returns the error
// that stopped it serving earlier, if any.
func (l *MetricsListener) Close() error {
	err := l.srv.Close()
	l.wg.Wait()
	return errors.Join(err, l.err)
}
