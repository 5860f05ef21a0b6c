package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// recorder is an observer that keeps what the store and controller report.
type recorder struct {
	admission.NopObserver
	mu       sync.Mutex
	calls    []redisstore.Call
	storeErr []admission.StoreEvent
	breaker  []bool
	expired  int
}

func (r *recorder) StoreCall(c redisstore.Call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) BreakerChanged(_ string, open bool) {
	r.mu.Lock()
	r.breaker = append(r.breaker, open)
	r.mu.Unlock()
}

func (r *recorder) StoreError(e admission.StoreEvent) {
	r.mu.Lock()
	r.storeErr = append(r.storeErr, e)
	r.mu.Unlock()
}

func (r *recorder) LeaseExpired(_ string, n int) {
	r.mu.Lock()
	r.expired += n
	r.mu.Unlock()
}

func (r *recorder) snapshot() (calls []redisstore.Call, breaker []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]redisstore.Call(nil), r.calls...), append([]bool(nil), r.breaker...)
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.calls = nil
	r.mu.Unlock()
}

// scriptCalls returns how many scripts addr has run (EVALSHA, EVAL).
func scriptCalls(t testing.TB, addr string) int {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			f := strings.TrimPrefix(line[strings.Index(line, "calls=")+6:], "")
			v, _ := strconv.Atoi(f[:strings.IndexByte(f, ',')])
			n += v
		}
	}
	return n
}

func newStore(t testing.TB, client redis.UniversalClient, cfg redisstore.Config, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = uniquePrefix()
	}
	s, err := redisstore.New(client, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newController(t testing.TB, st backend.Store, policies ...admission.Policy) *admission.Controller {
	t.Helper()
	for i := range policies {
		policies[i].Store = "redis"
	}
	c, err := admission.New(admission.Config{Policies: policies}, admission.WithStore("redis", st))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// statusOf returns the status of policy name in sts.
func statusOf(t *testing.T, sts []admission.Status, name string) admission.Status {
	t.Helper()
	for _, s := range sts {
		if s.Policy == name {
			return s
		}
	}
	t.Fatalf("no status of %s in %+v", name, sts)
	return admission.Status{}
}

// threePolicies are requests, tokens and concurrency per tenant.
func threePolicies() []admission.Policy {
	return []admission.Policy{
		{Name: "rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket, Limit: 100, Per: time.Minute},
		{Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Minute},
		{Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 2, MaxHold: time.Minute},
	}
}

func TestBatchOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	st := newStore(t, client, redisstore.Config{Timeout: time.Second})
	ctl := newController(t, st, threePolicies()...)
	ctx := context.Background()
	// Another tenant's request loads the scripts of this shape of request
	// and settlement.
	tk, err := ctl.Admit(ctx, admission.Request{Tenant: "warm", Tokens: 300})
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(admission.Usage{Tokens: 120})

	before := scriptCalls(t, srv.Addr)
	tk, err = ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 300})
	if err != nil {
		t.Fatal(err)
	}
	if got := scriptCalls(t, srv.Addr) - before; got != 1 {
		t.Errorf("Admit with 3 policies: %d script calls; want 1", got)
	}
	tk.Settle(admission.Usage{Tokens: 120})
	if got := scriptCalls(t, srv.Addr) - before; got != 2 {
		t.Errorf("Admit + Settle: %d script calls; want 2", got)
	}
	var sts []admission.Status
	tk2, err := ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	sts = tk2.Statuses(sts)
	// 300 settled as 120, + 1 now: 879 of 1000 tokens left (refill adds a
	// little).
	if r := statusOf(t, sts, "tpm").Remaining; r < 879 || r > 890 {
		t.Errorf("tpm remaining after reconcile = %d; want about 879", r)
	}
	tk2.Done()

	// All or nothing: a request the token policy refuses takes nothing
	// from the request and concurrency policies.
	before = scriptCalls(t, srv.Addr)
	_, err = ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 5000})
	if !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("Admit(5000 tokens) = %v; want ErrRateLimited", err)
	}
	if got := scriptCalls(t, srv.Addr) - before; got != 1 {
		t.Errorf("rejected Admit: %d script calls; want 1 (no rollback round trip)", got)
	}
	var held []admission.Ticket
	for i := 0; i < 2; i++ {
		tk, err := ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 1})
		if err != nil {
			t.Fatalf("Admit %d after the rejection: %v (the rejection leaked a permit)", i, err)
		}
		held = append(held, tk)
	}
	if _, err := ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 1}); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("third concurrent Admit = %v; want ErrConcurrencyLimited", err)
	}
	for _, tk := range held {
		tk.Done()
		tk.Done() // settling twice is harmless
	}
	tk, err = ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 1})
	if err != nil {
		t.Fatalf("Admit after releases: %v", err)
	}
	tk.Done()
}

