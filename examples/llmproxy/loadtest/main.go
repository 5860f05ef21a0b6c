// Command loadtest measures the latency the llmproxy gateway adds, under an
// open-loop load, against a bare reverse proxy on the same path.
//
// It starts, on loopback ports in one process, the simulated upstream
// (answering at once), an httputil.ReverseProxy with the gateway's tuned
// transport, and the gateway with three policies (requests per minute,
// tokens per minute, concurrency; limits high enough to admit everything)
// and its metrics. Then it sends non-streaming chat requests with a 1 KB
// prompt to each proxy in turn at a fixed rate, whatever the answers'
// latency (open loop: a slow answer does not slow the sender, so queueing
// shows in the figures), and prints the latency percentiles of each and the
// difference.
//
//	go run ./examples/llmproxy/loadtest                 # 2,000 req/s for 10 s each
//	go run ./examples/llmproxy/loadtest -rate 500 -duration 5s
//
// With -provider it measures instead how the gateway protects a
// provider's limits: the simulator enforces a tokens-per-window budget,
// four equal tenants offer together twice (-provider-overload) what it
// accepts, open loop, and each round runs the gateway without and with
// an upstream policy (the provider's budget on an upstream store, queued
// round robin by tenant, the provider's 429s absorbed). It prints the
// provider's 429s that reached clients, the goodput as a share of what the
// provider accepts in the measured interval, and Jain's index of the
// tokens each tenant got:
//
//	go run ./examples/llmproxy/loadtest -provider       # 30 s measured, 3 rounds
//
// With -priority the four tenants are interactive (offering together
// -priority-interactive times the provider's rate, open loop) and a batch
// tenant saturates the budget in the background (-priority-batch-workers
// closed-loop senders of 800-token requests, its key in the batch class).
// Each round runs the gateway with the upstream policy and no classes
// (one class, round robin by tenant), with strict priority, and with
// reserved shares (batch -priority-floor percent, interactive the rest),
// and prints the interactive requests' queue wait at the upstream policy
// (p50, p99) and each class's share of the tokens answered, the batch
// class's lowest over 5 s slots:
//
//	go run ./examples/llmproxy/loadtest -priority      # 30 s measured, 3 rounds
//
// With -provider-mix the simulated provider (600 RPM, 100,000 TPM) runs
// in its own process and counts prompts from their characters, 25% above
// and then 25% below the gateway's exact count; two heavy and two light
// tenants offer together 2.34 times its capacity, open loop, and every
// refusal is retried once after its hint, numbered as the SDKs number
// retries (X-Stainless-Retry-Count). It prints the provider's 429s, the
// goodput, each tenant's first-try success, Jain's index over served ÷
// max-min fair share and the share of retries that succeeded, and exits
// 1 when a goal is missed (≤ 1% 429s, ≥ 95% goodput, light tenants ≥ 95%
// at the first try, Jain ≥ 0.95, most retries after a hint served); with
// -provider-mix-no-max-tokens the clients send no max_tokens:
//
//	go run ./examples/llmproxy/loadtest -provider-mix -rounds 3
//	go run ./examples/llmproxy/loadtest -provider-mix -provider-mix-no-max-tokens -rounds 3
//
// Latency is measured from the moment a request was due to be sent, so a
// sender that falls behind is charged for it. At most -max-inflight
// requests are outstanding; requests beyond are counted as dropped, which
// keeps the run bounded in memory and time.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

const key = "sk-loadtest"

// policy is the gateway's configuration: three policies that admit
// everything at this load.
var policy = `version: 1
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1G, per: 1m}
  - name: tpm
    match: {routes: [/v1/chat/completions], methods: [POST]}
    key: [tenant]
    unit: tokens
    algorithm: token_bucket
    limit: 1G
    per: 1m
  - {name: concurrency, key: [tenant], algorithm: concurrency, limit: 100000}
tenants:
  load:
    api_keys: [` + apikey.Sum(key).String() + `]
identity: {anonymous: deny}
`

