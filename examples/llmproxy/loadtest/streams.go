package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/weights"
)

// The streams scenario (-streams) measures what an open stream costs the
// gateway: N chat completions streaming at once (stream: true) from the
// simulated upstream at a slow token rate, through the gateway and, in the
// same run, through an httputil.ReverseProxy with the same transport.
//
// Each proxy runs in a process of its own, and so does the upstream, so
// the proxy's figures are its own: the memory per open stream (live heap
// plus goroutine stacks, after a collection, at the plateau with all N
// streams open, minus the same figure before the streams) and the CPU
// per streamed chunk (the process's user and system time over an interval
// with all N streams open, over the chunks the clients received in it).
// After the streams end, the proxy's goroutines must be back to their
// count before the streams and, for the gateway, its concurrency permits
// back to zero.
//
// A process may hold as many sockets as RLIMIT_NOFILE allows (raised to its
// hard limit here): a proxy holds one per client and, over HTTP/1.1, one per
// upstream stream. The upstream leg speaks HTTP/2 without TLS by default (as
// a provider's API does over TLS: a few connections carry every stream);
// -streams-upstream http1 gives each stream its own upstream connection.

// streamsSetup is one streams scenario.
type streamsSetup struct {
	// Streams is the number of streams open at once.
	Streams int
	// Rate is each stream's tokens per second, one token per chunk.
	Rate float64
	// Hold is the measured interval with every stream open.
	Hold time.Duration
	// Rounds is the number of runs per proxy, alternating.
	Rounds int
	// HTTP1 gives each upstream stream its own HTTP/1.1 connection; else
	// the upstream leg is HTTP/2 without TLS.
	HTTP1 bool
	// Opening bounds the streams being opened at once.
	Opening int
	// OpenWithin is the time allowed to open every stream; zero means 5 s
	// plus 2 ms per stream.
	OpenWithin time.Duration
	// Profiles, when not empty, is a directory where each run writes its
	// proxy's profiles: the CPU over the measured interval (whose figures
	// it then inflates), the heap at its start (heap-start) and at the
	// plateau (heap; the difference of their allocations is the
	// interval's), the goroutines at the plateau.
	Profiles string
}

var (
	streamsMode = flag.Bool("streams", false, "run the streams scenario instead: -streams-n concurrent streamed chat completions through the gateway and through httputil.ReverseProxy, each proxy in its own process; prints memory per open stream and CPU per chunk; 5 rounds unless -rounds is given")
	streamsN    = flag.Int("streams-n", 10_000, "streams scenario: streams open at once")
	streamsRate = flag.Float64("streams-rate", 1, "streams scenario: tokens (chunks) per second per stream")
	streamsHold = flag.Duration("streams-hold", 5*time.Second, "streams scenario: measured interval with every stream open")
	streamsUp   = flag.String("streams-upstream", "h2c", "streams scenario: the upstream leg, h2c (HTTP/2 without TLS) or http1 (one connection per stream)")
	streamsProf = flag.String("streams-profile", "", "streams scenario: a directory to write each proxy's CPU profile over the measured interval, its heap and goroutine profiles at the plateau (profiling inflates the CPU figures)")
	streamsChk  = flag.Bool("streams-check", false, "streams scenario: exit 1 unless the gateway holds at most 64 KiB per open stream and 1.2x the reverse proxy's CPU per chunk (medians), and every run ends with no permit held and its goroutines back to their baseline")
)

// Bounds the check mode asserts.
const (
	maxStreamBytes = 64 << 10
	maxCPURatio    = 1.2
)

// streamRounds is the rounds of the streams scenario unless -rounds is
// given: the CPU per chunk of runs a few seconds apart moves by a tenth
// and more on a shared machine, and the check takes the median ratio.
const streamRounds = 5

