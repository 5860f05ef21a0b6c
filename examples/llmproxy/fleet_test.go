package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// redisLeases returns the concurrency leases held in the Redis at addr:
// the lease fields of every partition hash (each holds its sums in a
// field "h" and one field per lease).
func redisLeases(t testing.TB, addr string) int {
	t.Helper()
	keys, err := redistest.Do(addr, "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range strings.Fields(keys) {
		typ, err := redistest.Do(addr, "TYPE", k)
		if err != nil {
			t.Fatal(err)
		}
		if typ != "hash" {
			continue
		}
		fields, err := redistest.Do(addr, "HKEYS", k)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(fields) {
			if strings.HasPrefix(f, "l") {
				n++
			}
		}
	}
	return n
}

// userParams is a small chat request whose user field names it, so the
// order in which the upstream sees requests can be read back.
func userParams(user string) openai.ChatCompletionNewParams {
	p := chatParams("a long story")
	p.User = openai.String(user)
	return p
}

// TestRedisQueueDisconnects: a global cap of 2 kept on Redis, with a
// queue of 4, under streams that never end by themselves. Two streams
// run, three wait in the order they came. A running client leaves
// mid-stream: the oldest waiter starts. A waiting client leaves: its
// place is gone, and the next waiter is served in order once a running
// stream ends. At the end nothing is in flight, on the gateway's
// metrics, in the controller and in Redis, and the cap admits exactly
// two again. The controller's clock is fake and moves only at the end,
// to let a release that timed out be retried, so no queue times out and
// no lease expires.
func TestRedisQueueDisconnects(t *testing.T) {
	srv := redistest.Start(t)
	clock := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	s := startProxy(t, withPolicy(t, `
  - name: global-concurrency
    key: [global]
    algorithm: concurrency
    limit: 2
    queue: {size: 4, timeout: 20s}
    store: redis
    on_store_error: closed
`, []string{"a"}, ""), func(o *options) {
		o.redis = srv.Addr
		o.clock = clock
		o.simRate, o.simTokens = 100, 1_000_000 // until FinishStreams
	})
	c := sdk(s, testKey("a"))
	ctx := ctxT(t, 30*time.Second)
	queued := func() int {
		for _, st := range s.ctl.Stats() {
			if st.Name == "global-concurrency" {
				return st.Queued
			}
		}
		t.Fatal("no stats for policy global-concurrency")
		return 0
	}
	type stream struct {
		cancel  context.CancelFunc
		started chan struct{}
		done    chan streamResult
	}
	var wg sync.WaitGroup
	launch := func(user string) *stream {
		sctx, cancel := context.WithCancel(ctx)
		st := &stream{cancel: cancel, started: make(chan struct{}), done: make(chan streamResult, 1)}
		wg.Go(func() { st.done <- runStream(sctx, c, userParams(user), func() { close(st.started) }) })
		return st
	}
	isStarted := func(st *stream) bool {
		select {
		case <-st.started:
			return true
		default:
			return false
		}
	}
	defer func() { s.sim.FinishStreams(); wg.Wait() }()

	run := []*stream{launch("run0"), launch("run1")}
	for _, st := range run {
		<-st.started
	}
	var wait []*stream
	for i, user := range []string{"wait0", "wait1", "wait2"} {
		wait = append(wait, launch(user))
		eventually(t, 5*time.Second, user+" queues", func() bool { return queued() == i+1 })
	}
	if n := redisLeases(t, srv.Addr); n != 2 {
		t.Errorf("Redis leases with 2 streams running = %d; want 2", n)
	}
	if v := scrape(t, s, "admission_inflight", "policy", "global-concurrency"); v != 2 {
		t.Errorf("admission_inflight with 2 streams running = %v; want 2", v)
	}

	// A running client leaves mid-stream: the oldest waiter starts.
	run[0].cancel()
	<-wait[0].started
	eventually(t, 5*time.Second, "two left waiting", func() bool { return queued() == 2 })
	if isStarted(wait[1]) || isStarted(wait[2]) {
		t.Fatal("a later waiter started before the oldest")
	}
	// A waiting client leaves: its place goes, nothing is taken.
	wait[1].cancel()
	eventually(t, 5*time.Second, "one left waiting", func() bool { return queued() == 1 })
	if r := <-wait[1].done; r.chunks != 0 {
		t.Errorf("the waiter that left got %d chunks; want 0", r.chunks)
	}
	if n := redisLeases(t, srv.Addr); n != 2 {
		t.Errorf("Redis leases with 2 streams running and one waiting = %d; want 2", n)
	}
	// Another running client leaves: the last waiter starts.
	run[1].cancel()
	<-wait[2].started
	if q := queued(); q != 0 {
		t.Errorf("queued after every waiter was served = %d; want 0", q)
	}

	s.sim.FinishStreams()
	for _, st := range []*stream{wait[0], wait[2]} {
		if r := <-st.done; r.err != nil {
			t.Errorf("a served waiter's stream: %v", r.err)
		}
	}
	wg.Wait()
	eventually(t, 5*time.Second, "no permits in flight", func() bool {
		if inflight(t, s) == 0 && redisLeases(t, srv.Addr) == 0 {
			return true
		}
		// A release whose answer outlasted the store's timeout on a
		// loaded machine is retried on the controller's clock.
		clock.Advance(100 * time.Millisecond)
		return false
	})
	for _, st := range s.ctl.Stats() {
		if st.InFlight != 0 || st.Queued != 0 {
			t.Errorf("policy %s: %d in flight, %d queued at the end; want 0 and 0", st.Name, st.InFlight, st.Queued)
		}
	}
	// Upstream order: the two first, then the waiters in order, less the
	// one that left.
	var users []string
	for _, seen := range s.sim.Seen() {
		users = append(users, seen.User)
	}
	if got, want := strings.Join(users, " "), "run0 run1 wait0 wait2"; got != want && got != "run1 run0 wait0 wait2" {
		t.Errorf("upstream saw %q; want %q", got, want)
	}
}

