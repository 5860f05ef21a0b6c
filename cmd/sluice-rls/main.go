// Command sluice-rls is Sluice as the rate limit service of an Envoy
// fleet: it serves envoy.service.ratelimit.v3.RateLimitService over gRPC
// (with grpc.health.v1 and server reflection) from envoyproxy/ratelimit
// configuration files, reloaded when they change and on SIGHUP, and
// serves Prometheus metrics and a health check on an operator listener.
//
// Usage:
//
//	sluice-rls -config DIR_OR_FILE [-listen :8081] [-operator :6070] [-redis host:port [-redis-timeout 500ms]] [-shadow] [-max-concurrent-streams 1000]
//
// Several replicas given the same -redis enforce one limit for the fleet:
// with -redis every domain keeps its limits in Redis unless its file says
// store: memory, so that envoyproxy/ratelimit's files, unchanged, give one
// fleet-wide limit. A decision made without the store (its on_store_error
// open, closed or local) is counted in admission_decisions_total and
// logged, at most 10 records a second (shadow's decision log, which also
// logs shadow limits' would-reject decisions). SIGTERM or SIGINT stops
// it gracefully: health turns NOT_SERVING, calls in flight finish (within
// -shutdown-timeout), then the process exits. Exit status: 0 after a
// clean stop, 1 when it could not start, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls"
	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/shadow"
)

// DefaultMaxConcurrentStreams is the default of -max-concurrent-streams:
// the calls one connection may have open at once. Envoy opens another
// connection when it needs more; a client that opens streams and never
// sends their request holds no more than this many calls per connection.
const DefaultMaxConcurrentStreams = 1000

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr, nil))
}

// options are the command line's settings.
type options struct {
	config, listen, operator, redis string
	shadow                          bool
	unknownDomain                   string
	maxPending                      int
	maxStreams                      uint
	pendingTTL, shutdownTimeout     time.Duration
	redisTimeout                    time.Duration
}

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("sluice-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.StringVar(&o.config, "config", "", "envoyproxy/ratelimit configuration: a YAML file, or a directory of *.yaml files (required)")
	fs.StringVar(&o.listen, "listen", ":8081", "gRPC address of the rate limit service")
	fs.StringVar(&o.operator, "operator", ":6070", "operator address: /metrics (Prometheus) and /healthz; empty disables it")
	fs.StringVar(&o.redis, "redis", "", "Redis address (host:port) of the store every domain keeps its limits in unless its file says store: memory; empty: each replica's memory")
	fs.DurationVar(&o.redisTimeout, "redis-timeout", redisstore.DefaultTimeout, "longest wait for Redis's answer to a call; a slower one fails and the limit answers by its on_store_error")
	fs.BoolVar(&o.shadow, "shadow", false, "run every limit in shadow mode (answer OK, count would-rejects)")
	fs.StringVar(&o.unknownDomain, "unknown-domain", "ok", "answer for a domain no file declares: ok or over_limit")
	fs.IntVar(&o.maxPending, "max-pending", envoyrls.DefaultMaxPending, "most request-phase estimates held for reconciliation")
	fs.DurationVar(&o.pendingTTL, "pending-ttl", envoyrls.DefaultPendingTTL, "longest an estimate waits for its response-phase actual")
	fs.UintVar(&o.maxStreams, "max-concurrent-streams", DefaultMaxConcurrentStreams, "most calls one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "longest graceful stop before calls in flight are cut")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.config == "":
		return nil, errors.New("-config is required")
	case o.maxStreams == 0 || o.maxStreams > math.MaxUint32:
		return nil, fmt.Errorf("-max-concurrent-streams must be between 1 and %d, got %d", uint32(math.MaxUint32), o.maxStreams)
	case o.unknownDomain != "ok" && o.unknownDomain != "over_limit":
		return nil, fmt.Errorf("-unknown-domain must be ok or over_limit, got %q", o.unknownDomain)
	}
	return o, nil
}

// ready, when not nil, is told the listeners' addresses once they serve.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(grpcAddr, operatorAddr string)) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice-rls:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	if err := serve(ctx, o, log, ready); err != nil {
		log.Error("sluice-rls stopped", slog.String("error", err.Error()))
		return 1
	}
	return 0
}

// unknownCode is the answer -unknown-domain names.
func unknownCode(s string) rlsconfig.Code {
	if s == "over_limit" {
		return rlsconfig.OverLimit
	}
	return rlsconfig.OK
}

func serve(ctx context.Context, o *options, log *slog.Logger, ready func(string, string)) error {
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		return err
	}
	defer prom.Provider.Shutdown(context.Background())
	mo, err := metrics.New(metrics.WithMeterProvider(prom.Provider))
	if err != nil {
		return err
	}
	defer mo.Close()
	// Decisions made without the store, and shadow limits' would-reject
	// decisions, are logged at a bounded rate beside the metrics.
	dlog, err := shadow.NewLog(shadow.LogConfig{}, shadow.WithLogger(log))
	if err != nil {
		return err
	}
	ctlOpts := []admission.Option{admission.WithObserver(shadow.Join(dlog, mo))}
	srvOpts := []envoyrls.Option{envoyrls.WithUnknownDomain(unknownCode(o.unknownDomain)), envoyrls.WithPending(o.maxPending, o.pendingTTL)}
	if o.redis != "" {
		srvOpts = append(srvOpts, envoyrls.WithDefaultStore("redis"))
		client := redis.NewClient(&redis.Options{Addr: o.redis, ContextTimeoutEnabled: true})
		defer client.Close()
		store, err := redisstore.New(client, redisstore.Config{Name: "redis", Timeout: o.redisTimeout}, redisstore.WithObserver(mo))
		if err != nil {
			return err
		}
		ctlOpts = append(ctlOpts, admission.WithStore("redis", store))
	}
	ctl, err := admission.New(admission.Config{}, ctlOpts...)
	if err != nil {
		return err
	}
	ctl.SetAllShadow(o.shadow)
	mo.Watch(ctl)
	srv, err := envoyrls.New(ctl, &rlsconfig.Config{}, srvOpts...)
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := registerStats(prom.Registry, srv); err != nil {
		return err
	}
	w, err := envoyrls.Watch(o.config, srv, reload.WithLogger(log), reload.OnReload(func(r reload.Event) { mo.CountReload(r.Err) }))
	if err != nil {
		return err
	}
	defer w.Close()

	g, health := envoyrls.NewGRPCServer(srv,
		grpc.MaxRecvMsgSize(1<<20),
		grpc.MaxConcurrentStreams(uint32(o.maxStreams)),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute}),
	)
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- g.Serve(lis) }()

	opAddr := ""
	var op *http.Server
	if o.operator != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", prom.Handler)
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
		opLis, err := net.Listen("tcp", o.operator)
		if err != nil {
			g.Stop()
			return err
		}
		opAddr = opLis.Addr().String()
		op = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
		go func() {
			if err := op.Serve(opLis); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	log.Info("sluice-rls serving", slog.String("grpc", lis.Addr().String()), slog.String("operator", opAddr))
	if ready != nil {
		ready(lis.Addr().String(), opAddr)
	}

	select {
	case <-ctx.Done():
	case err := <-errc:
		g.Stop()
		return err
	}
	log.Info("sluice-rls stopping")
	health.Shutdown() // NOT_SERVING: Envoy's health checks move away first
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(o.shutdownTimeout):
		g.Stop()
	}
	if op != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = op.Shutdown(sctx)
	}
	return nil
}