func TestSettleWithoutChangeCostsNothing(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Timeout: time.Second})
	ctl := newController(t, st, threePolicies()[:2]...)
	ctx := context.Background()
	tk, _ := ctl.Admit(ctx, admission.Request{Tenant: "a", Tokens: 10})
	tk.Done()
	before := scriptCalls(t, srv.Addr)
	tk, err := ctl.Admit(ctx, admission.Request{Tenant: "a", Tokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(admission.Usage{Tokens: 10})
	tk.Done()
	if got := scriptCalls(t, srv.Addr) - before; got != 1 {
		t.Errorf("Admit + Settle at the estimate: %d script calls; want 1", got)
	}
}

func TestShadowBatch(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Timeout: time.Second})
	ps := threePolicies()[:2]
	ps[1].Mode = limits.Shadow
	ps[1].Limit = 10
	ctl := newController(t, st, ps...)
	ctx := context.Background()
	var would []string
	for i, want := range []bool{false, false, true, true} {
		tk, err := ctl.Admit(ctx, admission.Request{Tenant: "s", Tokens: 4})
		if err != nil {
			t.Fatalf("Admit %d: %v; a shadow policy never rejects", i, err)
		}
		would = tk.WouldReject(would[:0])
		if got := len(would) == 1; got != want {
			t.Errorf("Admit %d: would reject = %v; want %v", i, got, want)
		}
		tk.Done()
	}
}

