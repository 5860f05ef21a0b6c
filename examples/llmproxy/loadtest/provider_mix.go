package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/weights"
)

// The provider-mix scenario: a simulated provider of 600 RPM and 100,000
// TPM in its own process, whose limiter counts prompts from their
// characters (CharsPerToken), the gateway in front with the README's
// setup (an upstream store, RPM and TPM policies at the provider's
// limits, queued), and four tenants offering open loop 2.34 times its
// capacity: two heavy at 1.05 times each, two light at 0.12 times.
// Every answer is mixOutput tokens long; the clients send max_tokens
// mixOutput, or with mixSetup.NoMaxTokens none, which the provider's
// limiter counts as mixDefaultMaxTokens output tokens (and the policy
// file's models section says so).
const (
	roleProvider = "provider"
	// mixCPTEnv passes the provider's characters per token to the child,
	// mixDefaultEnv what it counts for a request without max_tokens.
	mixCPTEnv           = "LOADTEST_PROVIDER_CPT"
	mixDefaultEnv       = "LOADTEST_PROVIDER_DEFAULT_MAX_TOKENS"
	mixRPM              = 600
	mixTPM              = 100_000
	mixOutput           = 50
	mixDefaultMaxTokens = 256
)

// mixTenants are the tenants and their load, over the provider's
// capacity.
var mixTenants = []struct {
	name string
	load float64
}{{"heavy1", 1.05}, {"heavy2", 1.05}, {"light1", 0.12}, {"light2", 0.12}}

// mixPrompt is an English prompt of 600 bytes.
var mixPrompt = func() string {
	const s = "Summarize the quarterly report for the board in three short bullet points, please. "
	return strings.Repeat(s, 600/len(s)+1)[:600]
}()

// providerChild is the simulated provider the child process serves.
func providerChild() (http.Handler, error) {
	cpt, err := strconv.ParseFloat(os.Getenv(mixCPTEnv), 64)
	if err != nil || !(cpt > 0 && cpt < 100) {
		return nil, fmt.Errorf("%s=%q: want characters per token in (0, 100)", mixCPTEnv, os.Getenv(mixCPTEnv))
	}
	def, err := strconv.ParseInt(os.Getenv(mixDefaultEnv), 10, 64)
	if err != nil || def < 1 || def > 1<<20 {
		return nil, fmt.Errorf("%s=%q: want output tokens in [1, %d]", mixDefaultEnv, os.Getenv(mixDefaultEnv), 1<<20)
	}
	return upstream.New(upstream.Config{
		Latency: 50 * time.Millisecond, OutputTokens: mixOutput,
		Limits: upstream.Limits{Requests: mixRPM, Tokens: mixTPM, Window: time.Minute, CharsPerToken: cpt, DefaultMaxTokens: def},
	}), nil
}

// mixPolicy is the README's setup in front of the provider; with
// defaultMaxTokens (not zero) its models section reserves that for the
// output of a request without max_tokens.
func mixPolicy(queue int, deadline time.Duration, defaultMaxTokens int64) string {
	var b strings.Builder
	if defaultMaxTokens > 0 {
		fmt.Fprintf(&b, "models:\n  gpt-4o-mini: {default_max_tokens: %d}\n", defaultMaxTokens)
	}
	fmt.Fprintf(&b, `version: 1
stores:
  openai: {kind: upstream}
policies:
  - {name: provider-rpm, store: openai, key: [model], algorithm: token_bucket, limit: %d, per: 1m, queue: {size: %d, timeout: %v}}
  - {name: provider-tpm, store: openai, key: [model], unit: tokens, algorithm: token_bucket, limit: %d, per: 1m, queue: {size: %d, timeout: %v}}
tenants:
`, mixRPM, queue, deadline, mixTPM, queue, deadline)
	for _, t := range mixTenants {
		fmt.Fprintf(&b, "  %s: {api_keys: [%s]}\n", t.name, apikey.Sum("sk-"+t.name))
	}
	b.WriteString("identity: {anonymous: deny}\n")
	return b.String()
}

