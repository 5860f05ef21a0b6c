package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

func init() {
	register(&command{
		name:    "loadgen",
		usage:   "[FLAGS]",
		summary: "generate multi-tenant traffic as a request log for replay (deterministic for a seed), or send it to an OpenAI-compatible endpoint",
		run:     runLoadgen,
	})
}

// loadgenConfig describes the traffic to generate.
type loadgenConfig struct {
	tenants     []string
	keys        map[string]string // tenant → API key (HTTP mode)
	zipf        float64
	rate        float64 // requests per second, all tenants but the noisy one
	duration    time.Duration
	start       time.Time
	count       int // most records; 0 means no bound but the duration
	tokens      float64
	tokensSigma float64
	usage       float64
	hold        time.Duration
	noisy       string
	noisyRate   float64
	models      []string
	operation   string
	seed        uint64
}

// A generator yields a deterministic stream of records.
type generator struct {
	cfg   loadgenConfig
	rng   *rand.Rand
	zipf  *rand.Zipf
	at    time.Time
	end   time.Time
	n     int
	keyID map[string]string
}

func newGenerator(cfg loadgenConfig) *generator {
	rng := rand.New(rand.NewPCG(cfg.seed, 0x5eed))
	g := &generator{cfg: cfg, rng: rng, at: cfg.start, end: cfg.start.Add(cfg.duration), keyID: map[string]string{}}
	if cfg.zipf > 1 && len(cfg.tenants) > 1 {
		g.zipf = rand.NewZipf(rng, cfg.zipf, 1, uint64(len(cfg.tenants)-1))
	}
	for t, k := range cfg.keys {
		g.keyID[t] = apikey.Sum(k).ID()
	}
	return g
}

// next fills rec with the next request; it reports false at the end.
func (g *generator) next(rec *requestlog.Record) bool {
	c := &g.cfg
	if c.count > 0 && g.n >= c.count {
		return false
	}
	total := c.rate + c.noisyRate
	g.at = g.at.Add(time.Duration(g.rng.ExpFloat64() / total * float64(time.Second)))
	if !g.at.Before(g.end) {
		return false
	}
	g.n++
	var tenant string
	ti := len(c.tenants) // the noisy tenant's index
	switch {
	case c.noisyRate > 0 && g.rng.Float64()*total < c.noisyRate:
		tenant = c.noisy
	case g.zipf != nil:
		ti = int(g.zipf.Uint64())
		tenant = c.tenants[ti]
	default:
		ti = g.rng.IntN(len(c.tenants))
		tenant = c.tenants[ti]
	}
	mi := g.rng.IntN(len(c.models))
	sigma := c.tokensSigma
	mu := math.Log(c.tokens) - sigma*sigma/2
	est := int64(math.Round(math.Exp(mu + sigma*g.rng.NormFloat64())))
	est = min(max(est, 1), 128_000)
	share := min(max(c.usage+0.4*(g.rng.Float64()-0.5), 0), 1.2)
	actual := int64(math.Round(float64(est) * share))
	var hold time.Duration
	if c.hold > 0 {
		hold = min(time.Duration(g.rng.ExpFloat64()*float64(c.hold)).Round(time.Millisecond), requestlog.MaxRecordDuration)
	}
	*rec = requestlog.Record{
		Time: g.at,
		Request: admission.Request{Tenant: tenant, KeyID: g.keyID[tenant], Addr: tenantAddr(ti), Operation: c.operation, Model: c.models[mi],
			Tokens: est, Cost: est * int64(mi+1) * 150 / 1000},
		Actual:   admission.Usage{Tokens: actual, TokensKnown: true},
		Duration: hold,
	}
	return true
}

// tenantAddr is the client address of the i-th tenant, in the
// benchmarking range 198.18.0.0/15.
func tenantAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18 + byte(i>>16&1), byte(i >> 8), byte(i)})
}