// standing returns the Remaining figure of each policy for the tenant's
// chat call, read without taking anything.
func standing(t testing.TB, s *server, tenant string) map[string]int64 {
	t.Helper()
	sts, err := s.ctl.Remaining(context.Background(), admission.Request{
		Tenant: tenant, Operation: "POST /v1/chat/completions", Model: "gpt-4o-mini",
	}, nil)
	if err != nil {
		t.Fatalf("Remaining: %v", err)
	}
	out := make(map[string]int64, len(sts))
	for _, st := range sts {
		out[st.Policy] = st.Remaining
	}
	return out
}

// TestReloadWhileInFlight: three streams run under a per-tenant cap of 3
// and a tokens-per-window limit of 10000 when the file is edited to a cap
// of 1 and a limit of 20000, on memory and on Redis. The running streams
// go on (the new cap refuses a fourth at once) and, once they end, each
// settles exactly what it used in the partition the new limit shares:
// the window's remaining figure is the new limit less the three streams'
// usage, nothing is left in flight, and the new cap admits exactly one.
// The controller's clock is fake and moves only to let a release that
// timed out be retried.
func TestReloadWhileInFlight(t *testing.T) {
	const policies = `
  - name: tenant-concurrency
    key: [tenant]
    algorithm: concurrency
    limit: %d
    store: %s
  - name: tokens
    key: [tenant]
    unit: tokens
    algorithm: fixed_window
    limit: %d
    per: 1h
    store: %s
`
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var srv *redistest.Server
			if store == "redis" {
				srv = redistest.Start(t)
			}
			opt := withPolicy(t, fmt.Sprintf(policies, 3, store, 10000, store), []string{"a"}, "")
			var path string
			clock := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
			s := startProxy(t, opt, func(o *options) {
				path = o.configPath
				if srv != nil {
					o.redis = srv.Addr
				}
				o.clock = clock
				o.simRate, o.simTokens = 100, 1_000_000 // until FinishStreams
			})
			c := sdk(s, testKey("a"))
			ctx := ctxT(t, 30*time.Second)
			var wg sync.WaitGroup
			defer func() { s.sim.FinishStreams(); wg.Wait() }()
			usage := make([]int64, 3)
			errs := make([]error, 3)
			var started sync.WaitGroup
			for i := range usage {
				started.Add(1)
				wg.Go(func() {
					p := chatParams("a long story")
					p.MaxTokens = openai.Int(200)
					p.StreamOptions.IncludeUsage = openai.Bool(true)
					st := c.Chat.Completions.NewStreaming(ctx, p)
					defer st.Close()
					first := true
					for st.Next() {
						if first {
							first = false
							started.Done()
						}
						if u := st.Current().Usage.TotalTokens; u > 0 {
							usage[i] = u
						}
					}
					errs[i] = st.Err()
				})
			}
			started.Wait()
			before := standing(t, s, "a")
			if before["tenant-concurrency"] != 0 || before["tokens"] >= 10000 {
				t.Fatalf("with 3 streams running: %v; want no concurrency left and tokens reserved", before)
			}
			writePolicy(t, path, fmt.Sprintf(policies, 1, store, 20000, store), []string{"a"}, "")
			eventually(t, 10*time.Second, "the edited file is applied", func() bool {
				for _, p := range s.ctl.Policies() {
					if p.Name == "tokens" {
						return p.Limit == 20000
					}
				}
				return false
			})
			_, err := c.Chat.Completions.New(ctx, chatParams("one more"))
			if statusOf(err) != http.StatusTooManyRequests || codeOf(err) != "concurrency_limit_exceeded" {
				t.Fatalf("a fourth call under the new cap of 1 with 3 running: %v; want 429 concurrency_limit_exceeded", err)
			}
			s.sim.FinishStreams()
			wg.Wait()
			var used int64
			for i := range usage {
				if errs[i] != nil || usage[i] == 0 {
					t.Fatalf("stream %d: usage %d, err %v", i, usage[i], errs[i])
				}
				used += usage[i]
			}
			eventually(t, 5*time.Second, "the streams settled", func() bool {
				st := standing(t, s, "a")
				return st["tenant-concurrency"] == 1 && st["tokens"] == 20000-used
			})
			if st := standing(t, s, "a"); st["tenant-concurrency"] != 1 || st["tokens"] != 20000-used {
				t.Fatalf("after the streams ended: %v; want tenant-concurrency 1, tokens %d (20000 less %d used)", st, 20000-used, used)
			}
			// A release whose answer did not come within the store's
			// timeout (a loaded machine) but that Redis applied is still
			// counted in flight until its retry lands: the retries run on
			// the controller's clock, moved here a second at a time (the
			// window of the tokens is an hour).
			poll.Until(t, 5*time.Second, "nothing left in flight", func() bool {
				if inflight(t, s) == 0 {
					return true
				}
				clock.Advance(time.Second)
				return false
			})
			if srv != nil {
				if n := redisLeases(t, srv.Addr); n != 0 {
					t.Errorf("Redis leases after the streams ended = %d; want 0", n)
				}
			}
			// The new cap admits exactly one.
			after := chatParams("after")
			after.MaxTokens = openai.Int(5)
			cc, err := c.Chat.Completions.New(ctx, after)
			if err != nil {
				t.Fatalf("a call after the streams ended: %v", err)
			}
			if st := standing(t, s, "a"); st["tokens"] != 20000-used-cc.Usage.TotalTokens {
				t.Errorf("after one more call: tokens remaining %d; want %d", st["tokens"], 20000-used-cc.Usage.TotalTokens)
			}
		})
	}
}