func main() {
	if serveStreamsChild() {
		return
	}
	rate := flag.Int("rate", 2000, "requests per second")
	duration := flag.Duration("duration", 10*time.Second, "length of each measured run")
	warmup := flag.Duration("warmup", 2*time.Second, "unmeasured run before each measured one")
	promptBytes := flag.Int("prompt-bytes", 1024, "size of the prompt")
	maxInflight := flag.Int("max-inflight", 4000, "requests outstanding at most; more are dropped")
	rounds := flag.Int("rounds", 3, "measured runs per target, alternating between the targets")
	provider := flag.Bool("provider", false, "run the provider scenario instead: four equal tenants offering twice the simulated provider's tokens per minute, without and with the upstream policy")
	var ps providerSetup
	flag.Int64Var(&ps.Tokens, "provider-tokens", 30_000, "provider scenario: the provider's tokens per -provider-window")
	flag.DurationVar(&ps.Window, "provider-window", 10*time.Second, "provider scenario: the provider's window (its budget refills over it); also the warm-up")
	flag.DurationVar(&ps.Duration, "provider-duration", 30*time.Second, "provider scenario: the measured interval")
	flag.Float64Var(&ps.Overload, "provider-overload", 2, "provider scenario: the offered load over the provider's rate")
	flag.IntVar(&ps.Queue, "provider-queue", 200, "provider scenario: the size of the upstream policy's queue")
	priority := flag.Bool("priority", false, "run the priority scenario instead: four interactive tenants and one batch tenant saturating the simulated provider's budget, with no classes, strict priority and reserved shares")
	ds := prioritySetup{BatchOutput: 800}
	flag.Float64Var(&ds.Interactive, "priority-interactive", 0.6, "priority scenario: the load the interactive tenants offer together, over the provider's rate")
	flag.IntVar(&ds.BatchWorkers, "priority-batch-workers", 32, "priority scenario: the batch tenant's closed-loop senders")
	flag.IntVar(&ds.Floor, "priority-floor", 30, "priority scenario: the batch class's reserved share, in percent")
	mix := flag.Bool("provider-mix", false, "run the provider-mix scenario instead: a 600 RPM / 100,000 TPM provider in its own process counting prompts 25% above and below the gateway's count, two heavy and two light tenants at 2.34x, asserting the goals (exit 1 when one is missed)")
	ms := mixSetup{Deadline: 10 * time.Second, Queue: 200, Overload: 1}
	flag.DurationVar(&ms.Warmup, "provider-mix-warmup", time.Minute, "provider-mix scenario: the unmeasured start, while the provider's full bucket is spent")
	flag.DurationVar(&ms.Duration, "provider-mix-duration", time.Minute, "provider-mix scenario: the measured interval")
	flag.BoolVar(&ms.NoMaxTokens, "provider-mix-no-max-tokens", false, "provider-mix scenario: the clients send no max_tokens; the provider's limiter counts 256 output tokens for such a request, and the policy file's models section reserves that")
	flag.Parse()
	if *mix {
		if ms.Warmup < 0 || ms.Warmup > 5*time.Minute || ms.Duration <= 0 || ms.Duration > 5*time.Minute || *rounds < 1 || *rounds > 10 {
			fmt.Fprintln(os.Stderr, "loadtest: -provider-mix-warmup must be in [0, 5m], -provider-mix-duration in (0, 5m], -rounds in 1..10")
			os.Exit(2)
		}
		met, err := runMixRounds(ms, *rounds)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
			os.Exit(1)
		}
		if !met {
			os.Exit(1)
		}
		return
	}
	if ran, code := runStreamsFlags(*rounds); ran {
		os.Exit(code)
	}
	if ran, code := runGovernedFlags(*rounds); ran {
		os.Exit(code)
	}
	if *priority {
		ds.providerSetup = ps
		ds.Output, ds.Deadline = 100, 10*time.Second
		if ps.Tokens <= 0 || ps.Window <= 0 || ps.Window > time.Minute || ps.Duration <= 0 || ps.Duration > 2*time.Minute || ps.Queue < 10 || ps.Queue > 10_000 ||
			ds.Interactive <= 0 || ds.Interactive > 10 || ds.BatchWorkers < 1 || ds.BatchWorkers > 1000 || ds.Floor < 1 || ds.Floor > 99 || *rounds < 1 || *rounds > 10 {
			fmt.Fprintln(os.Stderr, "loadtest: -provider-tokens must be positive, -provider-window in (0, 1m], -provider-duration in (0, 2m], -provider-queue in 10..10000, -priority-interactive in (0, 10], -priority-batch-workers in 1..1000, -priority-floor in 1..99, -rounds in 1..10")
			os.Exit(2)
		}
		if err := runPriorityRounds(ds, *rounds); err != nil {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
			os.Exit(1)
		}
		return
	}
	if *provider {
		ps.Output, ps.Deadline = 100, 10*time.Second
		if ps.Tokens <= 0 || ps.Window <= 0 || ps.Window > time.Minute || ps.Duration <= 0 || ps.Duration > 2*time.Minute || ps.Overload <= 0 || ps.Overload > 10 || ps.Queue < 1 || ps.Queue > 10_000 || *rounds < 1 || *rounds > 10 {
			fmt.Fprintln(os.Stderr, "loadtest: -provider-tokens must be positive, -provider-window in (0, 1m], -provider-duration in (0, 2m], -provider-overload in (0, 10], -provider-queue in 1..10000, -rounds in 1..10")
			os.Exit(2)
		}
		if err := runProviderRounds(ps, *rounds); err != nil {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
			os.Exit(1)
		}
		return
	}
	if *rate <= 0 || *rate > 100_000 || *duration <= 0 || *duration > 5*time.Minute || *rounds < 1 || *rounds > 10 {
		fmt.Fprintln(os.Stderr, "loadtest: -rate must be in 1..100000, -duration in (0, 5m], -rounds in 1..10")
		os.Exit(2)
	}
	if err := run(*rate, *duration, *warmup, *promptBytes, *maxInflight, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

func run(rate int, duration, warmup time.Duration, promptBytes, maxInflight, rounds int) error {
	upURL, _, err := serve(upstream.New(upstream.Config{OutputTokens: 16}))
	if err != nil {
		return err
	}
	upURL += "/v1"
	base, _ := url.Parse(upURL)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = base.Scheme, base.Host
			r.Out.URL.Path = base.Path + strings.TrimPrefix(r.In.URL.Path, "/v1")
			r.Out.Host = base.Host
		},
		Transport: gateway.NewTransport(),
	}
	rpURL, _, err := serve(rp)
	if err != nil {
		return err
	}
	gwURL, err := startGateway(upURL)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{
		"model": "gpt-4o-mini", "max_tokens": 16,
		"messages": []any{map[string]any{"role": "user", "content": prompt(promptBytes)}},
	})
	fmt.Printf("open loop: %d req/s for %v per run (after %v warm-up), %d-byte prompt, non-streaming chat, GOMAXPROCS %d, %d rounds\n",
		rate, duration, warmup, promptBytes, gomaxprocs(), rounds)
	targets := []struct{ name, url string }{
		{"httputil.ReverseProxy", rpURL},
		{"llmproxy gateway", gwURL},
	}
	if warmup > 0 {
		for _, t := range targets {
			load(t.url, body, rate, warmup, maxInflight)
		}
	}
	// Alternate the targets so that a change in the machine's load
	// affects both alike.
	var added50, added99 []time.Duration
	for round := range rounds {
		var rs [2]result
		for i, t := range targets {
			rs[i] = load(t.url, body, rate, duration, maxInflight)
			rs[i].name = t.name
			fmt.Printf("round %d  %v\n", round+1, rs[i])
		}
		added50 = append(added50, rs[1].q(0.50)-rs[0].q(0.50))
		added99 = append(added99, rs[1].q(0.99)-rs[0].q(0.99))
	}
	slices.Sort(added50)
	slices.Sort(added99)
	fmt.Printf("added by the gateway (median over rounds): p50 %+.3f ms, p99 %+.3f ms\n",
		ms(added50[len(added50)/2]), ms(added99[len(added99)/2]))
	return nil
}