// runStreamsFlags runs the scenario the flags describe, when -streams is
// set; it reports whether it did, and the exit code.
func runStreamsFlags(rounds int) (bool, int) {
	if !*streamsMode {
		return false, 0
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rounds" })
	if !set {
		rounds = streamRounds
	}
	s := streamsSetup{Streams: *streamsN, Rate: *streamsRate, Hold: *streamsHold, Rounds: rounds, HTTP1: *streamsUp == "http1", Opening: 256, Profiles: *streamsProf}
	if s.Streams < 1 || s.Streams > 50_000 || s.Rate <= 0 || s.Rate > 100 || s.Hold <= 0 || s.Hold > time.Minute ||
		s.Rounds < 1 || s.Rounds > 10 || (*streamsUp != "h2c" && *streamsUp != "http1") {
		fmt.Fprintln(os.Stderr, "loadtest: -streams-n must be in 1..50000, -streams-rate in (0, 100], -streams-hold in (0, 1m], -rounds in 1..10, -streams-upstream h2c or http1")
		return true, 2
	}
	sum, err := runStreamRounds(s, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		return true, 1
	}
	if *streamsChk {
		if err := sum.check(); err != nil {
			fmt.Fprintln(os.Stderr, "loadtest: check failed:", err)
			return true, 1
		}
		fmt.Println("check passed")
	}
	return true, 0
}

// Child processes: the environment names the role, the upstream's URL
// and the protocol of the upstream leg.
const (
	childEnv      = "LOADTEST_STREAMS_CHILD"
	childUpEnv    = "LOADTEST_STREAMS_UPSTREAM"
	childHTTP1Env = "LOADTEST_STREAMS_HTTP1"
	childRateEnv  = "LOADTEST_STREAMS_RATE"
)

// Child roles.
const (
	roleUpstream = "upstream"
	roleRP       = "httputil.ReverseProxy"
	roleGateway  = "llmproxy gateway"
)

// serveStreamsChild serves a child role when the environment names one,
// until its standard input closes; it reports whether it did.
func serveStreamsChild() bool {
	role := os.Getenv(childEnv)
	if role == "" {
		return false
	}
	if err := serveChild(role); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest child:", err)
		os.Exit(1)
	}
	return true
}

// childStats is what a child reports of itself.
type childStats struct {
	Goroutines uint64 `json:"goroutines"`
	// Heap is the bytes of heap objects and Stacks those of goroutine
	// stacks: after a collection (?gc=1), the live heap and the stacks.
	Heap   uint64 `json:"heap"`
	Stacks uint64 `json:"stacks"`
	// Mapped is the memory the runtime holds from the system, less what it
	// gave back.
	Mapped uint64 `json:"mapped"`
	// CPU is the process's user and system time, in nanoseconds.
	CPU int64 `json:"cpu"`
	// InFlight is the cost the gateway's concurrency permits hold; zero for
	// the reverse proxy.
	InFlight int64 `json:"inflight"`
	// Reads and Writes count the process's read and write system calls.
	Reads  int64 `json:"reads"`
	Writes int64 `json:"writes"`
	// GCs counts the collections, Allocated the bytes allocated.
	GCs       uint64 `json:"gcs"`
	Allocated uint64 `json:"allocated"`
}

// live is the memory an open stream's share is taken from.
func (s childStats) live() uint64 { return s.Heap + s.Stacks }

