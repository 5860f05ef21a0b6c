package requestlog_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow/internal/shadowtest"
	"github.com/sluicehq/sluice/shadow/replay"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// bubbleClock is the time of a synctest bubble.
type bubbleClock struct{}

func (bubbleClock) Now() time.Time { return time.Now() }
func (bubbleClock) AfterFunc(d time.Duration, f func()) admission.Timer {
	return time.AfterFunc(d, f)
}

// liveRequest is one request of the known traffic.
type liveRequest struct {
	at       time.Duration // after the start
	req      admission.Request
	work     time.Duration
	actual   int64
	priority int
}

// knownTraffic is n requests of a few tenants, one noisy, about 30 a
// second. Arrivals and durations are drawn to the nanosecond, so that no
// two events of the live run (an arrival, an end, a queue's timer) fall
// on the same instant, where goroutines would go in any order.
func knownTraffic(n int, seed uint64) []liveRequest {
	rng := rand.New(rand.NewPCG(seed, 1))
	tenants := []string{"noisy", "noisy", "noisy", "acme", "globex", "initech"}
	out := make([]liveRequest, n)
	at := time.Duration(0)
	for i := range out {
		at += time.Duration(1 + rng.Int64N(60e6))
		tenant := tenants[rng.IntN(len(tenants))]
		tokens := int64(100 + rng.IntN(900))
		out[i] = liveRequest{
			at: at,
			req: admission.Request{
				Tenant: tenant, KeyID: "key-" + tenant, Operation: "POST /v1/chat/completions", Model: "gpt-4o",
				Tokens: tokens, Priority: rng.IntN(2),
			},
			work:   time.Duration(50e6 + rng.Int64N(400e6)),
			actual: tokens / 2,
		}
	}
	return out
}

// runLive sends traffic through a controller of cfg in a synctest bubble,
// each request on its own goroutine (waiting in queues as the gateway's
// would), logs every request with a Writer at path and returns the
// live counts.
func runLive(t *testing.T, cfg admission.Config, traffic []liveRequest, path string) *shadowtest.LiveCounts {
	t.Helper()
	live := shadowtest.NewLiveCounts()
	synctest.Test(t, func(t *testing.T) {
		ctl, err := admission.New(cfg, admission.WithClock(bubbleClock{}), admission.WithObserver(live))
		if err != nil {
			t.Fatal(err)
		}
		rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path, Buffer: len(traffic)})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		for _, lr := range traffic {
			time.Sleep(time.Until(start.Add(lr.at)))
			wg.Go(func() {
				arrived := time.Now()
				tk, err := ctl.Admit(context.Background(), lr.req)
				if err != nil {
					rl.Log(&lr.req, arrived, admission.Usage{}, 0)
					return
				}
				time.Sleep(lr.work)
				u := admission.Usage{Tokens: lr.actual, TokensKnown: true}
				tk.Settle(u)
				rl.Log(&lr.req, arrived, u, lr.work)
			})
		}
		wg.Wait()
		if err := rl.Close(); err != nil {
			t.Fatal(err)
		}
		if rl.Dropped() != 0 || rl.Written() != uint64(len(traffic)) {
			t.Fatalf("request log wrote %d, dropped %d; want %d, 0", rl.Written(), rl.Dropped(), len(traffic))
		}
	})
	return live
}

// compareLive replays the log at path through cfg and checks the replay
// gives the live figures back, per policy. The live run's instants are
// all distinct and the replay reorders the log (written as requests
// end) back into arrival order, so the tolerance is zero.
func compareLive(t *testing.T, cfg admission.Config, live *shadowtest.LiveCounts, path string, n int) replay.Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := replay.Run(context.Background(), f, replay.Config{Reorder: 5 * time.Second}, replay.Candidate{Name: "live", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != int64(n) || rep.Reordered != 0 {
		t.Fatalf("replayed %d records (%d reordered), want %d (0)", rep.Records, rep.Reordered, n)
	}
	var got, want []string
	for _, p := range rep.Candidates[0].Policies {
		got = append(got, fmt.Sprintf("%s admitted=%d rejected=%d would=%d", p.Policy, p.Admitted, p.Rejected, p.WouldReject))
		want = append(want, fmt.Sprintf("%s admitted=%d rejected=%d would=%d", p.Policy, live.Admitted[p.Policy], live.Rejected[p.Policy], live.WouldReject[p.Policy]))
	}
	if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Errorf("replay:\n%s\nlive:\n%s", g, w)
	}
	return rep
}

