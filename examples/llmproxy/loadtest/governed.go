package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The governed benchmark (-governed) measures Sluice with its limits on
// beside the peers a team would otherwise run, in one run on this
// machine, alternating the systems round by round so that a change in
// the machine's load affects both alike:
//
//   - the gateway (the llmproxy binary, with policies of every kind: a
//     token bucket of requests, one of tokens, a spend quota, a
//     concurrency cap and a shadow candidate, all admitting everything)
//     against httputil.ReverseProxy, each in its own process in front of
//     the simulated upstream in a third: the most requests per second 64
//     closed-loop connections get through, and the latency each adds to
//     the upstream's at fixed open-loop rates;
//   - sluice-rls against envoyproxy/ratelimit (installed from the Go
//     module proxy at a pinned version), both on one redis-server and one
//     configuration file: calls per second and latency at 1, 16 and 64
//     calls in flight with 1 and 3 descriptors per call, and the Redis
//     CPU time each call costs;
//   - overshoot: three replicas of each (the gateway, sluice-rls, the
//     reference) on one Redis under a burst of at least ten times the
//     limit from 64 connections: what they admitted over what the limit
//     allows in the windows the burst touched, with Redis healthy and
//     with Redis paused for a second in the middle of the burst.
//
// It prints one table, ratios to the peers with the targets, and writes
// it as governed.json and governed.svg. A peer that cannot be installed
// (no module proxy) leaves its rows out with the reason; the rest runs.
//
//	go run ./examples/llmproxy/loadtest -governed
var (
	governedMode     = flag.Bool("governed", false, "run the governed benchmark instead: the gateway against httputil.ReverseProxy, sluice-rls against envoyproxy/ratelimit, and the overshoot of three replicas of each on one Redis; writes governed.json and governed.svg to -governed-out")
	governedOut      = flag.String("governed-out", "governed-out", "governed benchmark: directory of governed.json and governed.svg")
	governedDuration = flag.Duration("governed-duration", 5*time.Second, "governed benchmark: each measured interval")
	governedParts    = flag.String("governed-parts", "gateway,rls,overshoot", "governed benchmark: the parts to run, comma-separated")
	governedRef      = flag.String("governed-reference", referenceModule, "governed benchmark: the envoyproxy/ratelimit command to go install, module@version")
)

// referenceModule is envoyproxy/ratelimit's server, pinned.
const referenceModule = "github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"

// Names of the systems in the table.
const (
	nameGateway   = "llmproxy gateway"
	nameRP        = "httputil.ReverseProxy"
	nameRLS       = "sluice-rls"
	nameReference = "envoyproxy/ratelimit"
)

// governedSetup is one governed run.
type governedSetup struct {
	Rounds   int
	Duration time.Duration
	Parts    []string
	Out      string
	Ref      string
	// Rates are the open-loop rates of the gateway's latency figures;
	// InFlight the RLS's concurrency levels.
	Rates    []int
	InFlight []int
	// Limit is the overshoot limit, per minute; the burst offers at
	// least 10 times it.
	Limit int
}

// runGovernedFlags runs the benchmark the flags describe, when -governed
// is set; it reports whether it did, and the exit code.
func runGovernedFlags(rounds int) (bool, int) {
	if !*governedMode {
		return false, 0
	}
	s := governedSetup{Rounds: rounds, Duration: *governedDuration, Out: *governedOut, Ref: *governedRef,
		Rates: []int{1000, 3000}, InFlight: []int{1, 16, 64}, Limit: 500}
	for p := range strings.SplitSeq(*governedParts, ",") {
		if p = strings.TrimSpace(p); p != "" {
			s.Parts = append(s.Parts, p)
		}
	}
	if s.Duration <= 0 || s.Duration > time.Minute || s.Rounds < 1 || s.Rounds > 10 || len(s.Parts) == 0 ||
		slices.ContainsFunc(s.Parts, func(p string) bool { return p != "gateway" && p != "rls" && p != "overshoot" }) {
		fmt.Fprintln(os.Stderr, "loadtest: -governed-duration must be in (0, 1m], -rounds in 1..10, -governed-parts from gateway, rls, overshoot")
		return true, 2
	}
	rep, err := runGoverned(s, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		return true, 1
	}
	if err := rep.write(s.Out); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		return true, 1
	}
	fmt.Printf("wrote %s and %s\n", filepath.Join(s.Out, "governed.json"), filepath.Join(s.Out, "governed.svg"))
	return true, 0
}