// TestReplicasPlansUnderScrapes: two replicas on one Redis with tenant
// plans (a free tenant of 3 requests, a pro tenant of 7, a tenant with an
// override of 2 and one on the policy's own 5), every tenant sending 12
// calls spread over both replicas at once, while a loop on each replica
// reads its metrics, status page, status JSON and rollout report. Each
// tenant is admitted exactly its limit, and the per-tenant decision
// metrics summed over the replicas say so: reading changes nothing.
func TestReplicasPlansUnderScrapes(t *testing.T) {
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	var b strings.Builder
	b.WriteString(`version: 1
policies:
  - {name: rpd, key: [tenant], algorithm: token_bucket, limit: 5, per: 24h, store: redis, on_store_error: closed}
plans:
  free: {rpd: {limit: 3}}
  pro: {rpd: {limit: 7}}
tenants:
`)
	want := map[string]int{"free": 3, "pro": 7, "over": 2, "own": 5}
	for _, tn := range []string{"free", "pro", "over", "own"} {
		fmt.Fprintf(&b, "  %s:\n    api_keys: [%s]\n", tn, apikey.Sum(testKey(tn)))
		switch tn {
		case "free", "pro":
			fmt.Fprintf(&b, "    plan: %s\n", tn)
		case "over":
			b.WriteString("    plan: free\n    overrides: {rpd: {limit: 2}}\n")
		}
	}
	b.WriteString("identity:\n  anonymous: deny\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	opt := func(o *options) { o.configPath, o.redis = path, srv.Addr }
	replicas := []*server{startProxy(t, opt), startProxy(t, opt)}

	stop := make(chan struct{})
	var readers sync.WaitGroup
	var reads atomic.Int64
	for _, s := range replicas {
		readers.Go(func() {
			for {
				for _, p := range []string{s.file.Metrics.Path, "/status", "/status.json", "/debug/rollout"} {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := http.Get(s.OpsURL + p)
					if err != nil {
						t.Errorf("GET %s: %v", p, err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("GET %s: %d", p, resp.StatusCode)
					}
					reads.Add(1)
				}
			}
		})
	}
	// The readers read before, while and after the calls.
	eventually(t, 5*time.Second, "the readers read", func() bool { return reads.Load() >= 8 })
	body := `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"Hello"}]}`
	var mu sync.Mutex
	got := map[string]map[int]int{}
	var calls sync.WaitGroup
	for tn := range want {
		got[tn] = map[int]int{}
		for i := range 12 {
			calls.Go(func() {
				resp, _ := post(t, replicas[i%2], "/v1/chat/completions", testKey(tn), body)
				mu.Lock()
				got[tn][resp.StatusCode]++
				mu.Unlock()
			})
		}
	}
	calls.Wait()
	n := reads.Load()
	eventually(t, 5*time.Second, "the readers read after the calls", func() bool { return reads.Load() >= n+8 })
	close(stop)
	readers.Wait()
	for tn, w := range want {
		if got[tn][http.StatusOK] != w || got[tn][http.StatusTooManyRequests] != 12-w {
			t.Errorf("tenant %s: statuses %v; want %d × 200 and %d × 429", tn, got[tn], w, 12-w)
		}
		var admitted, rejected float64
		count := func() {
			admitted, rejected = 0, 0
			for _, s := range replicas {
				admitted += scrape(t, s, "admission_tenant_decisions_total", "tenant", tn, "decision", "admitted")
				rejected += scrape(t, s, "admission_tenant_decisions_total", "tenant", tn, "decision", "rejected")
			}
		}
		// An admission counts when settled, a moment after its answer.
		eventually(t, 5*time.Second, "tenant "+tn+"'s calls counted", func() bool {
			count()
			return admitted >= float64(w)
		})
		if admitted != float64(w) || rejected != float64(12-w) {
			t.Errorf("tenant %s: the replicas' metrics count %v admitted, %v rejected; want %d and %d", tn, admitted, rejected, w, 12-w)
		}
	}
}

// TestRedisPausedWhileStreamsEnd: two streams hold a per-tenant cap of 2
// kept on Redis when Redis stops taking writes (CLIENT PAUSE WRITE), and
// then end. Their releases fail and are retried; meanwhile the permits
// still count in flight, and a new call is decided by the policy's
// on_store_error: admitted (open), refused with 503 (closed), or by a
// local limiter of the policy's size (local). Once Redis answers again the
// retries land, each once: nothing is held in flight or in Redis, and
// the cap admits exactly two again. The controller's clock is fake: a
// retry is due only when the test moves it.
func TestRedisPausedWhileStreamsEnd(t *testing.T) {
	for _, mode := range []string{"open", "closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			clock := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
			s := startProxy(t, withPolicy(t, `
  - name: tenant-concurrency
    key: [tenant]
    algorithm: concurrency
    limit: 2
    store: redis
    on_store_error: `+mode+`
`, []string{"a"}, ""), func(o *options) {
				o.redis = srv.Addr
				o.clock = clock
				o.simRate, o.simTokens = 100, 1_000_000 // until FinishStreams
			})
			c := sdk(s, testKey("a"))
			ctx := ctxT(t, 30*time.Second)
			var wg sync.WaitGroup
			defer func() { s.sim.FinishStreams(); wg.Wait() }()
			var started sync.WaitGroup
			errs := make([]error, 2)
			for i := range errs {
				started.Add(1)
				wg.Go(func() { errs[i] = runStream(ctx, c, chatParams("a long story"), started.Done).err })
			}
			started.Wait()
			if n := redisLeases(t, srv.Addr); n != 2 {
				t.Fatalf("Redis leases with 2 streams running = %d; want 2", n)
			}
			resume := pauseRedisWrites(t, srv.Addr)
			s.sim.FinishStreams()
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("stream %d: %v", i, err)
				}
			}
			eventually(t, 5*time.Second, "both releases failed", func() bool {
				return scrape(t, s, "admission_release_retries_total", "outcome", "retrying") == 2
			})
			if v := inflight(t, s); v != 2 {
				t.Errorf("admission_inflight while the releases cannot land = %v; want 2", v)
			}
			short := chatParams("short")
			short.MaxTokens = openai.Int(3)
			call := func() error {
				_, err := c.Chat.Completions.New(ctx, short)
				return err
			}
			switch mode {
			case "open":
				for i := range 3 {
					if err := call(); err != nil {
						t.Errorf("call %d during the pause, failing open: %v; want admitted", i, err)
					}
				}
			case "closed":
				for i := range 3 {
					if err := call(); statusOf(err) != http.StatusServiceUnavailable {
						t.Errorf("call %d during the pause, failing closed: %v; want 503", i, err)
					}
				}
			case "local":
				// The local limiter holds 2; two calls held at once take
				// them, a third is refused.
				var tks []admission.Ticket
				for range 2 {
					tk, err := s.ctl.TryAdmit(ctx, admission.Request{Tenant: "a", Operation: "POST /v1/chat/completions", Model: "gpt-4o-mini"})
					if err != nil {
						t.Fatalf("TryAdmit during the pause, failing to the local limiter: %v; want admitted", err)
					}
					tks = append(tks, tk)
				}
				if err := call(); statusOf(err) != http.StatusTooManyRequests {
					t.Errorf("a third call during the pause with the local limiter full: %v; want 429", err)
				}
				for _, tk := range tks {
					tk.Done()
				}
				if err := call(); err != nil {
					t.Errorf("a call during the pause with the local limiter free: %v; want admitted", err)
				}
			}
			if n := scrape(t, s, "admission_release_retries_total", "outcome", "landed"); n != 0 {
				t.Errorf("releases landed during the pause: %v; want 0", n)
			}
			resume()
			eventually(t, 10*time.Second, "the retried releases land", func() bool {
				clock.Advance(100 * time.Millisecond)
				return scrape(t, s, "admission_release_retries_total", "outcome", "landed") == 2
			})
			if n := redisLeases(t, srv.Addr); n != 0 {
				t.Errorf("Redis leases after the releases landed = %d; want 0", n)
			}
			if v := inflight(t, s); v != 0 {
				t.Errorf("admission_inflight after the releases landed = %v; want 0", v)
			}
			// The cap admits exactly two again, on Redis (once the
			// breaker lets calls through).
			req := admission.Request{Tenant: "a", Operation: "POST /v1/chat/completions", Model: "gpt-4o-mini"}
			var tks []admission.Ticket
			eventually(t, 10*time.Second, "a decision taken on Redis", func() bool {
				tk, err := s.ctl.TryAdmit(ctx, req)
				if err != nil {
					return false
				}
				if redisLeases(t, srv.Addr) == 1 {
					tks = append(tks, tk)
					return true
				}
				tk.Done()
				return false
			})
			tk, err := s.ctl.TryAdmit(ctx, req)
			if err != nil {
				t.Fatalf("second TryAdmit after the pause: %v", err)
			}
			tks = append(tks, tk)
			if _, err := s.ctl.TryAdmit(ctx, req); !errors.Is(err, admission.ErrConcurrencyLimited) {
				t.Errorf("third TryAdmit after the pause = %v; want ErrConcurrencyLimited", err)
			}
			if n := redisLeases(t, srv.Addr); n != 2 {
				t.Errorf("Redis leases with two admitted = %d; want 2", n)
			}
			for _, tk := range tks {
				tk.Done()
			}
			if n := redisLeases(t, srv.Addr); n != 0 {
				t.Errorf("Redis leases at the end = %d; want 0", n)
			}
			if n := scrape(t, s, "admission_release_retries_total", "outcome", "landed"); n != 2 {
				t.Errorf("releases landed = %v; want 2", n)
			}
		})
	}
}