func TestRequestLogReplayGivesLiveFigures(t *testing.T) {
	cfg := admission.Config{Policies: []admission.Policy{
		{Name: "tenant-rps", Key: shadowtest.TenantKey(), Algorithm: limits.TokenBucket, Limit: 8, Per: time.Second, Burst: 4},
		{Name: "tenant-concurrency", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 5},
		{Name: "tenant-tpm", Key: shadowtest.TenantKey(), Unit: limits.UnitTokens, Algorithm: limits.SlidingWindow, Limit: 15000, Per: 10 * time.Second, Mode: limits.Shadow},
	}}
	traffic := knownTraffic(2000, 1)
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	live := runLive(t, cfg, traffic, path)
	rep := compareLive(t, cfg, live, path, len(traffic))
	// The traffic must exercise every policy for the comparison to mean
	// something.
	for _, p := range rep.Candidates[0].Policies {
		if p.Admitted == 0 || p.Rejected+p.WouldReject == 0 {
			t.Errorf("policy %s: admitted %d, refused %d: the traffic does not test it", p.Policy, p.Admitted, p.Rejected+p.WouldReject)
		}
	}
}

// The log holds identity ids and amounts, never more than the request.
func TestRequestLogRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 12, 0, 0, 250e6, time.FixedZone("x", 3600))
	r := admission.Request{Tenant: "acme", KeyID: "k1", User: "u", Operation: "POST /v1/chat/completions", Model: "gpt-4o", Tokens: 900, Cost: 12,
		Units: []admission.UnitAmount{{Unit: "searches", Amount: 2}, {Unit: "images", Amount: 1}}}
	rl.Log(&r, at, admission.Usage{Tokens: 300, TokensKnown: true, Units: []admission.UnitAmount{{Unit: "images", Amount: 0}}}, 1500*time.Millisecond)
	rl.Log(&admission.Request{Tenant: "globex", Operation: "GET /v1/models"}, at, admission.Usage{}, 0)
	rl.LogBeginOnly(&admission.Request{Tenant: "globex", KeyID: "k2", Operation: "POST /v1/chat/completions"}, at)
	if err := rl.Close(); err != nil {
		t.Fatal(err)
	}
	rl.Log(&r, at, admission.Usage{}, 0) // after Close: ignored
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2026-01-01T11:00:00.25Z","tenant":"acme","key_id":"k1","user":"u","operation":"POST /v1/chat/completions","model":"gpt-4o","tokens":900,"cost":12,"units":{"images":1,"searches":2},"actual":{"tokens":300,"units":{"images":0}},"duration":"1.5s"}
{"time":"2026-01-01T11:00:00.25Z","tenant":"globex","operation":"GET /v1/models"}
{"time":"2026-01-01T11:00:00.25Z","tenant":"globex","key_id":"k2","operation":"POST /v1/chat/completions","begin_only":true}
`
	if string(b) != want {
		t.Errorf("log:\n%s\nwant:\n%s", b, want)
	}
}

// A request's session is logged as the id, or with HashSessions as its
// pseudonym, which reads back as a session and tells sessions apart.
func TestRequestLogSessions(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, hash := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "r.jsonl")
		rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path, HashSessions: hash})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"run-1", "run-2", "run-1", ""} {
			rl.Log(&admission.Request{Tenant: "acme", Session: s}, at, admission.Usage{}, 0)
		}
		if err := rl.Close(); err != nil {
			t.Fatal(err)
		}
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		lr := requestlog.NewReader(fh)
		for {
			var rec requestlog.Record
			if err := lr.Read(&rec); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			got = append(got, rec.Session)
		}
		fh.Close()
		want := []string{"run-1", "run-2", "run-1", ""}
		if hash {
			h1, h2 := apikey.HashSession("run-1"), apikey.HashSession("run-2")
			want = []string{h1, h2, h1, ""}
			if h1 == h2 || len(h1) != 34 || !apikey.ValidSession(h1, 0) {
				t.Errorf("pseudonyms %q, %q; want two different valid session ids of 34 bytes", h1, h2)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("hash=%v: sessions read back %q; want %q", hash, got, want)
		}
	}
}

// Rotation keeps at most MaxFiles old files, each under MaxBytes, and
// loses no record.
func TestRequestLogRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.jsonl")
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path, MaxBytes: requestlog.MaxRecordBytes, MaxFiles: 2, Buffer: 10000})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5000 {
		rl.Log(&admission.Request{Tenant: fmt.Sprintf("tenant-%04d", i)}, at, admission.Usage{}, 0)
	}
	if err := rl.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(path + "*")
	if len(files) != 3 {
		t.Fatalf("files %v, want the log and 2 rotated", files)
	}
	lines := 0
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if len(b) > requestlog.MaxRecordBytes {
			t.Errorf("%s: %d bytes, more than %d", f, len(b), requestlog.MaxRecordBytes)
		}
		lines += strings.Count(string(b), "\n")
	}
	// 5000 records of 62 bytes are about 310 kB: the oldest files went.
	if total := int(rl.Written()); total != 5000 || lines >= total || lines < 2*requestlog.MaxRecordBytes/62 {
		t.Errorf("written %d, %d lines kept in 3 files", total, lines)
	}
	b, _ := os.ReadFile(path + ".2")
	first, _, _ := strings.Cut(string(b), "\n")
	b, _ = os.ReadFile(path)
	if !strings.Contains(string(b), `"tenant-4999"`) || strings.Contains(first, `"tenant-0000"`) {
		t.Errorf("the newest record is not in the current file, or the oldest was kept")
	}
}

// A full buffer drops records and counts them instead of blocking.
func TestRequestLogDropsWhenFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path, Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 20000
	for range n {
		rl.Log(&admission.Request{Tenant: "acme"}, at, admission.Usage{}, 0)
	}
	if err := rl.Close(); err != nil {
		t.Fatal(err)
	}
	if rl.Dropped() == 0 || rl.Dropped()+rl.Written() != n {
		t.Errorf("dropped %d + written %d, want some dropped and %d in all", rl.Dropped(), rl.Written(), n)
	}
	b, _ := os.ReadFile(path)
	if got := strings.Count(string(b), "\n"); uint64(got) != rl.Written() {
		t.Errorf("%d lines, Written %d", got, rl.Written())
	}
}

// Sampling keeps whole tenants, marks the records, and the replay
// refuses a sampled log for a policy that mixes tenants.
func TestRequestLogSampling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path, SampleTenants: 4})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 400 {
		for range 3 {
			rl.Log(&admission.Request{Tenant: fmt.Sprintf("t%d", i)}, at, admission.Usage{}, 0)
		}
	}
	if err := rl.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	perTenant := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec requestlog.Record
		if err := requestlog.ParseRecord([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Sample != 4 {
			t.Fatalf("record %s: sample %d, want 4", line, rec.Sample)
		}
		perTenant[rec.Tenant]++
	}
	for tenant, n := range perTenant {
		if n != 3 {
			t.Errorf("tenant %s: %d of its 3 requests logged", tenant, n)
		}
	}
	if len(perTenant) < 60 || len(perTenant) > 140 {
		t.Errorf("%d tenants of 400 kept, want about 100", len(perTenant))
	}
	rpm := admission.Policy{Name: "rpm", Key: shadowtest.TenantKey(), Algorithm: limits.TokenBucket, Limit: 2, Per: time.Second}
	perTenantPolicy := replay.Candidate{Name: "tenant", Config: admission.Config{Policies: []admission.Policy{rpm}}}
	rep, err := replay.Run(context.Background(), strings.NewReader(string(b)), replay.Config{}, perTenantPolicy)
	if err != nil || rep.SampleTenants != 4 || rep.Records != int64(3*len(perTenant)) {
		t.Errorf("replay of a sampled log through a per-tenant policy: %v, sample %d, records %d", err, rep.SampleTenants, rep.Records)
	}
	global := admission.Policy{Name: "global", Algorithm: limits.TokenBucket, Limit: 100, Per: time.Second}
	_, err = replay.Run(context.Background(), strings.NewReader(string(b)), replay.Config{}, replay.Candidate{Name: "global", Config: admission.Config{Policies: []admission.Policy{global}}})
	if !errors.Is(err, replay.ErrSampledLog) || !strings.Contains(err.Error(), "policy global") {
		t.Errorf("replay of a sampled log through a global policy: %v, want ErrSampledLog naming the policy", err)
	}
}

// A queued policy: the replay waits requests in the candidate's queue
// (size, timeout, priority, fairness) and gets back what the controller
// did live, where each request waited on its own goroutine.
func TestRequestLogReplayQueuesAsLive(t *testing.T) {
	cfg := admission.Config{Policies: []admission.Policy{
		{Name: "tenant-rps", Key: shadowtest.TenantKey(), Algorithm: limits.TokenBucket, Limit: 12, Per: time.Second, Burst: 6},
		{Name: "tenant-concurrency", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 3,
			Queue: limits.Queue{Size: 4, Timeout: 250*time.Millisecond + 250*time.Microsecond}},
		{Name: "shared-rate", Algorithm: limits.TokenBucket, Limit: 30, Per: time.Second, Burst: 10,
			Mode: limits.Shadow},
	}}
	traffic := knownTraffic(2000, 2)
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	live := runLive(t, cfg, traffic, path)
	rep := compareLive(t, cfg, live, path, len(traffic))
	q := rep.Candidates[0].Policies[2]
	if q.Reasons["queue_full"] == 0 || q.Reasons["queue_timeout"] == 0 || q.Admitted == 0 {
		t.Errorf("queued policy: %+v; the traffic must fill the queue, time out and admit", q)
	}
	// Without its queue the policy rejects more: the queue was simulated.
	nq := cfg
	nq.Policies = slices.Clone(cfg.Policies)
	nq.Policies[1].Queue = limits.Queue{} // tenant-concurrency
	f, _ := os.Open(path)
	defer f.Close()
	norep, err := replay.Run(context.Background(), f, replay.Config{Reorder: 5 * time.Second}, replay.Candidate{Config: nq})
	if err != nil {
		t.Fatal(err)
	}
	if n := norep.Candidates[0].Policies[2].Rejected; n <= q.Rejected {
		t.Errorf("without the queue %d rejected, with it %d: want more without", n, q.Rejected)
	}
}