// governedReport is the benchmark's table.
type governedReport struct {
	GoVersion  string        `json:"go_version"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	Rounds     int           `json:"rounds"`
	Interval   string        `json:"interval"`
	Reference  string        `json:"reference"`
	Notes      []string      `json:"notes,omitempty"`
	Rows       []governedRow `json:"rows"`
}

// governedRow is one figure of Sluice's beside its peer's, medians over
// the rounds; Ratio is the median of the rounds' ratios.
type governedRow struct {
	Part     string    `json:"part"`
	Measure  string    `json:"measure"`
	Unit     string    `json:"unit"`
	Sluice   string    `json:"sluice"`
	Peer     string    `json:"peer"`
	SluiceAt float64   `json:"sluice_value"`
	PeerAt   float64   `json:"peer_value"`
	Ratio    float64   `json:"ratio"`
	Target   string    `json:"target,omitempty"`
	Met      *bool     `json:"met,omitempty"`
	Runs     []float64 `json:"ratios"`
}

// target is a bound on a row's ratio: at most (or at least) Bound.
type target struct {
	AtMost bool
	Bound  float64
}

func (t target) String() string {
	if t.Bound == 0 {
		return ""
	}
	if t.AtMost {
		return "≤ " + strconv.FormatFloat(t.Bound, 'f', -1, 64)
	}
	return "≥ " + strconv.FormatFloat(t.Bound, 'f', -1, 64)
}

// samples collects a figure of Sluice's and of its peer's, round by round.
type samples struct {
	sluice, peer []float64
}

func (s *samples) add(sluice, peer float64) {
	s.sluice = append(s.sluice, sluice)
	s.peer = append(s.peer, peer)
}

// row makes the report's row of s.
func (s *samples) row(part, measure, unit, sluice, peer string, t target) governedRow {
	r := governedRow{Part: part, Measure: measure, Unit: unit, Sluice: sluice, Peer: peer,
		SluiceAt: median(s.sluice), PeerAt: median(s.peer), Target: t.String()}
	for i := range s.sluice {
		if s.peer[i] != 0 {
			r.Runs = append(r.Runs, s.sluice[i]/s.peer[i])
		}
	}
	if len(r.Runs) > 0 {
		r.Ratio = median(r.Runs)
		if t.Bound != 0 {
			met := r.Ratio <= t.Bound
			if !t.AtMost {
				met = r.Ratio >= t.Bound
			}
			r.Met = &met
		}
	}
	return r
}

// governedRig holds what every part shares: the binaries, Redis and the
// simulated upstream.
type governedRig struct {
	s        governedSetup
	dir      string
	llmproxy string // the gateway's binary
	rls      string // sluice-rls
	ref      string // envoyproxy/ratelimit, empty when it could not be installed
	redis    *redistest.Server
	rc       *redis.Client
	up       *child // the simulated upstream
	procs    []*exec.Cmd
}

func runGoverned(s governedSetup, w io.Writer) (*governedReport, error) {
	raiseFileLimit()
	rep := &governedReport{GoVersion: runtime.Version(), GOMAXPROCS: gomaxprocs(), Rounds: s.Rounds, Interval: s.Duration.String(), Reference: s.Ref}
	dir, err := os.MkdirTemp("", "sluice-governed-")
	if err != nil {
		return nil, err
	}
	g := &governedRig{s: s, dir: dir}
	defer g.close()
	fmt.Fprintln(w, "building llmproxy and sluice-rls; installing", s.Ref)
	if err := g.build(); err != nil {
		return nil, err
	}
	if g.ref == "" {
		rep.Notes = append(rep.Notes, "envoyproxy/ratelimit could not be installed: its rows are left out")
	}
	if g.redis, err = redistest.Launch(); err != nil {
		return nil, err
	}
	g.rc = redis.NewClient(&redis.Options{Addr: g.redis.Addr})
	if g.up, err = startChild(roleUpstream, childRateEnv+"=0"); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "governed benchmark: %d rounds of %v, GOMAXPROCS %d, %s\n", s.Rounds, s.Duration, gomaxprocs(), runtime.Version())
	for _, p := range s.Parts {
		var rows []governedRow
		switch p {
		case "gateway":
			rows, err = g.gateway(w)
		case "rls":
			rows, err = g.rlsPart(w)
		case "overshoot":
			rows, err = g.overshoot(w)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	rep.print(w)
	return rep, nil
}

// build compiles the gateway and sluice-rls from this module's source and
// installs the reference into the rig's directory.
func (g *governedRig) build() error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	g.llmproxy, g.rls = filepath.Join(g.dir, "llmproxy"), filepath.Join(g.dir, "sluice-rls")
	cmd := exec.Command("go", "build", "-o", g.dir, "./examples/llmproxy", "./cmd/sluice-rls")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	cmd = exec.Command("go", "install", g.s.Ref)
	cmd.Env = append(os.Environ(), "GOBIN="+g.dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "loadtest: go install %s: %v\n%s", g.s.Ref, err, out)
		return nil
	}
	g.ref = filepath.Join(g.dir, "service_cmd")
	return nil
}

func (g *governedRig) close() {
	for _, p := range g.procs {
		stopProcess(p)
	}
	if g.up != nil {
		g.up.stop()
	}
	if g.rc != nil {
		_ = g.rc.Close()
	}
	if g.redis != nil {
		g.redis.Stop()
	}
	_ = os.RemoveAll(g.dir)
}

// stopProcess ends a server the rig started: SIGTERM, then SIGKILL after
// five seconds.
func stopProcess(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	endProcess(cmd, func() { _ = cmd.Process.Signal(os.Interrupt) }, 5*time.Second)
}

// endProcess asks cmd's process to end with ask, waits grace for it to
// exit and kills it if it has not.
func endProcess(cmd *exec.Cmd, ask func(), grace time.Duration) {
	ask()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// start runs a server of the rig, its output in the rig's directory.
func (g *governedRig) start(name, bin string, env []string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	log, err := os.Create(filepath.Join(g.dir, fmt.Sprintf("%s-%d.log", name, len(g.procs))))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	g.procs = append(g.procs, cmd)
	return cmd, nil
}

// freePorts returns n loopback ports free at the moment of the call.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitReady calls ready every 50 ms until it succeeds, for up to 30 s.
func waitReady(what string, ready func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not start: %w", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The gateway part.

// governedPolicy is the load test's policy (requests, tokens and
// concurrency) with the other kinds the default configuration uses, a
// spend quota and a shadow candidate, all with limits that admit
// everything at this load: the figures are the cost of deciding.
var governedPolicy = strings.Replace(policy, "tenants:\n", `  - {name: spend, key: [tenant], unit: cost, algorithm: quota, limit: 1G, period: day}
  - name: tpm-candidate
    mode: shadow
    match: {routes: [/v1/chat/completions], methods: [POST]}
    key: [tenant]
    unit: tokens
    algorithm: sliding_window
    limit: 1G
    per: 1m
tenants:
`, 1)

// startGateways runs n llmproxy replicas on policy, in front of the
// simulated upstream, and returns their base URLs.
func (g *governedRig) startGateways(n int, policy string) ([]string, error) {
	file := filepath.Join(g.dir, fmt.Sprintf("policy-%d.yaml", len(g.procs)))
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		return nil, err
	}
	var urls []string
	for range n {
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		if _, err := g.start("llmproxy", g.llmproxy, []string{"LLMPROXY_UPSTREAM_API_KEY=sk-sim"}, "-addr", addr, "-metrics-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]),
			"-config", file, "-upstream", "http://"+g.up.addr+"/v1", "-redis", g.redis.Addr, "-log-level", "error"); err != nil {
			return nil, err
		}
		u := "http://" + addr
		if err := waitReady("llmproxy", func() error { return httpOK(u + "/readyz") }); err != nil {
			return nil, err
		}
		urls = append(urls, u)
	}
	return urls, nil
}

func httpOK(u string) error {
	resp, err := statsClient.Get(u)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	return nil
}

// gateway measures the gateway against the reverse proxy: the most
// requests per second 64 closed-loop connections get through, and the
// latency each adds to the upstream's own at the open-loop rates.
func (g *governedRig) gateway(w io.Writer) ([]governedRow, error) {
	gws, err := g.startGateways(1, governedPolicy)
	if err != nil {
		return nil, err
	}
	rp, err := startChild(roleRP, childUpEnv+"=http://"+g.up.addr+"/v1")
	if err != nil {
		return nil, err
	}
	defer rp.stop()
	direct, proxy, gw := "http://"+g.up.addr, "http://"+rp.addr, gws[0]
	body, _ := json.Marshal(map[string]any{
		"model": "gpt-4o-mini", "max_tokens": 16,
		"messages": []any{map[string]any{"role": "user", "content": prompt(1024)}},
	})
	d := g.s.Duration
	// Warm every path (connections, the gateway's tables) before measuring.
	for _, u := range []string{direct, proxy, gw} {
		closedLoop(u, body, 64, time.Second)
	}
	var qps samples
	added := make([]struct{ p50, p99 samples }, len(g.s.Rates))
	for round := range g.s.Rounds {
		// Alternate which goes first.
		order := []string{proxy, gw}
		if round%2 == 1 {
			order = []string{gw, proxy}
		}
		got := map[string]float64{}
		for _, u := range order {
			got[u] = closedLoop(u, body, 64, d)
		}
		qps.add(got[gw], got[proxy])
		fmt.Fprintf(w, "round %d  max QPS (64 connections): gateway %.0f, reverse proxy %.0f\n", round+1, got[gw], got[proxy])
		for i, rate := range g.s.Rates {
			res := map[string]result{}
			for _, u := range append([]string{direct}, order...) {
				res[u] = load(u, body, rate, d, 4000)
			}
			a50 := func(u string) float64 { return ms(res[u].q(0.50) - res[direct].q(0.50)) }
			a99 := func(u string) float64 { return ms(res[u].q(0.99) - res[direct].q(0.99)) }
			added[i].p50.add(a50(gw), a50(proxy))
			added[i].p99.add(a99(gw), a99(proxy))
			fmt.Fprintf(w, "round %d  %d req/s: upstream p50 %.3f p99 %.3f ms; added p50/p99: gateway %.3f/%.3f ms, reverse proxy %.3f/%.3f ms (errors %d/%d, dropped %d/%d)\n",
				round+1, rate, ms(res[direct].q(0.5)), ms(res[direct].q(0.99)), a50(gw), a99(gw), a50(proxy), a99(proxy),
				res[gw].errors, res[proxy].errors, res[gw].dropped, res[proxy].dropped)
		}
	}
	rows := []governedRow{qps.row("gateway", "max requests/s, 64 connections", "req/s", nameGateway, nameRP, target{Bound: 0.7})}
	for i, rate := range g.s.Rates {
		t := target{}
		if rate == 1000 {
			t = target{AtMost: true, Bound: 2}
		}
		rows = append(rows,
			added[i].p50.row("gateway", fmt.Sprintf("added p50 at %d req/s", rate), "ms", nameGateway, nameRP, target{}),
			added[i].p99.row("gateway", fmt.Sprintf("added p99 at %d req/s", rate), "ms", nameGateway, nameRP, t))
	}
	return rows, nil
}

// closedLoop sends body from conns connections, each one request after
// another, for d, and returns the successful requests per second.
func closedLoop(target string, body []byte, conns int, d time.Duration) float64 {
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute},
		Timeout:   30 * time.Second,
	}
	defer client.CloseIdleConnections()
	var ok atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	start := time.Now()
	for range conns {
		wg.Go(func() {
			for time.Now().Before(end) {
				if post(client, target, body) == http.StatusOK {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(ok.Load()) / time.Since(start).Seconds()
}

// post sends a chat completion with the load test's key and returns the
// status, 0 on a transport error.
func post(client *http.Client, target string, body []byte) int {
	req, _ := http.NewRequest(http.MethodPost, target+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// The RLS part.

// rlsFile is the rate limit configuration both services read: three
// descriptor keys, each limited per value, with limits that admit
// everything (the figures are the cost of deciding) unless limit is set.
func rlsFile(limit int) string {
	n := "1000000000"
	if limit > 0 {
		n = strconv.Itoa(limit)
	}
	var b strings.Builder
	b.WriteString("domain: bench\ndescriptors:\n")
	for _, k := range []string{"tenant", "model", "route"} {
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {unit: minute, requests_per_unit: %s}\n", k, n)
	}
	return b.String()
}

// rlsService is one running rate limit service.
type rlsService struct {
	name   string
	cmd    *exec.Cmd
	conn   *grpc.ClientConn
	client rlsv3.RateLimitServiceClient
}

// startRLS runs n replicas of sluice-rls (ref false) or of the reference
// on the configuration, all on the rig's Redis.
func (g *governedRig) startRLS(ref bool, n int, config string) ([]*rlsService, error) {
	root := filepath.Join(g.dir, fmt.Sprintf("rls-%d", len(g.procs)))
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(config), 0o600); err != nil {
		return nil, err
	}
	var out []*rlsService
	for range n {
		ports, err := freePorts(3)
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		var cmd *exec.Cmd
		name := nameRLS
		if ref {
			name = nameReference
			cmd, err = g.start("ratelimit", g.ref, []string{
				"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + g.redis.Addr,
				"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
				"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
				"GRPC_PORT=" + strconv.Itoa(ports[0]), "PORT=" + strconv.Itoa(ports[1]), "DEBUG_PORT=" + strconv.Itoa(ports[2]),
			})
		} else {
			cmd, err = g.start("sluice-rls", g.rls, nil, "-config", cfgDir, "-listen", addr, "-operator", "", "-redis", g.redis.Addr)
		}
		if err != nil {
			return nil, err
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		s := &rlsService{name: name, cmd: cmd, conn: conn, client: rlsv3.NewRateLimitServiceClient(conn)}
		out = append(out, s)
		err = waitReady(name, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			resp, err := s.client.ShouldRateLimit(ctx, rlsRequest(1, 0, 0))
			if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
				err = fmt.Errorf("answer %v", resp.OverallCode)
			}
			return err
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (s *rlsService) close() {
	_ = s.conn.Close()
	stopProcess(s.cmd)
}

// rlsTenants is the tenants the RLS calls spread over.
const rlsTenants = 10_000

// rlsRequest is call i's request with descriptors descriptors (1 or 3).
func rlsRequest(descriptors, tenant, i int) *rlsv3.RateLimitRequest {
	entry := func(k, v string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	req := &rlsv3.RateLimitRequest{Domain: "bench", HitsAddend: 1,
		Descriptors: []*rlv3.RateLimitDescriptor{entry("tenant", "t"+strconv.Itoa(tenant))}}
	if descriptors == 3 {
		req.Descriptors = append(req.Descriptors, entry("model", "m"+strconv.Itoa(i%8)), entry("route", "r"+strconv.Itoa(i%4)))
	}
	return req
}

// rlsRun is one measured interval of one service.
type rlsRun struct {
	calls     int
	errors    int64
	lat       []time.Duration // sorted
	perSecond float64
	redisCPU  time.Duration // per call
	serverCPU time.Duration // per call
}

// measureRLS sends calls from inflight goroutines for d and reads the
// CPU time Redis and the service spent on them.
func (g *governedRig) measureRLS(s *rlsService, descriptors, inflight int, d time.Duration) (rlsRun, error) {
	redisBefore, err := redisCPU(g.rc)
	if err != nil {
		return rlsRun{}, err
	}
	cpuBefore := pidCPU(s.cmd.Process.Pid)
	lats := make([][]time.Duration, inflight)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for w := range inflight {
		wg.Go(func() {
			for i := w; time.Now().Before(end); i += inflight {
				t0 := time.Now()
				resp, err := s.client.ShouldRateLimit(context.Background(), rlsRequest(descriptors, i%rlsTenants, i))
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
					errs.Add(1)
					continue
				}
				lats[w] = append(lats[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	redisAfter, err := redisCPU(g.rc)
	if err != nil {
		return rlsRun{}, err
	}
	r := rlsRun{errors: errs.Load(), lat: slices.Concat(lats...)}
	slices.Sort(r.lat)
	r.calls = len(r.lat)
	r.perSecond = float64(r.calls) / elapsed.Seconds()
	if r.calls > 0 {
		r.redisCPU = (redisAfter - redisBefore) / time.Duration(r.calls)
		r.serverCPU = (pidCPU(s.cmd.Process.Pid) - cpuBefore) / time.Duration(r.calls)
	}
	return r, nil
}

func (r rlsRun) q(p float64) time.Duration {
	return result{lat: r.lat}.q(p)
}

// redisCPU reads the Redis server's CPU time so far.
func redisCPU(rc *redis.Client) (time.Duration, error) {
	info, err := rc.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// rlsPart measures sluice-rls against the reference: calls per second,
// p50 and p99, and the Redis CPU per call, at each concurrency with one
// and three descriptors per call.
func (g *governedRig) rlsPart(w io.Writer) ([]governedRow, error) {
	if g.ref == "" {
		fmt.Fprintln(w, "rls: envoyproxy/ratelimit is not installed; its part is skipped")
		return nil, nil
	}
	cfg := rlsFile(0)
	ours, err := g.startRLS(false, 1, cfg)
	if err != nil {
		return nil, err
	}
	defer ours[0].close()
	theirs, err := g.startRLS(true, 1, cfg)
	if err != nil {
		return nil, err
	}
	defer theirs[0].close()
	type key struct{ desc, inflight int }
	calls, p99, cpu := map[key]*samples{}, map[key]*samples{}, map[key]*samples{}
	for _, desc := range []int{1, 3} {
		for _, n := range g.s.InFlight {
			k := key{desc, n}
			calls[k], p99[k], cpu[k] = &samples{}, &samples{}, &samples{}
			// Warm both: connections, scripts, keys.
			for _, s := range []*rlsService{ours[0], theirs[0]} {
				if _, err := g.measureRLS(s, desc, n, time.Second); err != nil {
					return nil, err
				}
			}
		}
	}
	for round := range g.s.Rounds {
		for _, desc := range []int{1, 3} {
			for _, n := range g.s.InFlight {
				k := key{desc, n}
				order := []*rlsService{ours[0], theirs[0]}
				if round%2 == 1 {
					order[0], order[1] = order[1], order[0]
				}
				runs := map[string]rlsRun{}
				for _, s := range order {
					r, err := g.measureRLS(s, desc, n, g.s.Duration)
					if err != nil {
						return nil, err
					}
					runs[s.name] = r
					fmt.Fprintf(w, "round %d  %-20s %d descriptor(s), %2d in flight: %7.0f calls/s  p50 %.3f ms  p99 %.3f ms  Redis CPU %5.1f µs/call  server CPU %5.1f µs/call  errors %d\n",
						round+1, s.name, desc, n, r.perSecond, ms(r.q(0.5)), ms(r.q(0.99)), us(r.redisCPU), us(r.serverCPU), r.errors)
				}
				a, b := runs[nameRLS], runs[nameReference]
				calls[k].add(a.perSecond, b.perSecond)
				p99[k].add(ms(a.q(0.99)), ms(b.q(0.99)))
				cpu[k].add(us(a.redisCPU), us(b.redisCPU))
			}
		}
	}
	var rows []governedRow
	for _, desc := range []int{1, 3} {
		for _, n := range g.s.InFlight {
			k := key{desc, n}
			callsT, cpuT := target{}, target{}
			if desc == 3 {
				callsT, cpuT = target{Bound: 1}, target{AtMost: true, Bound: 1.5}
			}
			what := fmt.Sprintf("%d descriptor(s), %d in flight", desc, n)
			rows = append(rows,
				calls[k].row("rls", "calls/s, "+what, "calls/s", nameRLS, nameReference, callsT),
				p99[k].row("rls", "p99, "+what, "ms", nameRLS, nameReference, target{}),
				cpu[k].row("rls", "Redis CPU per call, "+what, "µs", nameRLS, nameReference, cpuT))
		}
	}
	return rows, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// The overshoot part.

// burst is what a fleet admitted of a burst.
type burst struct {
	offered, admitted, refused, errors int
	start, end                         time.Time
}

// allowed is what a fixed window of limit per minute allows over the
// windows the burst touched (Sluice and the reference both align windows
// to the Unix epoch).
func (b burst) allowed(limit int) int {
	first, last := b.start.Unix()/60, b.end.Unix()/60
	return limit * int(last-first+1)
}

// ratio is admitted over allowed.
func (b burst) ratio(limit int) float64 {
	return float64(b.admitted) / float64(b.allowed(limit))
}

// fire sends call from 64 goroutines until they have offered at least
// 10×limit and d has passed; pause, when set, runs half-way. call
// returns 1 for admitted, 0 for refused, -1 for an error.
func fire(limit int, d time.Duration, pause func(), call func(conn, i int) int) burst {
	var offered, admitted, refused, errs atomic.Int64
	var wg sync.WaitGroup
	b := burst{start: time.Now()}
	end := b.start.Add(d)
	if pause != nil {
		time.AfterFunc(d/2, pause)
	}
	for c := range 64 {
		wg.Go(func() {
			for i := c; time.Now().Before(end) || offered.Load() < int64(10*limit); i += 64 {
				offered.Add(1)
				switch call(c, i) {
				case 1:
					admitted.Add(1)
				case 0:
					refused.Add(1)
				default:
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.end = time.Now()
	b.offered, b.admitted, b.refused, b.errors = int(offered.Load()), int(admitted.Load()), int(refused.Load()), int(errs.Load())
	return b
}

// overshoot measures three replicas of each system on one Redis under a
// burst of ten times the limit, with Redis healthy and paused for a
// second half-way.
func (g *governedRig) overshoot(w io.Writer) ([]governedRow, error) {
	limit := g.s.Limit
	d := 2 * time.Second
	pause := func() { _ = g.rc.Do(context.Background(), "CLIENT", "PAUSE", "1000", "ALL").Err() }
	type system struct {
		name string
		call func(conn, i int) int
	}
	var systems []system
	// The gateway: one tenant's requests per minute, on Redis.
	policy := fmt.Sprintf("version: 1\npolicies:\n  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: %d, per: 1m, store: redis}\ntenants:\n  load:\n    api_keys: [%s]\nidentity: {anonymous: deny}\n", limit, apikey.Sum(key))
	gws, err := g.startGateways(3, policy)
	if err != nil {
		return nil, err
	}
	clients := make([]*http.Client, 64)
	for i := range clients {
		clients[i] = &http.Client{Timeout: 30 * time.Second}
	}
	body := []byte(`{"model":"gpt-4o-mini","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`)
	systems = append(systems, system{nameGateway, func(c, i int) int {
		switch post(clients[c], gws[c%3], body) {
		case http.StatusOK:
			return 1
		case http.StatusTooManyRequests:
			return 0
		}
		return -1
	}})
	rlsCall := func(svcs []*rlsService) func(c, i int) int {
		return func(c, i int) int {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := svcs[c%3].client.ShouldRateLimit(ctx, rlsRequest(1, 0, i))
			switch {
			case err != nil:
				return -1
			case resp.OverallCode == rlsv3.RateLimitResponse_OK:
				return 1
			case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
				return 0
			}
			return -1
		}
	}
	ours, err := g.startRLS(false, 3, rlsFile(limit))
	if err != nil {
		return nil, err
	}
	for _, s := range ours {
		defer s.close()
	}
	systems = append(systems, system{nameRLS, rlsCall(ours)})
	if g.ref != "" {
		theirs, err := g.startRLS(true, 3, rlsFile(limit))
		if err != nil {
			return nil, err
		}
		for _, s := range theirs {
			defer s.close()
		}
		systems = append(systems, system{nameReference, rlsCall(theirs)})
	}
	healthy, paused := map[string]*[]float64{}, map[string]*[]float64{}
	for _, s := range systems {
		healthy[s.name], paused[s.name] = new([]float64), new([]float64)
	}
	for round := range g.s.Rounds {
		for _, withPause := range []bool{false, true} {
			for _, s := range systems {
				if err := g.rc.FlushAll(context.Background()).Err(); err != nil {
					return nil, err
				}
				var p func()
				into := healthy[s.name]
				if withPause {
					p, into = pause, paused[s.name]
				}
				b := fire(limit, d, p, s.call)
				*into = append(*into, b.ratio(limit))
				fmt.Fprintf(w, "round %d  %-20s Redis paused 1 s: %-5v offered %6d  admitted %5d  refused %6d  errors %5d  allowed %5d  admitted/allowed %.3f\n",
					round+1, s.name, withPause, b.offered, b.admitted, b.refused, b.errors, b.allowed(limit), b.ratio(limit))
				if withPause {
					// Let the pause end and the fleet reconnect.
					time.Sleep(1500 * time.Millisecond)
				}
			}
		}
	}
	var rows []governedRow
	for _, withPause := range []bool{false, true} {
		m, cond, t := healthy, "Redis healthy", target{AtMost: true, Bound: 1}
		if withPause {
			m, cond, t = paused, "Redis paused 1 s", target{}
		}
		for _, s := range systems {
			if s.name == nameReference {
				continue
			}
			peer := nameReference
			sm := samples{sluice: *m[s.name]}
			if ref := m[nameReference]; ref != nil {
				sm.peer = *ref
			} else {
				sm.peer = make([]float64, len(sm.sluice))
				peer = nameReference + " (not installed)"
			}
			r := sm.row("overshoot", "admitted ÷ allowed, "+cond+", "+s.name, "×", s.name, peer, target{})
			// The target is on Sluice's own figure, not on its ratio to
			// the reference: at most the limit.
			if t.Bound != 0 {
				met := r.SluiceAt <= t.Bound
				r.Target, r.Met = "Sluice ≤ 1", &met
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// print writes the table.
func (r *governedReport) print(w io.Writer) {
	fmt.Fprintf(w, "\n%-10s %-52s %14s %14s %8s %8s %s\n", "part", "measure", "Sluice", "peer", "ratio", "target", "")
	for _, row := range r.Rows {
		met := ""
		if row.Met != nil {
			met = map[bool]string{true: "met", false: "NOT MET"}[*row.Met]
		}
		fmt.Fprintf(w, "%-10s %-52s %10.3f %-3s %10.3f %-3s %7.2f× %8s %s\n", row.Part, row.Measure, row.SluiceAt, row.Unit, row.PeerAt, row.Unit, row.Ratio, row.Target, met)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// write saves the report as JSON and as an SVG chart in dir.
func (r *governedReport) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "governed.json"), append(b, '\n'), 0o644),
		os.WriteFile(filepath.Join(dir, "governed.svg"), r.svg(), 0o644))
}

// svg draws each row's ratio as a bar, with a line at 1 (the peer).
func (r *governedReport) svg() []byte {
	const left, width, barH, gap, scaleMax = 430, 360, 14, 6, 3.0
	h := 40 + len(r.Rows)*(barH+gap)
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", left+width+80, h)
	fmt.Fprintf(&b, `<text x="8" y="16" font-size="13">Sluice ÷ peer (medians of %d rounds of %s, GOMAXPROCS %d); the line is the peer</text>`+"\n", r.Rounds, r.Interval, r.GOMAXPROCS)
	x1 := left + int(width/scaleMax)
	fmt.Fprintf(&b, `<line x1="%d" y1="24" x2="%d" y2="%d" stroke="#333" stroke-dasharray="3,3"/>`+"\n", x1, x1, h-4)
	for i, row := range r.Rows {
		y := 28 + i*(barH+gap)
		color := "#4e79a7"
		if row.Met != nil && !*row.Met {
			color = "#e15759"
		} else if row.Met != nil {
			color = "#59a14f"
		}
		wpx := int(min(row.Ratio, scaleMax) / scaleMax * width)
		fmt.Fprintf(&b, `<text x="8" y="%d">%s</text>`+"\n", y+barH-3, xmlEscape(row.Part+": "+row.Measure))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", left, y, max(wpx, 1), barH, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%.2f× %s</text>`+"\n", left+max(wpx, 1)+4, y+barH-3, row.Ratio, xmlEscape(row.Target))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
