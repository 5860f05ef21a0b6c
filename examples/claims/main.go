// Command claims is an insurance-claims API on plain net/http behind
// Sluice, configured by a policy file: a token bucket of 20 refilling 5 a
// second on POST per tenant, a sliding window of 100 a minute on GET per
// tenant, 2 exports in flight per tenant with 5 more waiting, /healthz
// never limited, and callers identified by API keys whose SHA-256 hashes
// the file holds. The file's metrics section serves /metrics on the API
// listener, ahead of the limits; its logging section writes every
// rejection to stderr as JSON.
//
//	go run ./examples/claims                                  # listen on 127.0.0.1:8081
//	go run ./examples/claims -exercise                        # tenant A bursts, tenant B trickles
//	go run ./examples/claims -exercise -config examples/claims/global.yaml
//
// See README.md for the walk-through.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/shadow"
)

// defaultPolicy is the policy file used when -config is not given.
//
//go:embed policy.yaml
var defaultPolicy []byte

// Demo API keys of the tenants of policy.yaml and global.yaml, which hold
// only their hashes.
const (
	KeyA = "sk-claims-a" // tenant-a
	KeyB = "sk-claims-b" // tenant-b
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "claims:", err)
		}
		os.Exit(1)
	}
}

// options are the command-line settings and the test hooks.
type options struct {
	addr       string
	configPath string
	exercise   bool
	seconds    int

	// Test hooks.
	clock      admission.Clock
	logOutput  io.Writer
	exportHold func(ctx context.Context) // called by every export before it writes
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("claims", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8081", "address to listen on")
	fs.StringVar(&o.configPath, "config", "", "policy file (reloaded on change and on SIGHUP); empty uses the embedded policy.yaml")
	fs.BoolVar(&o.exercise, "exercise", false, "listen on a free loopback port, run the exercise (tenant A bursts 50 claims every second, tenant B files one a second) against it in real time, print the counts and exit")
	fs.IntVar(&o.seconds, "seconds", 10, "length of the exercise in seconds (1 to 60)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.seconds < 1 || o.seconds > 60 {
		return o, fmt.Errorf("-seconds: %d is not between 1 and 60", o.seconds)
	}
	return o, nil
}

// run serves until ctx ends, or runs the exercise.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	o.logOutput = stderr
	if o.exercise {
		return runExercise(ctx, o, stdout)
	}
	s, err := start(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "claims: listening on %s; policy %s\n", s.URL, s.file.Source)
	fmt.Fprintf(stdout, "claims: try: curl -i -X POST %s/claims -H 'Authorization: Bearer %s' -d '{\"policy_number\":\"P-1\",\"amount_cents\":12000}'\n", s.URL, KeyA)
	fmt.Fprintf(stdout, "claims: health at %s/healthz\n", s.URL)
	if s.MetricsURL != "" {
		fmt.Fprintf(stdout, "claims: metrics at %s\n", s.MetricsURL)
	}
	select {
	case <-ctx.Done():
	case err := <-s.serveErr:
		s.close()
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.shutdown(sctx)
}

// server is a running claims API.
type server struct {
	URL        string // http://host:port of the API
	MetricsURL string // where the metrics are scraped; empty when disabled
	file       *config.File
	ctl        *admission.Controller
	mw         *httpadmit.Middleware
	prom       *metrics.Prometheus
	metrics    *metrics.Observer
	metricsLn  *metrics.Listener
	watcher    *reload.Watcher
	srv        *http.Server
	serveErr   chan error
}

// start builds the service and starts serving; it returns once the
// listener is open.
func start(o options) (_ *server, err error) {
	s := &server{serveErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if o.configPath != "" {
		s.file, err = config.Load(o.configPath)
	} else {
		s.file, err = config.Parse("policy.yaml (embedded)", defaultPolicy)
	}
	if err != nil {
		return nil, err
	}
	f := s.file
	clock := o.clock
	if clock == nil {
		clock = admission.SystemClock{}
	}
	out := o.logOutput
	if out == nil {
		out = io.Discard
	}

	// The logging and metrics sections: a logger, the metrics observer on
	// a Prometheus registry (unless metrics.enabled is false), and the
	// decision log in front of it.
	log := shadow.FileLogger(out, &f.Logging)
	var scrape http.Handler
	var observers []admission.Observer
	if f.Metrics.Enabled {
		if s.prom, err = metrics.NewPrometheus(f.Metrics.CardinalityLimit); err != nil {
			return nil, err
		}
		s.metrics, err = metrics.New(metrics.WithMeterProvider(s.prom.Provider),
			metrics.WithTopK(f.Metrics.TopTenants), metrics.WithClock(clock))
		if err != nil {
			return nil, err
		}
		scrape, observers = s.prom.Handler, append(observers, s.metrics)
	}
	obs, err := shadow.FileObserver(&f.Logging, log, observers...)
	if err != nil {
		return nil, err
	}
	s.ctl, err = admission.New(f.Config, admission.WithObserver(obs), admission.WithClock(clock))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Source, err)
	}
	if s.metrics != nil {
		s.metrics.Watch(s.ctl)
	}

	// The API and its limits. WithRoutes names each request's operation
	// after the pattern the mux routes it to, as the policies' routes do.
	mux := http.NewServeMux()
	s.mw, err = httpadmit.New(s.ctl, append(httpadmitfile.Options(f), httpadmit.WithRoutes(mux), httpadmit.WithLogger(log))...)
	if err != nil {
		return nil, err
	}
	api := &api{claims: newStore(clock), identity: func() *httpadmit.IdentityConfig { return s.mw.Snapshot().Identity() }, exportHold: o.exportHold}
	api.register(mux)
	h, ml, err := metrics.Expose(metrics.Exposure{Enabled: f.Metrics.Enabled, Path: f.Metrics.Path, Listen: f.Metrics.Listen}, scrape, s.mw.Handler(mux))
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	s.metricsLn = ml

	if o.configPath != "" {
		// A reload applies the policies, tenants, identity and http
		// sections at once (the middleware is the subscriber); logging and
		// metrics are read at start.
		s.watcher, err = reload.Watch(o.configPath, httpadmitfile.Middleware{Middleware: s.mw}, reload.WithLogger(log), reload.OnReload(func(r reload.Event) { s.metrics.CountReload(r.Err) }))
		if err != nil {
			return nil, err
		}
	}

	addr := o.addr
	if o.exercise {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s.URL = "http://" + ln.Addr().String()
	switch {
	case ml != nil:
		s.MetricsURL = "http://" + ml.Addr() + f.Metrics.Path
	case f.Metrics.Enabled:
		s.MetricsURL = s.URL + f.Metrics.Path
	}
	s.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.serveErr <- err
		}
	}()
	return s, nil
}

// shutdown stops accepting, waits for requests in flight up to ctx's
// deadline, then releases the rest.
func (s *server) shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	s.close()
	return err
}

// close releases everything start built, without waiting.
func (s *server) close() {
	if s.srv != nil {
		_ = s.srv.Close()
	}
	if s.watcher != nil {
		_ = s.watcher.Close()
	}
	if s.metricsLn != nil {
		_ = s.metricsLn.Close()
	}
	if s.metrics != nil {
		_ = s.metrics.Close()
	}
	if s.prom != nil {
		_ = s.prom.Provider.Shutdown(context.Background())
	}
}