// mixSetup is one run of the scenario.
type mixSetup struct {
	// Factor is the gateway's exact count of the prompt over the
	// provider's (0.75: the exact count is 25% below the provider's).
	Factor           float64
	Warmup, Duration time.Duration
	Deadline         time.Duration
	Queue            int
	Overload         float64 // scales every tenant's load; 1 is 2.34x the provider's capacity
	// NoMaxTokens makes the clients send no max_tokens.
	NoMaxTokens bool
}

// output is what the provider's limiter counts for a request's output.
func (s mixSetup) output() int64 {
	if s.NoMaxTokens {
		return mixDefaultMaxTokens
	}
	return mixOutput
}

// mixRun is what one run measured.
type mixRun struct {
	Sent, OK, Refused, Failed int64
	ProviderSent, Provider429 int64
	// Served is each tenant's answers completed in the measured interval
	// (every answer is as long), Offered the requests it sent in it (its
	// demand); FirstTry its share of requests answered at
	// the first try.
	Served, Offered []int64
	FirstTry        []float64
	Goodput, Jain   float64
	CPT             float64
	// Codes counts the gateway's refusals by error code. Every policy
	// of the scenario is queued: each refusal whose hint says to retry
	// (x-should-retry not false, at most a minute, as the SDKs read it)
	// is retried once after it; Hinted counts them, HintedOK those that
	// then succeeded.
	Codes            map[string]int64
	Hinted, HintedOK int64
}

func (r mixRun) String() string {
	return fmt.Sprintf("provider 429s %d of %d sent (%.2f%%)  goodput %.1f%%  first-try success heavy %.1f%% %.1f%%, light %.1f%% %.1f%%  Jain over served/fair share %.3f  retried after the hint %d of %d refusals, succeeded %.1f%%  (sent %d, ok %d, gateway refusals %v, failures %d; provider chars/token %.2f)",
		r.Provider429, r.ProviderSent, pct(r.Provider429, r.ProviderSent), 100*r.Goodput, 100*r.FirstTry[0], 100*r.FirstTry[1], 100*r.FirstTry[2], 100*r.FirstTry[3], r.Jain,
		r.Hinted, r.Refused, pct(r.HintedOK, r.Hinted), r.Sent, r.OK, r.Codes, r.Failed, r.CPT)
}

// counting counts the upstream's answers by status.
type counting struct {
	next      http.RoundTripper
	sent, tmr atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		c.sent.Add(1)
		if resp.StatusCode == http.StatusTooManyRequests {
			c.tmr.Add(1)
		}
	}
	return resp, err
}

// mixBody returns a chat request of the scenario, with max_tokens
// mixOutput unless noMax.
func mixBody(stream, noMax bool) []byte {
	req := map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": mixPrompt}}}
	if !noMax {
		req["max_tokens"] = mixOutput
	}
	if stream {
		req["stream"], req["stream_options"] = true, map[string]any{"include_usage": true}
	}
	b, _ := json.Marshal(req)
	return b
}

