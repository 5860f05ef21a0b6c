// Package filesetup is what httpadmitfile.FromFile and
// grpcadmitfile.FromFile share: from one policy file, read once, the
// logger of its logging section, the metrics of its metrics section,
// the decision log, the Redis stores of its stores section with the
// observer wired in, the controller, and the watcher that applies the
// file's later versions to the front end (the middleware, the
// interceptor) each package builds. One Close undoes it all.
//
// The file is read, decoded and applied once at start: the watcher's
// first load is the start (reload.Watch hands the first version to the
// subscriber, which builds everything from it), so the first version is
// never applied twice, and the watcher follows from the very bytes the
// program started with.
package filesetup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/shadow"
)

// Settings are FromFile's options; O is the front end's own option type
// (httpadmit.Option, grpcadmit.Option).
type Settings[O any] struct {
	Collaborators
	FrontEnd []O
}

// Collaborators are the options every front end shares.
type Collaborators struct {
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider
	Observers     []admission.Observer
	Clock         admission.Clock
	OnReload      func(reload.Event)
}

// An Option sets one of the Settings.
type Option[O any] func(*Settings[O])

// WithLogger sets Collaborators.Logger.
func WithLogger[O any](l *slog.Logger) Option[O] { return func(s *Settings[O]) { s.Logger = l } }

// WithMeterProvider sets Collaborators.MeterProvider.
func WithMeterProvider[O any](mp metric.MeterProvider) Option[O] {
	return func(s *Settings[O]) { s.MeterProvider = mp }
}

// WithObserver adds to Collaborators.Observers.
func WithObserver[O any](obs admission.Observer) Option[O] {
	return func(s *Settings[O]) { s.Observers = append(s.Observers, obs) }
}

// WithClock sets Collaborators.Clock.
func WithClock[O any](c admission.Clock) Option[O] { return func(s *Settings[O]) { s.Clock = c } }

// OnReload sets Collaborators.OnReload.
func OnReload[O any](fn func(reload.Event)) Option[O] {
	return func(s *Settings[O]) { s.OnReload = fn }
}

// WithFrontEnd adds to Settings.FrontEnd.
func WithFrontEnd[O any](opts ...O) Option[O] {
	return func(s *Settings[O]) { s.FrontEnd = append(s.FrontEnd, opts...) }
}

// A FrontEnd is what a file package builds in front of the controller
// from the first version of the file; Apply installs a later version
// whole (or returns a *reload.PartialError naming what it left out).
type FrontEnd interface {
	Apply(f *config.File) error
}

// Setup is everything FromFile built from the file: each field is nil
// when the file (or an option) asked for none.
type Setup struct {
	// Controller decides the requests.
	Controller *admission.Controller
	// Watcher follows the file.
	Watcher *reload.Watcher
	// Log is the logger: WithLogger's, or the file's logging section's
	// on os.Stderr.
	Log *slog.Logger

	metrics  *metrics.Observer
	prom     *metrics.Prometheus
	exposure metrics.Exposure
	listener *metrics.Listener
	clients  []*redis.Client
	redis    map[string]config.Redis // the stores opened, as the first file declared them
}

// Start reads the policy file at path once, builds the setup from it
// and the front end with build, and watches the file, applying each later
// version to the front end. Errors name the file (and, for the file's
// own mistakes, the line, as config.Parse does).
func Start[O any](ctx context.Context, path string, opts []Option[O], build func(s *Setup, f *config.File, frontEnd []O) (FrontEnd, error)) (*Setup, error) {
	var set Settings[O]
	for _, o := range opts {
		o(&set)
	}
	s := &Setup{}
	// Records of the watcher before the file is read (its refusal of a
	// first version FromFile returns) are dropped: the file says how to log.
	var target atomic.Pointer[slog.Handler]
	var front FrontEnd
	sub := subscriber(func(f *config.File) error {
		if front != nil {
			return s.reapply(front, f)
		}
		var fe FrontEnd
		err := s.open(ctx, f, &set.Collaborators)
		if err == nil {
			fe, err = build(s, f, set.FrontEnd)
		}
		if err != nil {
			return errors.Join(err, s.close())
		}
		front = fe
		h := s.Log.Handler()
		target.Store(&h)
		return nil
	})
	w, err := reload.Watch(path, sub, reload.WithLogger(slog.New(deferred{target: &target})),
		reload.OnReload(func(e reload.Event) {
			s.metrics.CountReload(e.Err)
			if set.OnReload != nil {
				set.OnReload(e)
			}
		}))
	if err != nil {
		if front != nil { // built, then the watch failed
			err = errors.Join(err, s.close())
		}
		return nil, err
	}
	s.Watcher = w
	return s, nil
}

// subscriber is a function as a reload.Subscriber.
type subscriber func(f *config.File) error

