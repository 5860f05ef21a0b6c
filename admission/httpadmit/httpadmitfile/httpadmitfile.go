// Package httpadmitfile connects a policy file (admission/config) to the
// net/http middleware (admission/httpadmit). The middleware itself takes
// plain values (an admission.Config and Options), so a program that
// configures it in Go links neither the YAML decoder nor the file
// watcher; a program that reads a policy file uses this package.
//
// # One call
//
// FromFile goes from the file to a running middleware:
//
//	s, err := httpadmitfile.FromFile(ctx, "policies.yaml", httpadmitfile.WithMiddleware(httpadmit.WithRoutes(mux)))
//	if err != nil {
//		return err // policies.yaml:14:12: policies[1].burst: ...
//	}
//	defer s.Close()
//	return http.ListenAndServe(":8080", s.Handler(mux))
//
// It reads the file once and builds all it describes: the controller,
// the stores of kind redis of its stores section (the address in the
// file or in the variable it names, each store reporting its calls to
// the metrics), the logging section's decision log, the metrics
// section's Prometheus scrape, the identity and http sections on the
// middleware; then it watches the file, whose first version is the one
// it started with (the watcher's first load builds the setup, so no
// version is applied twice). Its result is a Setup, not a Middleware,
// because it owns more than the middleware: goroutines, listeners and
// connections that one Close releases. Optional collaborators (logger,
// meter provider, observer, clock) are options, and the middleware's
// own options pass through WithMiddleware.
//
// # Piece by piece
//
// A program that builds the controller itself (its own stores, a tenant
// directory, the LLM gateway) uses the pieces FromFile is made of:
//
//	f, _ := config.Load("policies.yaml")
//	ctl, _ := admission.New(f.Config)
//	mw, _ := httpadmit.New(ctl, httpadmitfile.Options(f)...)
//	w, _ := reload.Watch("policies.yaml", httpadmitfile.Middleware{Middleware: mw})
//
// (which applies the file twice: once by hand, once as the watcher's
// first load). Middleware is the middleware as a reload.Subscriber and a
// directory.Target: its Apply installs the whole file (policies, plans,
// the http and identity sections) as one snapshot, by one swap.
package httpadmitfile

import (
	"context"
	"log/slog"
	"net/http"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/internal/filesetup"
	"github.com/sluicehq/sluice/admission/reload"
)

// Options returns the options a policy file sets: its http section and
// its identity section with the tenants' key table. Pass them to
// httpadmit.New; Middleware.Apply installs those of a reloaded file.
func Options(f *config.File) []httpadmit.Option {
	h, id := &f.HTTP, &f.Identity
	return []httpadmit.Option{
		httpadmit.WithExempt(h.Exempt...), httpadmit.WithMaxBody(h.MaxBody), httpadmit.WithBodyTimeout(h.BodyTimeout),
		httpadmit.WithQuotaStatus(h.QuotaStatus), httpadmit.WithShadowHeader(h.ShadowHeader),
		httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
			KeyHeaders: id.KeyHeaders, Keys: id.Keys, TrustedProxies: id.TrustedProxies,
			ClientIPHeader: id.ClientIPHeader, AnonymousTenant: id.AnonymousTenant, RequireKey: id.RequireKey,
			SessionHeaders: id.Session.Headers, MaxSessionLength: id.Session.MaxLength,
		}),
	}
}

// Middleware is a httpadmit.Middleware that takes policy files: a
// reload.Subscriber and a directory.Target. Its other methods are the
// middleware's.
type Middleware struct {
	*httpadmit.Middleware
}

// Apply installs a policy file, as a reload.Subscriber: Compile, then
// Install, as one step. A file that does not compile changes nothing.
func (m Middleware) Apply(f *config.File) error {
	return m.Middleware.Apply(f.Config, Options(f)...)
}

// Compile builds, without installing it, the snapshot of a policy file:
// its policies and plans compiled by the controller, its http and
// identity sections (Options) over the middleware's own options.
func (m Middleware) Compile(f *config.File) (*httpadmit.Snapshot, error) {
	return m.Middleware.Compile(f.Config, Options(f)...)
}

// An Option configures FromFile. Optional collaborators are options, as
// everywhere in the module (docs/concepts.md#constructors).
type Option = filesetup.Option[httpadmit.Option]