func runLoadgen(ctx context.Context, e *env, fs *flag.FlagSet, args []string) int {
	var c loadgenConfig
	tenants := fs.Int("tenants", 20, "number of tenants (tenant-01, tenant-02, ...); with --keys, the file's tenants")
	fs.Float64Var(&c.zipf, "zipf", 1.2, "Zipf skew of the tenants' shares (> 1; 0 spreads them evenly)")
	fs.Float64Var(&c.rate, "rate", 50, "requests per second of all tenants but the noisy one (Poisson arrivals)")
	fs.DurationVar(&c.duration, "duration", time.Minute, "length of the traffic")
	start := fs.String("start", "2026-01-01T00:00:00Z", "time of the log's start (RFC 3339)")
	fs.IntVar(&c.count, "count", 0, "most requests to generate (0: as many as the rate and duration give)")
	fs.Float64Var(&c.tokens, "tokens", 800, "mean estimated tokens of a request (log-normal)")
	fs.Float64Var(&c.tokensSigma, "tokens-sigma", 0.8, "spread (sigma of the log-normal) of the token estimates; 0 makes every request --tokens")
	fs.Float64Var(&c.usage, "usage", 0.6, "mean share of the estimate actually used (the actual usage in the log)")
	fs.DurationVar(&c.hold, "hold", 1500*time.Millisecond, "mean duration of a request (exponential); 0 settles at once")
	fs.StringVar(&c.noisy, "noisy", "noisy", "name of the noisy tenant")
	fs.Float64Var(&c.noisyRate, "noisy-rate", 0, "requests per second of the noisy tenant on top of --rate (0: no noisy tenant)")
	models := fs.String("models", "gpt-4o-mini,gpt-4o", "comma-separated models, chosen evenly")
	fs.StringVar(&c.operation, "operation", "POST /v1/chat/completions", "the records' operation")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed: the same seed gives the same traffic")
	out := fs.String("out", "-", "where to write the log (- for stdout)")
	target := fs.String("target", "", "send the traffic as HTTP to this base URL (POST /v1/chat/completions) instead of writing a log; a redirect is counted by its status, not followed")
	keysPath := fs.String("keys", "", "file of \"TENANT API-KEY\" lines: the tenants and the key each sends (required with --target)")
	conc := fs.Int("concurrency", 8, "HTTP mode: requests in flight at most")
	maxRequests := fs.Int("max-requests", 1000, "HTTP mode: most requests sent")
	maxTime := fs.Duration("max-time", time.Minute, "HTTP mode: longest run")
	timeout := fs.Duration("timeout", 10*time.Second, "HTTP mode: timeout of one request")
	noPace := fs.Bool("no-pace", false, "HTTP mode: send as fast as --concurrency allows instead of at the log's times")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if fs.NArg() > 0 {
		bad("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.start, err = time.Parse(time.RFC3339Nano, *start); err != nil {
		bad("--start: %q is not an RFC 3339 time", *start)
	}
	if *tenants < 1 || *tenants > 100_000 {
		bad("--tenants must be in [1, 100000]")
	}
	if c.zipf != 0 && !(c.zipf > 1) {
		bad("--zipf must be > 1, or 0 for even shares")
	}
	if !(c.rate > 0) || math.IsInf(c.rate, 0) || !(c.noisyRate >= 0) || math.IsInf(c.noisyRate, 0) {
		bad("--rate must be > 0 and --noisy-rate >= 0")
	}
	if c.duration <= 0 || c.count < 0 {
		bad("--duration must be > 0 and --count >= 0")
	}
	if !(c.tokens >= 1) || !(c.tokensSigma >= 0) || c.tokensSigma > 4 || !(c.usage >= 0) || c.usage > 1.2 {
		bad("--tokens must be >= 1, --tokens-sigma in [0, 4], --usage in [0, 1.2]")
	}
	if c.hold < 0 {
		bad("--hold must be >= 0")
	}
	for _, m := range strings.Split(*models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			c.models = append(c.models, m)
		}
	}
	if len(c.models) == 0 {
		bad("--models names no model")
	}
	if *target != "" {
		if u, err := url.Parse(*target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("--target must be an http(s) URL, not %q", config.RedactURL(*target))
		}
		if *keysPath == "" {
			bad("--target needs --keys")
		}
		if *conc < 1 || *maxRequests < 1 || *maxTime <= 0 || *timeout <= 0 {
			bad("--concurrency, --max-requests, --max-time and --timeout must be > 0")
		}
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(e.stderr, "admitctl loadgen: "+p)
		}
		return 2
	}
	if *keysPath != "" {
		c.tenants, c.keys, err = readKeys(*keysPath)
		if err != nil {
			fmt.Fprintf(e.stderr, "admitctl loadgen: %v\n", err)
			return 1
		}
		if c.noisyRate > 0 && c.keys[c.noisy] == "" {
			fmt.Fprintf(e.stderr, "admitctl loadgen: the noisy tenant %q has no key in %s\n", c.noisy, *keysPath)
			return 1
		}
	} else {
		width := len(strconv.Itoa(*tenants))
		for i := range *tenants {
			c.tenants = append(c.tenants, fmt.Sprintf("tenant-%0*d", max(width, 2), i+1))
		}
	}
	if *target != "" {
		h := httpLoad{target: strings.TrimSuffix(*target, "/") + "/v1/chat/completions", concurrency: *conc,
			maxRequests: *maxRequests, maxTime: *maxTime, timeout: *timeout, pace: !*noPace}
		return h.run(ctx, e, newGenerator(c))
	}
	w := e.stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(e.stderr, "admitctl loadgen: %v\n", err)
			return 1
		}
		defer f.Close()
		w = f
	}
	if err := writeLog(ctx, w, newGenerator(c)); err != nil {
		fmt.Fprintf(e.stderr, "admitctl loadgen: %v\n", err)
		return 1
	}
	return 0
}

// writeLog writes every record of g as JSON Lines.
func writeLog(ctx context.Context, w io.Writer, g *generator) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	var rec requestlog.Record
	var line []byte
	for i := 0; g.next(&rec); i++ {
		if i%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		line = append(rec.AppendJSON(line[:0]), '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// readKeys reads "TENANT KEY" lines; blank lines and # comments are
// skipped. The tenants are returned in file order: the first gets the
// largest share under a Zipf skew.
func readKeys(path string) ([]string, map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var tenants []string
	keys := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, nil, fmt.Errorf("%s:%d: want \"TENANT API-KEY\"", path, i+1)
		}
		if _, dup := keys[f[0]]; dup {
			return nil, nil, fmt.Errorf("%s:%d: tenant %q listed twice", path, i+1, f[0])
		}
		keys[f[0]] = f[1]
		tenants = append(tenants, f[0])
	}
	if len(tenants) == 0 {
		return nil, nil, fmt.Errorf("%s: no tenant", path)
	}
	return tenants, keys, nil
}

// httpLoad sends generated traffic to an OpenAI-compatible endpoint.
type httpLoad struct {
	target      string
	concurrency int
	maxRequests int
	maxTime     time.Duration
	timeout     time.Duration
	pace        bool
}

type result struct {
	status  int // 0: transport error
	latency time.Duration
}

func (h *httpLoad) run(ctx context.Context, e *env, g *generator) int {
	ctx, cancel := context.WithTimeout(ctx, h.maxTime)
	defer cancel()
	var rt http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: h.concurrency}
	if e.transport != nil {
		rt = e.transport
	}
	// A redirect is an answer to count, not to follow: the traffic goes
	// to the target given and nowhere else.
	client := &http.Client{Timeout: h.timeout, Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	type job struct {
		body []byte
		key  string
	}
	jobs := make(chan job)
	results := make(chan result, h.concurrency)
	var wg sync.WaitGroup
	for range h.concurrency {
		wg.Go(func() {
			for j := range jobs {
				results <- h.send(ctx, client, j.body, j.key)
			}
		})
	}
	var collected []result
	done := make(chan struct{})
	go func() {
		for r := range results {
			collected = append(collected, r)
		}
		close(done)
	}()
	began := time.Now()
	var rec requestlog.Record
	sent := 0
dispatch:
	for sent < h.maxRequests && g.next(&rec) {
		if h.pace {
			if d := time.Until(began.Add(rec.Time.Sub(g.cfg.start))); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					break dispatch
				case <-t.C:
				}
			}
		}
		select {
		case jobs <- job{body: chatBody(&rec), key: g.cfg.keys[rec.Tenant]}:
			sent++
		case <-ctx.Done():
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()
	close(results)
	<-done
	elapsed := time.Since(began)
	writeLoadReport(e.stdout, h.target, collected, elapsed, h.concurrency)
	return 0
}

func (h *httpLoad) send(ctx context.Context, client *http.Client, body []byte, key string) result {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.target, bytes.NewReader(body))
	if err != nil {
		return result{}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return result{latency: time.Since(t0)}
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return result{status: resp.StatusCode, latency: time.Since(t0)}
}

// chatBody is an OpenAI-style chat completion request whose prompt is
// about 70% of the record's estimated tokens (one short word per token)
// and whose max_tokens is the rest.
func chatBody(rec *requestlog.Record) []byte {
	prompt := min(max(rec.Tokens*7/10, 1), 16_000)
	out := max(rec.Tokens-prompt, 1)
	var b bytes.Buffer
	b.WriteString(`{"model":`)
	b.WriteString(strconv.Quote(rec.Model))
	b.WriteString(`,"messages":[{"role":"user","content":"`)
	for i := range prompt {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("hello")
	}
	b.WriteString(`"}],"max_tokens":`)
	b.WriteString(strconv.FormatInt(out, 10))
	b.WriteString(`}`)
	return b.Bytes()
}

// writeLoadReport prints status counts and latency percentiles.
func writeLoadReport(w io.Writer, target string, rs []result, elapsed time.Duration, conc int) {
	fmt.Fprintf(w, "sent %d requests to %s in %s (concurrency %d)\n", len(rs), target, elapsed.Round(time.Millisecond), conc)
	counts := map[int]int{}
	lat := make([]time.Duration, 0, len(rs))
	for _, r := range rs {
		counts[r.status]++
		lat = append(lat, r.latency)
	}
	codes := make([]int, 0, len(counts))
	for c := range counts {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		if c == 0 {
			fmt.Fprintf(w, "  errors: %d\n", counts[c])
			continue
		}
		fmt.Fprintf(w, "  status %d: %d\n", c, counts[c])
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(math.Ceil(p*float64(len(lat))))-1)]
	}
	fmt.Fprintf(w, "  latency p50 %s  p90 %s  p99 %s  max %s\n",
		roundLatency(pct(0.5)), roundLatency(pct(0.9)), roundLatency(pct(0.99)), roundLatency(lat[len(lat)-1]))
}

func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