// Apply calls fn.
func (fn subscriber) Apply(f *config.File) error { return fn(f) }

// reapply applies a later version of the file to the front end; the
// stores stay those opened at start, and a version declaring others is
// applied without its stores section.
func (s *Setup) reapply(front FrontEnd, f *config.File) error {
	err := front.Apply(f)
	partial := &reload.PartialError{}
	if err != nil && !errors.As(err, &partial) {
		return err
	}
	if maps.Equal(f.Redis, s.redis) {
		return err
	}
	stores := errors.New("the Redis stores are opened at start: restart to apply the stores section")
	if err != nil { // the front end left out a section too
		return &reload.PartialError{Section: partial.Section + " and stores", Err: errors.Join(partial.Err, stores)}
	}
	return &reload.PartialError{Section: "stores", Err: stores}
}

// open builds all but the front end from the first version of the file:
// the logger, the metrics, the observers, the stores and the controller.
func (s *Setup) open(ctx context.Context, f *config.File, c *Collaborators) error {
	s.Log = c.Logger
	if s.Log == nil {
		s.Log = shadow.FileLogger(os.Stderr, &f.Logging)
	}
	if err := s.openMetrics(f, c); err != nil {
		return err
	}
	obs, err := shadow.FileObserver(&f.Logging, s.Log, append([]admission.Observer{s.observer()}, c.Observers...)...)
	if err != nil {
		return err
	}
	opts := []admission.Option{admission.WithObserver(obs), admission.WithLogger(s.Log)}
	if c.Clock != nil {
		opts = append(opts, admission.WithClock(c.Clock))
	}
	stores, err := s.openStores(ctx, f, obs, c.Clock)
	if err != nil {
		return err
	}
	s.Controller, err = admission.New(f.Config, append(opts, stores...)...)
	if err != nil {
		return err
	}
	if s.metrics != nil {
		s.metrics.Watch(s.Controller)
	}
	return nil
}

// observer returns the metrics observer, or nil (an Observer interface
// holding no pointer) without one.
func (s *Setup) observer() admission.Observer {
	if s.metrics == nil {
		return nil
	}
	return s.metrics
}

// openMetrics builds the metrics observer: on WithMeterProvider's
// provider, else on a Prometheus exporter as the file's metrics section
// says (none when it is disabled), served on its own listener when
// metrics.listen is set.
func (s *Setup) openMetrics(f *config.File, c *Collaborators) error {
	mp := c.MeterProvider
	if mp == nil {
		if !f.Metrics.Enabled {
			return nil
		}
		var err error
		if s.prom, err = metrics.NewPrometheus(f.Metrics.CardinalityLimit); err != nil {
			return err
		}
		mp = s.prom.Provider
		s.exposure = metrics.Exposure{Enabled: true, Path: f.Metrics.Path}
		if f.Metrics.Listen != "" {
			if s.listener, err = metrics.Serve(f.Metrics.Listen, f.Metrics.Path, s.prom.Handler, http.NotFoundHandler()); err != nil {
				return fmt.Errorf("metrics.listen: %w", err)
			}
			s.exposure.Enabled = false // served there, not on the application's listener
		}
	}
	mopts := []metrics.Option{metrics.WithMeterProvider(mp), metrics.WithTopK(f.Metrics.TopTenants)}
	if c.Clock != nil {
		mopts = append(mopts, metrics.WithClock(c.Clock))
	}
	var err error
	s.metrics, err = metrics.New(mopts...)
	return err
}

// Expose returns app behind the scrape of the file's metrics section
// when it is served on the application's listener (metrics.listen
// unset), answered ahead of app so that no limit applies to it; app
// itself otherwise.
func (s *Setup) Expose(app http.Handler) http.Handler {
	if !s.exposure.Enabled {
		return app
	}
	h, _, _ := metrics.Expose(s.exposure, s.prom.Handler, app) // no listener: no error
	return h
}

// MetricsHandler returns the scrape handler of the file's metrics
// section, nil when metrics are disabled or go to WithMeterProvider's
// provider.
func (s *Setup) MetricsHandler() http.Handler {
	if s.prom == nil {
		return nil
	}
	return s.prom.Handler
}