// WithLogger sets the logger of the decision log, the reloads, the
// middleware's and the controller's errors. Absent or nil: the file's
// logging section (level, format) writing to os.Stderr.
func WithLogger(l *slog.Logger) Option { return filesetup.WithLogger[httpadmit.Option](l) }

// WithMeterProvider puts the metrics (package metrics, on the file's
// metrics.top_tenants) on mp, which the program exports itself. Absent
// or nil: the file's metrics section, a Prometheus exporter with its
// cardinality_limit, scraped at its path on the application's listener
// (Setup.Handler) or on its own listen address; no metrics when it is
// disabled.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return filesetup.WithMeterProvider[httpadmit.Option](mp)
}

// WithObserver adds an observer of the controller's decisions and of
// the Redis stores' calls, after the decision log and the metrics (a
// shadow.Recorder, a budget watcher). Absent or nil: none.
func WithObserver(o admission.Observer) Option { return filesetup.WithObserver[httpadmit.Option](o) }

// WithClock sets the clock of the controller, the metrics and the Redis
// stores' breakers. Absent or nil: admission.SystemClock.
func WithClock(c admission.Clock) Option { return filesetup.WithClock[httpadmit.Option](c) }

// OnReload sets a function told about every reload, the first load
// included, after the metrics count it (admission_reloads_total).
// Absent or nil: none.
func OnReload(fn func(reload.Event)) Option { return filesetup.OnReload[httpadmit.Option](fn) }

// WithMiddleware passes options to httpadmit.New (WithRoutes,
// WithRequest, WithRejectionHandler...), applied after the file's
// (Options); a reload applies the file's over them again.
func WithMiddleware(opts ...httpadmit.Option) Option {
	return filesetup.WithFrontEnd(opts...)
}

// Setup is a running middleware built from a policy file by FromFile:
// the controller, the stores, the metrics and the watcher it owns.
type Setup struct {
	s  *filesetup.Setup
	mw Middleware
}

// FromFile reads the policy file at path once and returns the middleware
// it describes, running: its policies, plans and tenants on a
// controller, each store of kind redis of its stores section opened
// (address or address_env) and reporting its calls to the metrics
// (admission_store_duration_seconds), its identity and http sections on
// the middleware, its logging section as the decision log, its metrics
// section as a Prometheus scrape; then it watches the file, and each
// later version that loads is applied whole (Middleware.Apply), a
// version that does not is refused and logged while the one in force
// keeps serving. ctx bounds the first contact with the Redis stores
// (a store that does not answer is logged, and its policies'
// on_store_error decides until it does). A file that does not load is
// an error naming the file and line, as config.Parse's; a policy on a
// store the file does not declare, an upstream store (the LLM
// gateway's) or a tenant directory other than the file are errors too.
// Close releases it all.
func FromFile(ctx context.Context, path string, opts ...Option) (*Setup, error) {
	st := &Setup{}
	s, err := filesetup.Start(ctx, path, opts, func(s *filesetup.Setup, f *config.File, mopts []httpadmit.Option) (filesetup.FrontEnd, error) {
		mw, err := httpadmit.New(s.Controller, append(append(Options(f), httpadmit.WithLogger(s.Log)), mopts...)...)
		if err != nil {
			return nil, err
		}
		st.mw = Middleware{Middleware: mw}
		return st.mw, nil
	})
	if err != nil {
		return nil, err
	}
	st.s = s
	return st, nil
}

// Handler returns next behind the middleware, and behind the scrape of
// the file's metrics section when it is served on the application's
// listener (metrics.path answered ahead of the limits).
func (s *Setup) Handler(next http.Handler) http.Handler {
	return s.s.Expose(s.mw.Handler(next))
}

// Middleware returns the middleware, a reload.Subscriber, for the
// methods Handler does not cover (AdmitAs, Snapshot, SetKey).
func (s *Setup) Middleware() Middleware { return s.mw }

// Controller returns the controller the middleware admits through.
func (s *Setup) Controller() *admission.Controller { return s.s.Controller }

// Watcher returns the watcher following the file: Current is the file
// in force, Stats counts the reloads.
func (s *Setup) Watcher() *reload.Watcher { return s.s.Watcher }

// Close stops watching the file and stops the controller's lease keeper
// (admission.Controller.Close), closes the metrics listener and the
// connections to Redis. Stop serving first (http.Server.Shutdown): the
// middleware still admits through the controller after Close.
func (s *Setup) Close() error { return s.s.Close() }