func serveChild(role string) error {
	raiseFileLimit()
	h1 := os.Getenv(childHTTP1Env) == "1"
	var h http.Handler
	var tr *http.Transport
	var ctl *admission.Controller
	finish := func() {}
	switch role {
	case roleUpstream:
		rate, err := strconv.ParseFloat(os.Getenv(childRateEnv), 64)
		if err != nil {
			return err
		}
		sim := upstream.New(upstream.Config{TokensPerSecond: rate, OutputTokens: 1 << 20})
		h, finish = sim, sim.FinishStreams
	case roleProvider:
		var err error
		if h, err = providerChild(); err != nil {
			return err
		}
	case roleRP, roleGateway:
		upURL := os.Getenv(childUpEnv)
		base, err := url.Parse(upURL)
		if err != nil {
			return err
		}
		tr = gateway.NewTransport()
		tr.MaxIdleConnsPerHost = 0 // the default, two: streams end together, and their connections close
		if !h1 {
			tr.Protocols = new(http.Protocols)
			tr.Protocols.SetUnencryptedHTTP2(true)
		}
		if role == roleRP {
			h = &httputil.ReverseProxy{
				Rewrite: func(r *httputil.ProxyRequest) {
					r.Out.URL.Scheme, r.Out.URL.Host = base.Scheme, base.Host
					r.Out.URL.Path = base.Path + strings.TrimPrefix(r.In.URL.Path, "/v1")
					r.Out.Host = base.Host
				},
				Transport: tr,
			}
		} else if h, ctl, err = newGateway(upURL, tr); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	if role == roleUpstream && !h1 {
		srv.Protocols.SetUnencryptedHTTP2(true)
		// Every stream on one connection: when requests fill a
		// connection's streams, Go's transport sometimes queues new ones
		// on it, where they wait for a stream to end, instead of dialling
		// another.
		srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 100_000}
	}
	go func() { _ = srv.Serve(ln) }()
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("idle") == "1" && tr != nil {
			tr.CloseIdleConnections()
		}
		if r.URL.Query().Get("gc") == "1" {
			runtime.GC()
		}
		_ = json.NewEncoder(w).Encode(readStats(ctl))
	})
	mux.HandleFunc("/finish", func(http.ResponseWriter, *http.Request) { finish() })
	// The profiles, to see where a proxy's memory and CPU per stream go.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	stats := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = stats.Serve(sln) }()
	fmt.Printf("%s %s\n", ln.Addr(), sln.Addr())
	// The parent holds our standard input: when it closes, we are done.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// readStats reads the process's figures.
func readStats(ctl *admission.Controller) childStats {
	samples := []rtmetrics.Sample{
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/allocs:bytes"},
	}
	rtmetrics.Read(samples)
	s := childStats{
		Goroutines: samples[0].Value.Uint64(), Heap: samples[1].Value.Uint64(), Stacks: samples[2].Value.Uint64(),
		Mapped: samples[3].Value.Uint64() - samples[4].Value.Uint64(), CPU: int64(processCPU()),
	}
	s.Reads, s.Writes = processIO()
	s.GCs, s.Allocated = samples[5].Value.Uint64(), samples[6].Value.Uint64()
	if ctl != nil {
		for _, p := range ctl.Stats() {
			s.InFlight += p.InFlight
		}
	}
	return s
}

// newGateway builds the gateway with the load test's policy, as
// llmproxy runs it, on transport tr, and returns its controller.
func newGateway(upURL string, tr http.RoundTripper) (http.Handler, *admission.Controller, error) {
	f, err := config.Parse("loadtest policy", []byte(policy))
	if err != nil {
		return nil, nil, err
	}
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		return nil, nil, err
	}
	obs, err := metrics.New(metrics.WithMeterProvider(prom.Provider))
	if err != nil {
		return nil, nil, err
	}
	ctl, err := admission.New(f.Config, admission.WithObserver(obs))
	if err != nil {
		return nil, nil, err
	}
	obs.Watch(ctl)
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		return nil, nil, err
	}
	gw, err := gateway.New(ctl, est, f, gateway.Config{
		Upstream: upURL,
	}, gateway.WithTransport(tr), gateway.WithMeterProvider(prom.Provider), gateway.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return nil, nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	gw.Register(e)
	return e, ctl, nil
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.Closer
	addr  string // its server's address
	stats string // its stats server's address
}

// startChild starts this program in role, with env added.
func startChild(role string, env ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	setDeathSignal(cmd)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: in}
	line, err := bufio.NewReader(out).ReadString('\n')
	if f := strings.Fields(line); err == nil && len(f) == 2 {
		c.addr, c.stats = f[0], f[1]
		return c, nil
	}
	c.stop()
	return nil, fmt.Errorf("%s did not start: %v", role, err)
}

// stop ends the child: its standard input closes, and it is killed if it
// has not exited a second later.
func (c *child) stop() {
	endProcess(c.cmd, func() { _ = c.stdin.Close() }, time.Second)
}

// statsClient keeps no connection open: a child counts its goroutines
// the same way at every read.
var statsClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// profileClient fetches profiles, a CPU profile lasting the whole
// measured interval (up to a minute).
var profileClient = &http.Client{Timeout: 2 * time.Minute, Transport: statsClient.Transport}