// startGateway runs the gateway as llmproxy does, with the policy above.
func startGateway(upURL string) (string, error) {
	h, _, err := newGateway(upURL, nil)
	if err != nil {
		return "", err
	}
	u, _, err := serve(h)
	return u, err
}

// serve serves h on a loopback port; stop closes the server.
func serve(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

func prompt(n int) string {
	const s = "The gateway admits each request against the tenant's limits before it reaches the model, " +
		"and settles the reservation with the usage the upstream reports once the answer is complete. "
	return strings.Repeat(s, n/len(s)+1)[:n]
}

// result is one measured run.
type result struct {
	name     string
	lat      []time.Duration // sorted
	errors   int64
	dropped  int64
	sent     int
	duration time.Duration
}

func (r result) q(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(p * float64(len(r.lat)))
	return r.lat[min(i, len(r.lat)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r result) String() string {
	return fmt.Sprintf("%-22s %6d ok %4d errors %4d dropped (%.0f req/s)  p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  p99.9 %.3f ms  max %.3f ms",
		r.name, len(r.lat), r.errors, r.dropped, float64(r.sent)/r.duration.Seconds(),
		ms(r.q(0.5)), ms(r.q(0.9)), ms(r.q(0.99)), ms(r.q(0.999)), ms(r.q(1)))
}

// load sends rate requests per second to target for d, each on its own
// goroutine at its due time, and collects the latencies.
func load(target string, body []byte, rate int, d time.Duration, maxInflight int) result {
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConns: maxInflight, MaxIdleConnsPerHost: maxInflight, IdleConnTimeout: time.Minute},
		Timeout:   30 * time.Second,
	}
	defer client.CloseIdleConnections()
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	var errs, dropped atomic.Int64
	var inflight atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		if inflight.Load() >= int64(maxInflight) {
			dropped.Add(1)
			lat[i] = -1
			continue
		}
		inflight.Add(1)
		wg.Go(func() {
			defer inflight.Add(-1)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := client.Do(req)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				errs.Add(1)
				lat[i] = -1
				return
			}
			lat[i] = time.Since(due)
		})
	}
	sendTime := time.Since(start)
	wg.Wait()
	ok := slices.DeleteFunc(lat, func(d time.Duration) bool { return d < 0 })
	slices.Sort(ok)
	return result{lat: ok, errors: errs.Load(), dropped: dropped.Load(), sent: n, duration: sendTime}
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }
