package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/weights"
)

// providerSetup is the provider scenario: four equal tenants offering
// together Overload times what the simulated provider accepts.
type providerSetup struct {
	// Tokens is the provider's tokens per Window for the model.
	Tokens int64
	// Window is the provider's window (its budget refills over it).
	Window time.Duration
	// Duration is the measured interval, after one Window of warm-up that
	// spends the provider's initial budget.
	Duration time.Duration
	// Overload is the offered load over the provider's rate.
	Overload float64
	// Output is the output tokens of each request (max_tokens).
	Output int
	// Deadline is the callers' deadline (X-Stainless-Timeout), and the
	// queue's timeout.
	Deadline time.Duration
	// Queue is the size of the upstream policy's queue.
	Queue int
}

// tenants are the four equal tenants of the provider scenario.
var tenants = []string{"t1", "t2", "t3", "t4"}

// providerPolicy is the gateway's policy file: a generous per-tenant
// rate, and with guard the provider's published budget on an upstream
// store, queued round robin by tenant.
func providerPolicy(s providerSetup, guard bool) string {
	var b strings.Builder
	b.WriteString("version: 1\n")
	if guard {
		b.WriteString("stores:\n  openai: {kind: upstream, group_by: model}\n")
	}
	b.WriteString("policies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1M, per: 1m}\n")
	if guard {
		b.WriteString(providerTPM(s, ""))
	}
	writeTenants(&b)
	b.WriteString("identity: {anonymous: deny}\n")
	return b.String()
}

// providerTPM is the policy entry of the provider's published budget, on
// the upstream store, queued; shares ends its queue's settings.
func providerTPM(s providerSetup, shares string) string {
	return fmt.Sprintf(`  - name: provider-tpm
    store: openai
    key: [model]
    unit: tokens
    algorithm: token_bucket
    limit: %d
    per: %v
    queue: {size: %d, timeout: %v%s}
`, s.Tokens, s.Window, s.Queue, s.Deadline, shares)
}

// writeTenants writes the tenants section's four equal tenants, each with
// its key sk-<tenant>.
func writeTenants(b *strings.Builder) {
	b.WriteString("tenants:\n")
	for _, t := range tenants {
		fmt.Fprintf(b, "  %s: {api_keys: [%s]}\n", t, apikey.Sum("sk-"+t))
	}
}

// providerRun is what one run measured.
type providerRun struct {
	Guard bool
	// Sent counts requests; ProviderRefusals the provider's 429s reaching
	// clients; Refused the gateway's own refusals (429, 503); Failed the
	// rest (timeouts, other statuses).
	Sent, OK, ProviderRefusals, Refused, Failed int64
	// Codes counts the gateway's refusals by error code.
	Codes map[string]int64
	// AtProvider counts the 429s the provider sent the gateway.
	AtProvider int64
	// Tokens holds, per tenant, the tokens of the answers completed in
	// the measured interval.
	Tokens []int64
	// Goodput is their sum over what the provider accepts in the
	// interval.
	Goodput float64
	// Jain is Jain's fairness index of Tokens.
	Jain float64
	// Slots holds, per tenant, the tokens of the answers completed in
	// each slot of the interval.
	Slots [][]int64
}

func (r providerRun) String() string {
	mode := "without upstream policy"
	if r.Guard {
		mode = "with upstream policy   "
	}
	return fmt.Sprintf("%s  sent %5d  ok %5d  provider 429s to clients %5d (%5.1f%%)  gateway refusals %5d %v  other failures %3d  429s at the provider %5d  goodput %5.1f%% of the provider's TPM  Jain %.3f  tokens per tenant %v",
		mode, r.Sent, r.OK, r.ProviderRefusals, pct(r.ProviderRefusals, r.Sent), r.Refused, r.Codes, r.Failed, r.AtProvider, 100*r.Goodput, r.Jain, r.Tokens)
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// jain returns Jain's fairness index of xs: 1 when all are equal, 1/n
// when one has everything; 0 for nothing at all.
func jain(xs []int64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// prompt tokens: the simulator counts 3 + 3 + len/4 for one message.
const providerPrompt = "Summarize the quarterly report for the board in three short bullet points, please."

// runProvider starts the simulated provider and the gateway, with or
// without the upstream policy, and offers the load.
func runProvider(s providerSetup, guard bool) (providerRun, error) {
	var r providerRun
	err := withGateway(s, providerPolicy(s, guard), nil, func(gwURL string, sim *upstream.Server) {
		r = offer(gwURL, s, equalClients(s))
		r.Guard, r.AtProvider = guard, sim.Limited()
	})
	return r, err
}

// withGateway starts the simulated provider enforcing s's budget and the
// gateway in front of it with the policy file src (and obs, when not
// nil, observing its decisions), runs fn, and stops both.
func withGateway(s providerSetup, src string, obs admission.Observer, fn func(gwURL string, sim *upstream.Server)) error {
	sim := upstream.New(upstream.Config{
		// Every answer is as long as its max_tokens allows.
		Latency: 50 * time.Millisecond, OutputTokens: 1 << 12,
		Limits: upstream.Limits{Requests: 1_000_000, Tokens: s.Tokens, Window: s.Window},
	})
	simURL, stopSim, err := serve(sim)
	if err != nil {
		return err
	}
	defer stopSim()
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		return err
	}
	var ctlOpts []admission.Option
	if obs != nil {
		ctlOpts = append(ctlOpts, admission.WithObserver(obs))
	}
	gwURL, stopGw, err := serveGateway("provider scenario", src, simURL+"/v1", est, ctlOpts)
	if err != nil {
		return err
	}
	defer stopGw()
	fn(gwURL, sim)
	return nil
}

// serveGateway serves, on a loopback port, a gateway for the policy file
// src (its upstream stores registered) in front of upstreamURL, with the
// controller options ctlOpts and the gateway options gwOpts, and returns
// its URL and the function that stops it.
func serveGateway(name, src, upstreamURL string, est *weights.Estimator, ctlOpts []admission.Option, gwOpts ...gateway.Option) (string, func(), error) {
	f, err := config.Parse(name, []byte(src))
	if err != nil {
		return "", nil, err
	}
	prov, err := gateway.NewProviders(f, nil)
	if err != nil {
		return "", nil, err
	}
	ctl, err := admission.New(f.Config, append(prov.Options(), ctlOpts...)...)
	if err != nil {
		return "", nil, err
	}
	gw, err := gateway.New(ctl, est, f, gateway.Config{Upstream: upstreamURL},
		append([]gateway.Option{gateway.WithProviders(prov), gateway.WithLogger(slog.New(slog.DiscardHandler))}, gwOpts...)...)
	if err != nil {
		return "", nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	gw.Register(e)
	gwURL, stop, err := serve(e)
	if err != nil {
		gw.Close()
		return "", nil, err
	}
	return gwURL, func() { stop(); gw.Close() }, nil
}

// totalTokens finds the last usage figure of an answer, plain or
// streamed.
var totalTokens = regexp.MustCompile(`"total_tokens":(\d+)`)

// errorCode finds the code of an OpenAI-shaped error.
var errorCode = regexp.MustCompile(`"code":"([a-z_]{1,40})"`)

// A client is one tenant's sender: open loop at Rate requests a second
// (a request is sent when due, whatever the answers), or, with Rate 0,
// closed loop with Workers senders each sending its next request when
// its last is answered, as a batch job's worker pool does.
type client struct {
	Tenant  string
	Rate    float64
	Workers int
	// Output is the output tokens of each request (max_tokens).
	Output int
}

// equalClients returns the four equal tenants offering together Overload
// times the provider's rate.
func equalClients(s providerSetup) []client {
	cs := make([]client, len(tenants))
	for i, t := range tenants {
		cs[i] = client{Tenant: t, Rate: s.Overload * s.requestRate(s.Output) / float64(len(tenants)), Output: s.Output}
	}
	return cs
}

// requestRate returns the requests per second of output tokens each that
// the provider's budget admits.
func (s providerSetup) requestRate(output int) float64 {
	return float64(s.Tokens) / s.Window.Seconds() / (float64(3+3+len(providerPrompt)/4) + float64(output))
}

// slot is the length of the intervals in which each client's tokens are
// counted (providerRun.Slots).
const slot = 5 * time.Second

// offer sends each client's requests for a warm-up Window and the
// measured Duration, and follows the requests sent in the interval to
// their answers (at most the callers' deadline later). The tokens counted
// are those of the answers completed in the interval, by client and by
// slot.
func offer(gwURL string, s providerSetup, clients []client) providerRun {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}, Timeout: s.Deadline + 5*time.Second}
	defer client.CloseIdleConnections()
	start := time.Now()
	from, to := start.Add(s.Window), start.Add(s.Window+s.Duration)
	// The requests sent in the interval are followed to their end.
	ctx, cancel := context.WithDeadline(context.Background(), to.Add(s.Deadline+time.Second))
	defer cancel()
	var run providerRun
	run.Tokens, run.Codes = make([]int64, len(clients)), map[string]int64{}
	run.Slots = make([][]int64, len(clients))
	for i := range run.Slots {
		run.Slots[i] = make([]int64, (s.Duration+slot-1)/slot)
	}
	var sent, ok, provider, refused, failed atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	// send sends one request of client ci, due at due, and accounts for
	// its answer; it returns whether the gateway refused it.
	send := func(ci, i int, due time.Time) bool {
		cl := clients[ci]
		measured := !due.Before(from)
		if measured {
			sent.Add(1)
		}
		req := map[string]any{
			"model": "gpt-4o-mini", "max_tokens": cl.Output,
			"messages": []any{map[string]any{"role": "user", "content": providerPrompt}},
		}
		if i%4 == 3 {
			// A stream that asks for its usage, to be counted.
			req["stream"], req["stream_options"] = true, map[string]any{"include_usage": true}
		}
		body, _ := json.Marshal(req)
		status, _, answer, err := call(ctx, client, gwURL, cl.Tenant, body, s.Deadline)
		now := time.Now()
		switch {
		case err != nil:
			if measured {
				failed.Add(1)
			}
		case status == http.StatusOK:
			m := totalTokens.FindAllSubmatch(answer, -1)
			if len(m) == 0 {
				break
			}
			n, _ := strconv.ParseInt(string(m[len(m)-1][1]), 10, 64)
			if !now.Before(from) && now.Before(to) {
				mu.Lock()
				run.Tokens[ci] += n
				run.Slots[ci][now.Sub(from)/slot] += n
				mu.Unlock()
			}
			if measured {
				ok.Add(1)
			}
		case status == http.StatusTooManyRequests && bytes.Contains(answer, []byte("upstream API is rate limiting")):
			if measured {
				provider.Add(1)
			}
		case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
			if measured {
				refused.Add(1)
				code := errorCode.FindSubmatch(answer)
				mu.Lock()
				if len(code) == 2 {
					run.Codes[string(code[1])]++
				}
				mu.Unlock()
			}
			return true
		default:
			if measured {
				failed.Add(1)
			}
		}
		return false
	}
	for ci, cl := range clients {
		if cl.Rate <= 0 {
			for range cl.Workers {
				wg.Go(func() {
					for i := 0; time.Now().Before(to); i++ {
						if send(ci, i, time.Now()) {
							// A refused worker backs off a little.
							time.Sleep(100 * time.Millisecond)
						}
					}
				})
			}
			continue
		}
		interval := time.Duration(float64(time.Second) / cl.Rate)
		wg.Go(func() {
			// The clients' clocks are staggered, as independent clients are.
			due := start.Add(time.Duration(ci) * interval / time.Duration(len(clients)))
			for i := 0; due.Before(to); i, due = i+1, due.Add(interval) {
				time.Sleep(time.Until(due))
				wg.Go(func() { send(ci, i, due) })
			}
		})
	}
	wg.Wait()
	run.Sent, run.OK, run.ProviderRefusals, run.Refused, run.Failed = sent.Load(), ok.Load(), provider.Load(), refused.Load(), failed.Load()
	var sum int64
	for _, n := range run.Tokens {
		sum += n
	}
	run.Goodput = float64(sum) / (float64(s.Tokens) * s.Duration.Seconds() / s.Window.Seconds())
	run.Jain = jain(run.Tokens)
	return run
}

// call sends one chat request as tenant, with the header pairs hdr, and
// reads the whole answer.
func call(ctx context.Context, client *http.Client, gwURL, tenant string, body []byte, deadline time.Duration, hdr ...string) (int, http.Header, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gwURL+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-"+tenant)
	req.Header.Set("X-Stainless-Timeout", strconv.FormatFloat(deadline.Seconds(), 'f', -1, 64))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, answer, err
}

// runProviderRounds measures rounds runs without and with the upstream
// policy, alternating, and prints each.
func runProviderRounds(s providerSetup, rounds int) error {
	fmt.Printf("provider scenario: %d tokens per %v (%d TPM) for gpt-4o-mini, four equal tenants offering %.1fx for %v after a %v warm-up, %d output tokens a request, one in four streamed, callers' deadline %v, queue %d, %d rounds\n",
		s.Tokens, s.Window, int64(float64(s.Tokens)*float64(time.Minute)/float64(s.Window)), s.Overload, s.Duration, s.Window, s.Output, s.Deadline, s.Queue, rounds)
	for round := range rounds {
		for _, guard := range []bool{false, true} {
			r, err := runProvider(s, guard)
			if err != nil {
				return err
			}
			fmt.Printf("round %d  %v\n", round+1, r)
		}
	}
	return nil
}