// openStores opens the stores the file declares of kind redis, each on a
// client of its own reporting its calls to obs, and checks that every
// store the policies name is one of them.
func (s *Setup) openStores(ctx context.Context, f *config.File, obs admission.Observer, clock admission.Clock) ([]admission.Option, error) {
	if len(f.Upstreams) > 0 {
		name := slices.Sorted(maps.Keys(f.Upstreams))[0]
		return nil, fmt.Errorf("stores.%s: a store of kind upstream guards a provider's limits for the LLM gateway (examples/llmproxy/gateway), which builds it; FromFile opens stores of kind redis", name)
	}
	for _, name := range f.Stores() {
		if _, ok := f.Redis[name]; !ok {
			return nil, fmt.Errorf("policies name the store %q, which the stores section does not declare (stores: {%s: {kind: redis, address: host:port}})", name, name)
		}
	}
	if f.Directory.Source != config.DirectoryFile {
		return nil, fmt.Errorf("directory.source %s: FromFile takes the tenants from the file; a program with a tenant directory opens it itself (admission/directory)", f.Directory.Source)
	}
	var opts []admission.Option
	sopts := []redisstore.Option{redisstore.WithObserver(obs)}
	if clock != nil {
		sopts = append(sopts, redisstore.WithClock(clock))
	}
	for _, name := range slices.Sorted(maps.Keys(f.Redis)) {
		r := f.Redis[name]
		ro, err := redisOptions(r)
		if err != nil {
			return nil, fmt.Errorf("stores.%s: %w", name, err)
		}
		ro.ContextTimeoutEnabled = true
		client := redis.NewClient(ro)
		s.clients = append(s.clients, client)
		st, err := redisstore.New(client, redisstore.Config{Name: name, Prefix: r.Prefix, Timeout: r.Timeout}, sopts...)
		if err != nil {
			return nil, fmt.Errorf("stores.%s: %w", name, err)
		}
		pctx, cancel := context.WithTimeout(ctx, cmp.Or(r.Timeout, redisstore.DefaultTimeout))
		err = client.Ping(pctx).Err()
		cancel()
		if err != nil {
			s.Log.Warn("Redis store unreachable at start; its policies' on_store_error decides until it answers",
				slog.String("file", f.Source), slog.String("store", name), slog.String("address", ro.Addr))
		}
		opts = append(opts, admission.WithStore(name, st))
	}
	s.redis = f.Redis
	return opts, nil
}

// redisOptions returns the client options of a store of kind redis: its
// address, or the one in the variable it names, host:port or a
// redis:// URL. Errors never show a password.
func redisOptions(r config.Redis) (*redis.Options, error) {
	addr, from := r.Address, "address"
	if r.AddressEnv != "" {
		addr, from = os.Getenv(r.AddressEnv), "the variable "+r.AddressEnv
		if addr == "" {
			return nil, fmt.Errorf("address_env: the variable %s is unset or empty", r.AddressEnv)
		}
	}
	if !strings.Contains(addr, "://") {
		if strings.Contains(addr, "@") {
			return nil, fmt.Errorf("%s: %q: credentials need the URL form redis://user:password@host:port", from, config.RedactURL(addr))
		}
		return &redis.Options{Addr: addr}, nil
	}
	// ParseURL's error may hold the URL, or a part of its password.
	ro, err := redis.ParseURL(addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %q is not a Redis URL (redis://user:password@host:port/db)", from, config.RedactURL(addr))
	}
	return ro, nil
}

// Close stops the watcher and the controller's lease keeper, closes the
// metrics listener, the metrics and the Redis clients. The front end
// still answers with the controller (Controller.Close): stop serving
// first.
func (s *Setup) Close() error {
	var err error
	if s.Watcher != nil {
		err = s.Watcher.Close()
	}
	return errors.Join(err, s.close())
}

// close releases what open built.
func (s *Setup) close() error {
	var errs []error
	if s.Controller != nil {
		errs = append(errs, s.Controller.Close())
	}
	if s.listener != nil {
		errs = append(errs, s.listener.Close())
	}
	if s.metrics != nil {
		errs = append(errs, s.metrics.Close())
	}
	if s.prom != nil {
		errs = append(errs, s.prom.Provider.Shutdown(context.Background()))
	}
	for _, c := range s.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// deferred is the watcher's log handler: it passes records to the
// handler of the logger FromFile builds once the file is read, and drops
// those before.
type deferred struct {
	target *atomic.Pointer[slog.Handler]
	with   func(slog.Handler) slog.Handler // WithAttrs and WithGroup, applied to the target
}

func (d deferred) handler() slog.Handler {
	h := d.target.Load()
	if h == nil {
		return nil
	}
	if d.with != nil {
		return d.with(*h)
	}
	return *h
}

func (d deferred) Enabled(ctx context.Context, l slog.Level) bool {
	h := d.handler()
	return h != nil && h.Enabled(ctx, l)
}

func (d deferred) Handle(ctx context.Context, r slog.Record) error {
	if h := d.handler(); h != nil {
		return h.Handle(ctx, r)
	}
	return nil
}

func (d deferred) WithAttrs(as []slog.Attr) slog.Handler {
	return d.then(func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })
}

func (d deferred) WithGroup(name string) slog.Handler {
	return d.then(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}

func (d deferred) then(next func(slog.Handler) slog.Handler) slog.Handler {
	prev := d.with
	return deferred{target: d.target, with: func(h slog.Handler) slog.Handler {
		if prev != nil {
			h = prev(h)
		}
		return next(h)
	}}
}