// runMix runs the scenario once.
func runMix(s mixSetup) (mixRun, error) {
	var run mixRun
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		return run, err
	}
	e, err := est.EstimateEndpoint(weights.EndpointChatCompletions, mixBody(false, s.NoMaxTokens))
	if err != nil {
		return run, err
	}
	// The provider's prompt count is the exact one over Factor; its
	// limiter counts (6 + bytes) / CPT.
	providerPrompt := float64(e.InputTokens) / s.Factor
	run.CPT = float64(6+len(mixPrompt)) / providerPrompt
	sim, err := startChild(roleProvider, mixCPTEnv+"="+strconv.FormatFloat(run.CPT, 'f', 4, 64), mixDefaultEnv+"="+strconv.Itoa(mixDefaultMaxTokens))
	if err != nil {
		return run, err
	}
	defer sim.stop()
	ct := &counting{next: gateway.NewTransport()}
	var def int64
	if s.NoMaxTokens {
		def = mixDefaultMaxTokens // what the provider counts, as the operator sets it
	}
	gwURL, stop, err := serveGateway("provider-mix", mixPolicy(s.Queue, s.Deadline, def), "http://"+sim.addr+"/v1", est, nil, gateway.WithTransport(ct))
	if err != nil {
		return run, err
	}
	defer stop()
	// The provider's capacity in requests a second, at its own count.
	perRequest := math.Ceil(providerPrompt) + float64(s.output())
	capacity := min(float64(mixTPM)/perRequest, mixRPM) / 60
	n := len(mixTenants)
	run.Served, run.Offered, run.FirstTry, run.Codes = make([]int64, n), make([]int64, n), make([]float64, n), map[string]int64{}
	firstOK, tried := make([]atomic.Int64, n), make([]atomic.Int64, n)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}, Timeout: s.Deadline + 5*time.Second}
	defer client.CloseIdleConnections()
	start := time.Now()
	from, to := start.Add(s.Warmup), start.Add(s.Warmup+s.Duration)
	// A refused request may wait its hint (at most maxHint) and retry.
	ctx, cancel := context.WithDeadline(context.Background(), to.Add(2*s.Deadline+maxHint+time.Second))
	defer cancel()
	var sent, ok, refused, failed, hinted, hintedOK atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for ti, t := range mixTenants {
		interval := time.Duration(float64(time.Second) / (t.load * s.Overload * capacity))
		wg.Go(func() {
			due := start.Add(time.Duration(ti) * interval / time.Duration(n))
			for i := 0; due.Before(to); i, due = i+1, due.Add(interval) {
				time.Sleep(time.Until(due))
				measured := !due.Before(from)
				wg.Go(func() {
					body := mixBody(i%4 == 3, s.NoMaxTokens)
					status, h, answer, err := call(ctx, client, gwURL, t.name, body, s.Deadline)
					served := func() {
						if now := time.Now(); !now.Before(from) && now.Before(to) {
							mu.Lock()
							run.Served[ti]++
							mu.Unlock()
						}
					}
					if measured {
						sent.Add(1)
						tried[ti].Add(1)
					}
					switch {
					case err != nil:
						if measured {
							failed.Add(1)
						}
					case status == http.StatusOK:
						served()
						if measured {
							ok.Add(1)
							firstOK[ti].Add(1)
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
						wait, retry := retryHint(h)
						if !retry {
							break
						}
						// A client retries once, after the hint, as the
						// SDKs do, numbering its retry.
						time.Sleep(wait)
						status, _, _, err = call(ctx, client, gwURL, t.name, body, s.Deadline, "X-Stainless-Retry-Count", "1")
						if err == nil && status == http.StatusOK {
							served()
						}
						if measured {
							hinted.Add(1)
							if err == nil && status == http.StatusOK {
								hintedOK.Add(1)
							}
						}
					default:
						if measured {
							failed.Add(1)
						}
					}
				})
			}
		})
	}
	// The provider's answers are counted from the measured interval on.
	time.Sleep(time.Until(from))
	sent0, tmr0 := ct.sent.Load(), ct.tmr.Load()
	wg.Wait()
	run.ProviderSent, run.Provider429 = ct.sent.Load()-sent0, ct.tmr.Load()-tmr0
	run.Sent, run.OK, run.Refused, run.Failed = sent.Load(), ok.Load(), refused.Load(), failed.Load()
	run.Hinted, run.HintedOK = hinted.Load(), hintedOK.Load()
	// Offered, in requests: each tenant's demand.
	var total int64
	for i, t := range mixTenants {
		run.Offered[i] = int64(t.load * s.Overload * capacity * s.Duration.Seconds())
		total += run.Served[i]
		if n := tried[i].Load(); n > 0 {
			run.FirstTry[i] = float64(firstOK[i].Load()) / float64(n)
		}
	}
	// Goodput: what was answered over what the provider accepts in the
	// interval, by its tighter limit (tokens, or requests when its count
	// of a request is small).
	run.Goodput = float64(total) / (capacity * s.Duration.Seconds())
	run.Jain = jain(fairRatios(run.Served, run.Offered))
	return run, nil
}

// maxHint is the longest hint a client waits for before it retries, as
// the SDKs do (OpenAI's wait at most a minute).
const maxHint = time.Minute

// retryHint returns whether a client retries a refusal with headers h
// (x-should-retry is not false, the hint at most maxHint) and the wait
// its hint asks for: retry-after-ms, else Retry-After, as the SDKs read
// them.
func retryHint(h http.Header) (time.Duration, bool) {
	if h.Get("X-Should-Retry") == "false" {
		return 0, false
	}
	wait := time.Duration(-1)
	if ms, err := strconv.ParseInt(h.Get("Retry-After-Ms"), 10, 64); err == nil && ms >= 0 && ms <= maxHint.Milliseconds() {
		wait = time.Duration(ms) * time.Millisecond
	} else if sec, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64); err == nil && sec >= 0 && sec <= int64(maxHint/time.Second) {
		wait = time.Duration(sec) * time.Second
	}
	return wait, wait >= 0
}

// fairRatios returns each tenant's served over its max-min fair share of
// the total served, scaled by 1000 (jain takes integers).
func fairRatios(served, demand []int64) []int64 {
	var total int64
	for _, s := range served {
		total += s
	}
	fair := maxMinFair(demand, total)
	out := make([]int64, len(served))
	for i := range served {
		if fair[i] > 0 {
			out[i] = served[i] * 1000 / fair[i]
		}
	}
	return out
}

// maxMinFair returns the max-min fair shares of capacity among demands:
// the smallest demands are met in full, the rest split what is left
// equally.
func maxMinFair(demand []int64, capacity int64) []int64 {
	idx := make([]int, len(demand))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return int(demand[a] - demand[b]) })
	out := make([]int64, len(demand))
	left := capacity
	for k, i := range idx {
		share := left / int64(len(idx)-k)
		out[i] = min(demand[i], share)
		left -= out[i]
	}
	return out
}

// runMixRounds runs rounds of the scenario, prompts 25% below and 25%
// above the provider's count, prints each and reports whether every run
// met the goals.
func runMixRounds(s mixSetup, rounds int) (bool, error) {
	asks := fmt.Sprintf("max_tokens %d", mixOutput)
	if s.NoMaxTokens {
		asks = fmt.Sprintf("no max_tokens (the provider counts %d output tokens, models.gpt-4o-mini.default_max_tokens says so)", mixDefaultMaxTokens)
	}
	fmt.Printf("provider-mix: %d RPM / %d TPM provider in its own process, 4 tenants (2 heavy at 1.05x, 2 light at 0.12x, scaled by %.2f), %d-byte prompts, %s, %d-token answers, one in four streamed, refusals retried once after their hint (unless x-should-retry: false or over 1m), %v warm-up, %v measured, deadline %v, queue %d\n",
		mixRPM, mixTPM, s.Overload, len(mixPrompt), asks, mixOutput, s.Warmup, s.Duration, s.Deadline, s.Queue)
	good := true
	for round := range rounds {
		for _, factor := range []float64{0.75, 1.25} {
			s.Factor = factor
			r, err := runMix(s)
			if err != nil {
				return false, err
			}
			// Most retries after a hint succeed: the hint says when the
			// queue has room, and the room is held for the retry.
			met := r.ProviderSent > 0 && float64(r.Provider429) <= 0.01*float64(r.ProviderSent) && r.Goodput >= 0.95 &&
				r.FirstTry[2] >= 0.95 && r.FirstTry[3] >= 0.95 && r.Jain >= 0.95 &&
				(r.Hinted == 0 || 2*r.HintedOK > r.Hinted)
			good = good && met
			fmt.Printf("round %d  exact count %+.0f%% of the provider's  %v  goals met: %v\n", round+1, 100*(factor-1), r, met)
		}
	}
	return good, nil
}