// read asks the child for its figures; gc collects first, idle closes the
// proxy's idle upstream connections first.
func (c *child) read(gc, idle bool) (childStats, error) {
	q := url.Values{}
	if gc {
		q.Set("gc", "1")
	}
	if idle {
		q.Set("idle", "1")
	}
	resp, err := statsClient.Get("http://" + c.stats + "/stats?" + q.Encode())
	if err != nil {
		return childStats{}, err
	}
	defer resp.Body.Close()
	var s childStats
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&s)
	return s, err
}

// profile writes the child's profile at path (under /debug/pprof/) to
// dir, named after role, round and name.
func (c *child) profile(dir, role string, round int, path, name string) {
	resp, err := profileClient.Get("http://" + c.stats + "/debug/pprof/" + path)
	if err == nil {
		defer resp.Body.Close()
		file := filepath.Join(dir, fmt.Sprintf("%s-%d-%s", strings.Fields(role)[len(strings.Fields(role))-1], round, name))
		var f *os.File
		if f, err = os.Create(file); err == nil {
			_, err = io.Copy(f, resp.Body)
			err = errors.Join(err, f.Close())
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest: profile:", err)
	}
}

// finish has the upstream child end every stream.
func (c *child) finish() error {
	resp, err := statsClient.Get("http://" + c.stats + "/finish")
	if err == nil {
		err = resp.Body.Close()
	}
	return err
}

// settled waits, up to 5 s, for the child's goroutines to fall back to
// at most base and its permits to zero, and returns its last figures.
func (c *child) settled(base uint64) (childStats, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := c.read(true, true)
		if err != nil || (s.Goroutines <= base && s.InFlight == 0) || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// streamRun is one proxy's run.
type streamRun struct {
	Proxy string
	// PerStream is the live memory per open stream, in bytes; MappedPerStream
	// the memory taken from the system per open stream.
	PerStream, MappedPerStream float64
	// StackPerStream is the part of PerStream in goroutine stacks.
	StackPerStream float64
	// GoroutinesPerStream is the goroutines per open stream.
	GoroutinesPerStream float64
	// CPUPerChunk is the CPU time per chunk delivered, in nanoseconds;
	// ReadsPerChunk and WritesPerChunk the system calls.
	CPUPerChunk, ReadsPerChunk, WritesPerChunk float64
	// AllocPerChunk is the bytes allocated per chunk, GCs the collections
	// in the measured interval.
	AllocPerChunk float64
	GCs           uint64
	// Chunks is the number of chunks delivered in the measured interval.
	Chunks int64
	// Open is the time it took to open every stream.
	Open time.Duration
	// PeakInFlight is the cost the permits held at the plateau; InFlight
	// and Goroutines what was held after the streams ended, beside
	// BaseGoroutines before they started.
	PeakInFlight, InFlight     int64
	Goroutines, BaseGoroutines uint64
	// Failed counts streams that did not deliver every chunk and [DONE].
	Failed int64
}

func (r streamRun) String() string {
	return fmt.Sprintf("%-22s  %6.1f KiB/stream live (%5.1f KiB in stacks; %6.1f KiB mapped)  %4.2f goroutines/stream  %6.2f µs CPU/chunk (%.2f reads, %.2f writes, %.0f B allocated, %d GCs)  (%d chunks measured, opened in %v, %d failed, permits %d at plateau → %d, goroutines %d → %d)",
		r.Proxy, r.PerStream/1024, r.StackPerStream/1024, r.MappedPerStream/1024, r.GoroutinesPerStream, r.CPUPerChunk/1e3, r.ReadsPerChunk, r.WritesPerChunk, r.AllocPerChunk, r.GCs, r.Chunks,
		r.Open.Round(time.Millisecond), r.Failed, r.PeakInFlight, r.InFlight, r.BaseGoroutines, r.Goroutines)
}

// streamPrompt is the user message of every stream.
const streamPrompt = "Tell me a long story about a gateway that admits each request against its tenant's limits."

// runStreams runs one proxy over the scenario.
func runStreams(s streamsSetup, role string, round int) (streamRun, error) {
	r := streamRun{Proxy: role}
	h1 := "0"
	if s.HTTP1 {
		h1 = "1"
	}
	up, err := startChild(roleUpstream, childRateEnv+"="+strconv.FormatFloat(s.Rate, 'g', -1, 64), childHTTP1Env+"="+h1)
	if err != nil {
		return r, err
	}
	defer up.stop()
	px, err := startChild(role, childUpEnv+"=http://"+up.addr+"/v1", childHTTP1Env+"="+h1)
	if err != nil {
		return r, err
	}
	defer px.stop()
	target := "http://" + px.addr + "/v1/chat/completions"
	// The clients' connections come from 16 loopback addresses in turn:
	// each has its own ephemeral ports, so rounds that follow one another
	// (each leaving its closed connections in TIME_WAIT for a minute) do
	// not run out of them.
	var dials atomic.Uint32
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: s.Streams, IdleConnTimeout: time.Minute, DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+dials.Add(1)%16))}
			return (&net.Dialer{Timeout: 10 * time.Second, LocalAddr: local}).DialContext(ctx, network, addr)
		},
	}}
	defer client.CloseIdleConnections()

	// Warm up: a few short streams, so the baseline holds what the first
	// requests set up once.
	var tally streamTally
	warm := min(s.Streams, 16)
	var wg sync.WaitGroup
	for range warm {
		wg.Go(func() { tally.stream(context.Background(), client, target, 2, nil) })
	}
	wg.Wait()
	if tally.failed.Load() > 0 {
		return r, fmt.Errorf("%s: %d of %d warm-up streams failed: %s", role, tally.failed.Load(), warm, tally.firstErr())
	}
	// The proxy may still be reading the end of an upstream answer its
	// client has read to [DONE]: closing the client's connections now
	// would cancel it.
	time.Sleep(100 * time.Millisecond)
	client.CloseIdleConnections()
	base, err := px.settled(math.MaxUint64)
	if err != nil {
		return r, err
	}
	r.BaseGoroutines = base.Goroutines

	// Every stream could outlast the run; the upstream ends them all
	// (finish chunk, usage, [DONE]) once the figures are taken.
	openBudget := s.OpenWithin
	if openBudget <= 0 {
		openBudget = 5*time.Second + 2*time.Duration(s.Streams)*time.Millisecond
	}
	longest := openBudget + s.Hold + 30*time.Second
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), longest+30*time.Second)
	defer cancel()
	tally = streamTally{}
	var opened sync.WaitGroup
	opened.Add(s.Streams)
	sem := make(chan struct{}, s.Opening)
	var all sync.WaitGroup
	for range s.Streams {
		sem <- struct{}{}
		tokens := int(longest.Seconds() * s.Rate)
		all.Go(func() {
			tally.stream(ctx, client, target, tokens, func() { <-sem; opened.Done() })
		})
	}
	waitOpen := make(chan struct{})
	go func() { opened.Wait(); close(waitOpen) }()
	select {
	case <-waitOpen:
	case <-time.After(time.Until(start.Add(openBudget))):
		if s.Profiles != "" {
			px.profile(s.Profiles, role, round, "goroutine?debug=1", "goroutine-stuck.txt")
		}
		return r, fmt.Errorf("%s: %d of %d streams open after %v (%d failed: %s)", role, tally.open.Load(), s.Streams, openBudget, tally.failed.Load(), tally.firstErr())
	}
	r.Open = time.Since(start)
	if n := tally.open.Load(); n != int64(s.Streams) {
		return r, fmt.Errorf("%s: %d of %d streams opened (%s)", role, n, s.Streams, tally.firstErr())
	}
	time.Sleep(time.Second / 2)
	c0 := tally.chunks.Load()
	s0, err := px.read(false, false)
	if err != nil {
		return r, err
	}
	var profiled sync.WaitGroup
	if s.Profiles != "" {
		px.profile(s.Profiles, role, round, "heap", "heap-start")
		profiled.Go(func() {
			px.profile(s.Profiles, role, round, "profile?seconds="+strconv.Itoa(int(s.Hold.Seconds())), "cpu")
		})
	}
	time.Sleep(s.Hold)
	c1 := tally.chunks.Load()
	s1, err := px.read(false, false)
	if err != nil {
		return r, err
	}
	plateau, err := px.read(true, false)
	if err != nil {
		return r, err
	}
	if s.Profiles != "" {
		profiled.Wait()
		px.profile(s.Profiles, role, round, "heap", "heap")
		px.profile(s.Profiles, role, round, "goroutine", "goroutine")
	}
	if n := tally.open.Load(); n != int64(s.Streams) {
		return r, fmt.Errorf("%s: %d of %d streams still open at the end of the measured interval: the run took longer than planned", role, n, s.Streams)
	}
	n := float64(s.Streams)
	r.Chunks = c1 - c0
	r.CPUPerChunk = float64(s1.CPU-s0.CPU) / float64(max(r.Chunks, 1))
	r.ReadsPerChunk = float64(s1.Reads-s0.Reads) / float64(max(r.Chunks, 1))
	r.WritesPerChunk = float64(s1.Writes-s0.Writes) / float64(max(r.Chunks, 1))
	r.AllocPerChunk = float64(s1.Allocated-s0.Allocated) / float64(max(r.Chunks, 1))
	r.GCs = s1.GCs - s0.GCs
	r.PerStream = (float64(plateau.live()) - float64(base.live())) / n
	r.StackPerStream = (float64(plateau.Stacks) - float64(base.Stacks)) / n
	r.MappedPerStream = (float64(plateau.Mapped) - float64(base.Mapped)) / n
	r.GoroutinesPerStream = (float64(plateau.Goroutines) - float64(base.Goroutines)) / n
	r.PeakInFlight = plateau.InFlight

	if err := up.finish(); err != nil {
		return r, err
	}
	all.Wait()
	client.CloseIdleConnections()
	after, err := px.settled(base.Goroutines)
	if err != nil {
		return r, err
	}
	r.InFlight, r.Goroutines, r.Failed = after.InFlight, after.Goroutines, tally.failed.Load()
	if s.Profiles != "" && r.Goroutines > r.BaseGoroutines {
		px.profile(s.Profiles, role, round, "goroutine?debug=1", "goroutine-after.txt")
	}
	if r.Failed > 0 {
		fmt.Fprintf(os.Stderr, "loadtest: %s: %d streams failed, the first: %s\n", role, r.Failed, tally.firstErr())
	}
	return r, nil
}