// pauseRedisWrites makes the Redis at addr hold every script until the
// returned function resumes it, once Redis has dropped the calls whose
// clients gave up (so none of them lands later).
func pauseRedisWrites(t *testing.T, addr string) (resume func()) {
	t.Helper()
	if _, err := redistest.Do(addr, "CLIENT", "PAUSE", "3600000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		eventually(t, time.Second, "Redis to drop the calls that timed out", func() bool {
			info, err := redistest.Do(addr, "INFO", "clients")
			return err == nil && strings.Contains(info, "blocked_clients:0\r\n")
		})
		if _, err := redistest.Do(addr, "CLIENT", "UNPAUSE"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestShadowPredictsEnforcement: the same traffic (three tenants, calls
// of several sizes, some streamed, one a second of a fake clock) goes
// through a gateway with a tokens candidate in shadow, then through a
// fresh one with the candidate enforced. The calls the shadow run
// reported would_reject, one by one, are exactly those the enforced run
// refused with 429, and every other call was admitted in both.
func TestShadowPredictsEnforcement(t *testing.T) {
	const policies = `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1000, per: 1m}
  - name: tpm-candidate
    match: {routes: [/v1/chat/completions], methods: [POST]}
    key: [tenant]
    unit: tokens
    algorithm: token_bucket
    limit: 200
    per: 1m
    mode: %s
`
	type call struct {
		tenant string
		body   string
	}
	var calls []call
	for i := range 40 {
		tn := []string{"a", "b", "c"}[i%3]
		words := strings.Repeat("hello there ", 1+(i*7)%13)
		stream := ""
		if i%4 == 1 {
			stream = `"stream":true,`
		}
		calls = append(calls, call{tn, fmt.Sprintf(`{"model":"gpt-4o-mini",%s"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, stream, 10+(i*11)%40, words)})
	}
	run := func(mode string) (refused []int, wouldReject []int) {
		clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		s := startProxy(t, withPolicy(t, fmt.Sprintf(policies, mode), []string{"a", "b", "c"}, ""), func(o *options) {
			o.clock = clk
			o.simRate, o.simTokens = 0, 20
		})
		prev := 0.0
		for i, c := range calls {
			resp, body := post(t, s, "/v1/chat/completions", testKey(c.tenant), c.body)
			switch resp.StatusCode {
			case http.StatusOK:
			case http.StatusTooManyRequests:
				refused = append(refused, i)
			default:
				t.Fatalf("%s run, call %d: status %d: %s", mode, i, resp.StatusCode, body)
			}
			// The call is settled (its tenant's admitted decision
			// counted) before the clock moves on.
			admitted := func() float64 {
				return scrape(t, s, "admission_tenant_decisions_total", "policy", "rpm", "decision", "admitted")
			}
			okSoFar := float64(i + 1 - len(refused))
			eventually(t, 5*time.Second, fmt.Sprintf("%s run, call %d settled", mode, i), func() bool { return admitted() == okSoFar })
			w := scrape(t, s, "admission_decisions_total", "policy", "tpm-candidate", "decision", "would_reject")
			if w != prev {
				wouldReject = append(wouldReject, i)
				prev = w
			}
			clk.Advance(time.Second)
		}
		return refused, wouldReject
	}
	shadowRefused, predicted := run("shadow")
	enforced, enforcedWould := run("enforce")
	if len(shadowRefused) != 0 || len(enforcedWould) != 0 {
		t.Fatalf("shadow run refused %v, enforced run reported would_reject for %v; want neither", shadowRefused, enforcedWould)
	}
	if len(predicted) == 0 {
		t.Fatal("the traffic met no would_reject; want some")
	}
	if fmt.Sprint(predicted) != fmt.Sprint(enforced) {
		t.Errorf("shadow predicted refusals of calls %v; enforcement refused %v", predicted, enforced)
	}
}
