// Package grpcadmitfile goes in one call from a policy file to running
// gRPC interceptors (admission/grpcadmit), as httpadmitfile does for
// net/http; grpcadmit itself takes plain values and links neither the
// YAML decoder nor the file watcher.
//
//	s, err := grpcadmitfile.FromFile(ctx, "policies.yaml")
//	if err != nil {
//		return err // policies.yaml:14:12: policies[1].burst: ...
//	}
//	defer s.Close()
//	ic := s.Interceptor()
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary), grpc.ChainStreamInterceptor(ic.Stream))
//
// FromFile reads the file once and builds what httpadmitfile.FromFile
// builds (the controller, the Redis stores of the stores section with
// their calls in the metrics, the decision log, the metrics), the
// interceptor with the identity section (the tenants' key table,
// key_headers, anonymous) and the http section's shadow_header, and
// watches the file. The metrics section's scrape is served on its listen
// address, or by the program at its path (MetricsHandler): a gRPC server
// has no HTTP listener to answer it ahead of.
//
// A later version of the file installs its policies, plans, key table,
// identity settings and shadow_header as one value
// (grpcadmit.Interceptor.Apply): a call is decided by one version of the
// file, never by the keys of one and the policies of another.
package grpcadmitfile

import (
	"context"
	"log/slog"
	"net/http"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/grpcadmit"
	"github.com/sluicehq/sluice/admission/internal/filesetup"
	"github.com/sluicehq/sluice/admission/reload"
)

// An Option configures FromFile. Optional collaborators are options, as
// everywhere in the module (docs/concepts.md#constructors).
type Option = filesetup.Option[grpcadmit.Option]

// WithLogger sets the logger of the decision log, the reloads, the
// interceptor's and the controller's errors. Absent or nil: the file's
// logging section (level, format) writing to os.Stderr.
func WithLogger(l *slog.Logger) Option { return filesetup.WithLogger[grpcadmit.Option](l) }

// WithMeterProvider puts the metrics (package metrics) on mp, which the
// program exports itself. Absent or nil: the file's metrics section, a
// Prometheus exporter (MetricsHandler, or its listen address); no
// metrics when it is disabled.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return filesetup.WithMeterProvider[grpcadmit.Option](mp)
}

// WithObserver adds an observer of the controller's decisions and of
// the Redis stores' calls, after the decision log and the metrics.
// Absent or nil: none.
func WithObserver(o admission.Observer) Option { return filesetup.WithObserver[grpcadmit.Option](o) }

// WithClock sets the clock of the controller, the metrics and the Redis
// stores' breakers. Absent or nil: admission.SystemClock.
func WithClock(c admission.Clock) Option { return filesetup.WithClock[grpcadmit.Option](c) }

// OnReload sets a function told about every reload, the first load
// included, after the metrics count it. Absent or nil: none.
func OnReload(fn func(reload.Event)) Option { return filesetup.OnReload[grpcadmit.Option](fn) }

// WithInterceptor passes options to grpcadmit.New (WithRequest,
// WithExempt, WithTenantHeader...), applied after the file's.
func WithInterceptor(opts ...grpcadmit.Option) Option { return filesetup.WithFrontEnd(opts...) }

// Setup is running interceptors built from a policy file by FromFile:
// the controller, the stores, the metrics and the watcher it owns.
type Setup struct {
	s  *filesetup.Setup
	ic *grpcadmit.Interceptor
}

// FromFile reads the policy file at path once and returns the
// interceptors it describes, running, and watching the file (see the
// package documentation). ctx bounds the first contact with the Redis
// stores. A file that does not load is an error naming the file and
// line, as config.Parse's; a policy on a store the file does not
// declare, an upstream store or a tenant directory other than the file
// are errors too. Close releases it all.
func FromFile(ctx context.Context, path string, opts ...Option) (*Setup, error) {
	st := &Setup{}
	s, err := filesetup.Start(ctx, path, opts, func(s *filesetup.Setup, f *config.File, iopts []grpcadmit.Option) (filesetup.FrontEnd, error) {
		ic, err := grpcadmit.New(s.Controller, append([]grpcadmit.Option{grpcadmit.WithLogger(s.Log)}, iopts...)...)
		if err != nil {
			return nil, err
		}
		fe := &frontEnd{ic: ic}
		if err := fe.Apply(f); err != nil {
			return nil, err
		}
		st.ic = ic
		return fe, nil
	})
	if err != nil {
		return nil, err
	}
	st.s = s
	return st, nil
}

// Interceptor returns the interceptor: its Unary and Stream methods are
// the server's interceptors.
func (s *Setup) Interceptor() *grpcadmit.Interceptor { return s.ic }

// MetricsHandler returns the scrape handler of the file's metrics
// section, to serve at its path on an HTTP listener of the program's;
// nil when the metrics are disabled, served on metrics.listen already,
// or on WithMeterProvider's provider.
func (s *Setup) MetricsHandler() http.Handler { return s.s.MetricsHandler() }

// Controller returns the controller the interceptor admits through.
func (s *Setup) Controller() *admission.Controller { return s.s.Controller }

// Watcher returns the watcher following the file: Current is the file
// in force, Stats counts the reloads.
func (s *Setup) Watcher() *reload.Watcher { return s.s.Watcher }

// Close stops watching the file and the controller's lease keeper,
// closes the metrics listener and the connections to Redis. Stop the
// gRPC server first (GracefulStop).
func (s *Setup) Close() error { return s.s.Close() }

// frontEnd applies the versions of the file to the interceptor.
type frontEnd struct {
	ic *grpcadmit.Interceptor
}

// Apply installs a version of the file: its policies and plans, with its
// identity section and shadow_header, in one step.
func (fe *frontEnd) Apply(f *config.File) error {
	return fe.ic.Apply(f.Config, options(f)...)
}

// options returns the interceptor settings of a file: its identity
// section, with the tenants' key table, and the http section's
// shadow_header.
func options(f *config.File) []grpcadmit.Option {
	id := &f.Identity
	opts := []grpcadmit.Option{
		grpcadmit.WithKeys(apikey.Table(id.Keys)), grpcadmit.WithAnonymousTenant(id.AnonymousTenant),
		grpcadmit.WithShadowHeader(f.HTTP.ShadowHeader),
	}
	if len(id.KeyHeaders) > 0 {
		opts = append(opts, grpcadmit.WithKeyHeaders(id.KeyHeaders...))
	}
	if id.RequireKey {
		opts = append(opts, grpcadmit.WithRequireKey())
	}
	if s := id.Session; s.Headers != nil || s.MaxLength != 0 {
		opts = append(opts, grpcadmit.WithSessions(s.MaxLength, s.Headers...))
	}
	return opts
}