// streamTally counts what the clients received.
type streamTally struct {
	open, chunks, failed atomic.Int64
	mu                   sync.Mutex
	err                  error
}

func (t *streamTally) fail(err error) {
	t.failed.Add(1)
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.mu.Unlock()
}

func (t *streamTally) firstErr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		return "no error"
	}
	return t.err.Error()
}

// stream runs one streamed chat completion of at most tokens tokens,
// calling opened (if not nil) once its first chunk has arrived or it
// failed, and checks that it ended normally: the role chunk, at most one
// chunk per token, the finish chunk, no usage chunk (the client asked for
// none), then [DONE].
func (t *streamTally) stream(ctx context.Context, client *http.Client, target string, tokens int, opened func()) {
	isOpen := false
	open := func() {
		if opened != nil {
			opened()
			opened = nil
		}
	}
	defer open()
	defer func() {
		if isOpen {
			t.open.Add(-1)
		}
	}()
	body, _ := json.Marshal(map[string]any{
		"model": "gpt-4o-mini", "stream": true, "max_tokens": tokens,
		"messages": []any{map[string]any{"role": "user", "content": streamPrompt}},
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		t.fail(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		t.fail(fmt.Errorf("status %d: %s", resp.StatusCode, b))
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1024), 64<<10)
	events, done := 0, false
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			done = true
			continue
		}
		if bytes.Contains(data, []byte(`"usage":{`)) {
			t.fail(errors.New("a usage chunk the client did not ask for"))
			return
		}
		events++
		t.chunks.Add(1)
		if !isOpen {
			isOpen = true
			t.open.Add(1)
			open()
		}
	}
	if err := sc.Err(); err != nil {
		t.fail(err)
		return
	}
	if !done || events < 2 || events > tokens+2 {
		t.fail(fmt.Errorf("%d chunks, [DONE] %v; want 2 to %d chunks and [DONE]", events, done, tokens+2))
	}
}

// streamsSummary is the medians of the rounds.
type streamsSummary struct {
	Streams      int
	RP, Gateway  []streamRun
	MedianMemory float64 // the gateway's live bytes per open stream
	MedianRatio  float64 // the gateway's CPU per chunk over the reverse proxy's, per round
}

// check asserts the targets.
func (s streamsSummary) check() error {
	var err error
	if s.MedianRatio > maxCPURatio {
		err = fmt.Errorf("the gateway's CPU per chunk is %.2fx the reverse proxy's; want at most %.1fx", s.MedianRatio, maxCPURatio)
	}
	return errors.Join(err, s.checkMemory())
}

// checkMemory asserts the memory per open stream, and that every run
// ended with no permit held, its goroutines back to their baseline and
// every stream complete.
func (s streamsSummary) checkMemory() error {
	var errs []error
	if s.MedianMemory > maxStreamBytes {
		errs = append(errs, fmt.Errorf("the gateway holds %.1f KiB per open stream; want at most %d KiB", s.MedianMemory/1024, maxStreamBytes>>10))
	}
	for _, r := range slices.Concat(s.RP, s.Gateway) {
		if r.InFlight != 0 {
			errs = append(errs, fmt.Errorf("%s: %d permits still held after the streams ended", r.Proxy, r.InFlight))
		}
		if r.Goroutines > r.BaseGoroutines {
			errs = append(errs, fmt.Errorf("%s: %d goroutines after the streams ended; %d before", r.Proxy, r.Goroutines, r.BaseGoroutines))
		}
		if r.Failed > 0 {
			errs = append(errs, fmt.Errorf("%s: %d streams failed", r.Proxy, r.Failed))
		}
		if r.Proxy == roleGateway && r.PeakInFlight != int64(s.Streams) {
			errs = append(errs, fmt.Errorf("%s: %d permits held with %d streams open", r.Proxy, r.PeakInFlight, s.Streams))
		}
	}
	return errors.Join(errs...)
}