func TestServerTime(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	st := newStore(t, client, redisstore.Config{Timeout: time.Second})
	ctx := context.Background()
	server, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// A replica whose clock is 40 minutes slow still counts in the
	// server's window and the server's day.
	skewed := server.Add(-40 * time.Minute)
	fw := admission.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 5, Per: 15 * time.Minute}
	lim, _ := st.Limiter(&fw)
	g, err := backendtest.Acquire(ctx, lim, "k", limitOf(&fw), 1, skewed)
	if err != nil {
		t.Fatal(err)
	}
	if want := server.UnixNano() - server.UnixNano()%int64(15*time.Minute); g.Stamp != want {
		t.Errorf("fixed window stamp = %v; want the server's window %v", time.Unix(0, g.Stamp), time.Unix(0, want))
	}
	if g.Reset <= 0 || g.Reset > 15*time.Minute {
		t.Errorf("reset = %v; want within the window", g.Reset)
	}
	// A caller with no idea of the time at all.
	sw := admission.Policy{Name: "sw", Algorithm: limits.SlidingWindow, Limit: 5, Per: 10 * time.Minute}
	swl, _ := st.Limiter(&sw)
	g, err = backendtest.Acquire(ctx, swl, "k", limitOf(&sw), 1, time.Unix(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if want := server.UnixNano() - server.UnixNano()%int64(10*time.Minute); g.Stamp != want && g.Stamp != want+int64(10*time.Minute) {
		t.Errorf("sliding window stamp with a 1970 hint = %v; want the server's window %v", time.Unix(0, g.Stamp), time.Unix(0, want))
	}
	loc := time.FixedZone("UTC+13", 13*3600)
	q := admission.Policy{Name: "qd", Algorithm: limits.Quota, Limit: 5, Period: limits.PeriodDay, Location: loc}
	ql, _ := st.Limiter(&q)
	yesterday := server.Add(-24 * time.Hour)
	g, err = backendtest.Acquire(ctx, ql, "k", limitOf(&q), 2, yesterday)
	if err != nil {
		t.Fatal(err)
	}
	st0 := server.In(loc)
	day := time.Date(st0.Year(), st0.Month(), st0.Day(), 0, 0, 0, 0, loc)
	if g.Stamp != day.UnixNano() {
		t.Errorf("daily quota stamp = %v; want the server's day %v", time.Unix(0, g.Stamp).In(loc), day)
	}
	if d := g.Reset - day.Add(24*time.Hour).Sub(server); d < -time.Second || d > time.Second {
		t.Errorf("daily quota reset = %v; want about %v", g.Reset, day.Add(24*time.Hour).Sub(server))
	}
	if err := ql.Adjust(ctx, "k", limitOf(&q), &g, 1, yesterday); err != nil || g.Remaining != 2 || g.Taken != 3 {
		t.Errorf("Adjust(+1) = %v, remaining %d taken %d; want nil, 2, 3", err, g.Remaining, g.Taken)
	}
}

// limitOf is the limit a controller evaluates p's partitions with.
func limitOf(p *admission.Policy) *limits.Limit {
	l := p.Base()
	return &l
}

// TestKeysExpire checks every algorithm's keys carry the expiry of their
// state (time to neutral plus the grace) and are gone once it passes.
func TestKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	prefix := uniquePrefix()
	st := newStore(t, client, redisstore.Config{Prefix: prefix, Timeout: time.Second, IdleGrace: 50 * time.Millisecond})
	ms := time.Millisecond
	cases := []struct {
		p    admission.Policy
		n    int64
		keys int
		ttl  time.Duration // upper bound: time to neutral + grace
	}{
		{admission.Policy{Name: "tb", Algorithm: limits.TokenBucket, Limit: 10, Per: 400 * ms}, 5, 1, 200*ms + 50*ms},
		{admission.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 10, Per: 400 * ms}, 5, 1, 400*ms + 50*ms},
		{admission.Policy{Name: "sw", Algorithm: limits.SlidingWindow, Limit: 10, Per: 200 * ms}, 5, 1, 400*ms + 50*ms},
		{admission.Policy{Name: "sl", Algorithm: limits.SlidingLog, Limit: 10, Per: 400 * ms}, 5, 2, 400*ms + 50*ms},
		{admission.Policy{Name: "cc", Algorithm: limits.Concurrency, Limit: 10, MaxHold: 400 * ms}, 5, 1, 400*ms + 50*ms},
		{admission.Policy{Name: "q", Algorithm: limits.Quota, Limit: 10, Period: limits.PeriodFixed, Per: 400 * ms}, 5, 1, 400*ms + 50*ms},
	}
	ctx := context.Background()
	for _, tc := range cases {
		lim, _ := st.Limiter(&tc.p)
		if _, err := backendtest.Acquire(ctx, lim, "tenant", limitOf(&tc.p), tc.n, time.Now()); err != nil {
			t.Fatal(err)
		}
		keys, _ := client.Keys(ctx, prefix+"{tenant}:"+tc.p.Name+":*").Result()
		if len(keys) != tc.keys {
			t.Errorf("%s: keys %q; want %d", tc.p.Name, keys, tc.keys)
		}
		for _, k := range keys {
			ttl, _ := client.PTTL(ctx, k).Result()
			if ttl <= 0 || ttl > tc.ttl+ms {
				t.Errorf("%s: PTTL %s = %v; want in (0, %v]", tc.p.Name, k, ttl, tc.ttl)
			}
		}
	}
	// Redis expires them on its own clock: wait for it, with no deadline.
	poll.Until(t, time.Second, "the keys to expire once their state is neutral", func() bool {
		iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
		return !iter.Next(ctx)
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	if _, err := redisstore.New(plain, redisstore.Config{}); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Errorf("New with a client that ignores deadlines = %v; want an error naming ContextTimeoutEnabled", err)
	}
	if _, err := redisstore.New(c, redisstore.Config{Prefix: "a{b"}); err == nil {
		t.Error("New with a brace in the prefix: nil error")
	}
	if _, err := redisstore.New(nil, redisstore.Config{}); err == nil {
		t.Error("New(nil client): nil error")
	}
}

func TestTag(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"acme", "acme"},
		{"acme\x1fgpt-4o", "acme"},
		{"", "~"},
		{"}x", "~}x"},
		{"\x1fmodel", "~"},
	} {
		if got := redisstore.Tag(tc.key); got != tc.want {
			t.Errorf("Tag(%q) = %q; want %q", tc.key, got, tc.want)
		}
	}
}
