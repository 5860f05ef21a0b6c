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
// A later version of the file installs its policies, plans and key table;
// the interceptor's other settings are fixed when it is built, so a
// version that changes key_headers, anonymous or shadow_header is
// applied without its identity section (a *reload.PartialError the
// watcher reports). The key table and the policies are two swaps: a call
// decided between them sees the new keys with the old policies.
package grpcadmitfile

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

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
		fe := &frontEnd{ctl: s.Controller, fixed: fixedOf(f)}
		fe.keys.Store(keyTable(f))
		id := &f.Identity
		base := []grpcadmit.Option{
			grpcadmit.WithKeys(fe), grpcadmit.WithAnonymousTenant(id.AnonymousTenant),
			grpcadmit.WithShadowHeader(f.HTTP.ShadowHeader), grpcadmit.WithLogger(s.Log),
		}
		if len(id.KeyHeaders) > 0 {
			base = append(base, grpcadmit.WithKeyHeaders(id.KeyHeaders...))
		}
		if id.RequireKey {
			base = append(base, grpcadmit.WithRequireKey())
		}
		var err error
		st.ic, err = grpcadmit.New(s.Controller, append(base, iopts...)...)
		return fe, err
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

// frontEnd applies later versions of the file to the interceptor: the
// policies to the controller, the key table to its lookup.
type frontEnd struct {
	ctl   *admission.Controller
	keys  atomic.Pointer[apikey.Table]
	fixed fixed
}

// fixed are the settings of the interceptor a reload cannot change.
type fixed struct {
	keyHeaders       string
	anonymous        string
	requireKey, show bool
}

func fixedOf(f *config.File) fixed {
	id := &f.Identity
	return fixed{keyHeaders: strings.Join(id.KeyHeaders, "\n"), anonymous: id.AnonymousTenant, requireKey: id.RequireKey, show: f.HTTP.ShadowHeader}
}

// keyTable returns the identity section's key table.
func keyTable(f *config.File) *apikey.Table {
	t := apikey.Table(f.Identity.Keys)
	return &t
}

// Lookup looks key up in the key table in force.
func (fe *frontEnd) Lookup(key string) (apikey.Identity, bool) { return fe.keys.Load().Lookup(key) }

// Apply installs a later version of the file: its policies and plans,
// then its key table; a version whose other identity settings differ
// from the first is applied without them (a *reload.PartialError).
func (fe *frontEnd) Apply(f *config.File) error {
	set, err := fe.ctl.Compile(f.Config)
	if err != nil {
		return err
	}
	if err := fe.ctl.Install(set); err != nil {
		return err
	}
	fe.keys.Store(keyTable(f))
	if fixedOf(f) != fe.fixed {
		return &reload.PartialError{Section: "identity", Err: errors.New("key_headers, anonymous and http.shadow_header are set when the gRPC interceptor is built: restart to apply them")}
	}
	return nil
}