// runStreamRounds runs the scenario Rounds times per proxy, alternating
// which goes first, prints each run and the medians to w.
func runStreamRounds(s streamsSetup, w io.Writer) (streamsSummary, error) {
	raiseFileLimit()
	proto := "HTTP/2 without TLS (h2c)"
	if s.HTTP1 {
		proto = "HTTP/1.1, one connection per stream"
	}
	fmt.Fprintf(w, "streams: %d concurrent chat completions at %g tokens/s each, %v measured with all open, upstream leg %s, GOMAXPROCS %d, %d rounds\n",
		s.Streams, s.Rate, s.Hold, proto, runtime.GOMAXPROCS(0), s.Rounds)
	sum := streamsSummary{Streams: s.Streams}
	var mem, ratio []float64
	for round := range s.Rounds {
		order := []string{roleRP, roleGateway}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		var rp, gw streamRun
		for _, role := range order {
			r, err := runStreams(s, role, round+1)
			if err != nil {
				return sum, err
			}
			fmt.Fprintf(w, "round %d  %v\n", round+1, r)
			if role == roleRP {
				rp = r
			} else {
				gw = r
			}
		}
		sum.RP, sum.Gateway = append(sum.RP, rp), append(sum.Gateway, gw)
		mem = append(mem, gw.PerStream)
		ratio = append(ratio, gw.CPUPerChunk/rp.CPUPerChunk)
	}
	sum.MedianMemory, sum.MedianRatio = median(mem), median(ratio)
	med := func(rs []streamRun, f func(streamRun) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	perStream := func(r streamRun) float64 { return r.PerStream / 1024 }
	perChunk := func(r streamRun) float64 { return r.CPUPerChunk / 1e3 }
	fmt.Fprintf(w, "medians: reverse proxy %.1f KiB/stream, %.2f µs CPU/chunk; gateway %.1f KiB/stream, %.2f µs CPU/chunk; gateway CPU/chunk over the reverse proxy's %.2fx (rounds %.2f to %.2f)\n",
		med(sum.RP, perStream), med(sum.RP, perChunk), med(sum.Gateway, perStream), med(sum.Gateway, perChunk), sum.MedianRatio, slices.Min(ratio), slices.Max(ratio))
	return sum, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}
