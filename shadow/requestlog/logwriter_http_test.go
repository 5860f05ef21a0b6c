package requestlog_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/pipenet"
	"github.com/sluicehq/sluice/shadow/internal/shadowtest"
	"github.com/sluicehq/sluice/shadow/replay"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// The tolerance of a replay of a log written by a service that reads the
// time itself, per policy: the times it logs are read apart from the
// controller's own reads, so a request racing another for the last
// permit may be decided the other way in the replay. A handful of
// requests.
const realClockTolerance = 5

// A service admits real HTTP requests (a net/http server and client) and
// logs them with the times it reads itself; replaying its log gives its
// figures back within the tolerance. Server and client run in a
// testing/synctest bubble on in-memory connections, so the traffic keeps
// its pace however busy the machine is.
func TestRequestLogRealClock(t *testing.T) {
	cfg := admission.Config{Policies: []admission.Policy{
		{Name: "tenant-rps", Key: shadowtest.TenantKey(), Algorithm: limits.TokenBucket, Limit: 8, Per: time.Second, Burst: 3},
		{Name: "tenant-concurrency", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 2},
	}}
	live := shadowtest.NewLiveCounts()
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	traffic := knownTraffic(200, 3) // about 6 s
	synctest.Test(t, func(t *testing.T) {
		ctl, err := admission.New(cfg, admission.WithObserver(live))
		if err != nil {
			t.Fatal(err)
		}
		rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		ln := pipenet.Listen()
		srv := &http.Server{ReadHeaderTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived := time.Now()
			req := admission.Request{Tenant: r.Header.Get("X-Tenant"), Operation: "POST /v1/chat/completions", Tokens: 100}
			tk, err := ctl.Admit(r.Context(), req)
			if err != nil {
				rl.Log(&req, arrived, admission.Usage{}, 0)
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			admitted := time.Now()
			work, _ := time.ParseDuration(r.Header.Get("X-Work"))
			time.Sleep(work)
			u := admission.Usage{Tokens: 60, TokensKnown: true}
			held := time.Since(admitted)
			tk.Settle(u)
			rl.Log(&req, arrived, u, held)
		})}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		client := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return ln.Dial() }}}
		defer client.CloseIdleConnections()

		start := time.Now()
		var wg sync.WaitGroup
		for _, lr := range traffic {
			time.Sleep(time.Until(start.Add(lr.at)))
			wg.Go(func() {
				hr, _ := http.NewRequest(http.MethodPost, "http://service.test/", nil)
				hr.Header.Set("X-Tenant", lr.req.Tenant)
				hr.Header.Set("X-Work", strconv.FormatInt(int64(lr.work/2), 10)+"ns")
				resp, err := client.Do(hr)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			})
		}
		wg.Wait()
		if err := rl.Close(); err != nil {
			t.Fatal(err)
		}
	})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := replay.Run(context.Background(), f, replay.Config{Reorder: 5 * time.Second}, replay.Candidate{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != int64(len(traffic)) {
		t.Fatalf("replayed %d records, sent %d", rep.Records, len(traffic))
	}
	for _, p := range rep.Candidates[0].Policies {
		la, lr := live.Admitted[p.Policy], live.Rejected[p.Policy]
		t.Logf("%s: live admitted %d rejected %d; replay %d, %d", p.Policy, la, lr, p.Admitted, p.Rejected)
		if lr == 0 {
			t.Errorf("%s rejected nothing live: the traffic does not test it", p.Policy)
		}
		if d := abs(p.Admitted-la) + abs(p.Rejected-lr); d > 2*realClockTolerance {
			t.Errorf("%s: replay %s from live", p.Policy, fmt.Sprint(d, " decisions"))
		}
	}
}

func abs(n int64) int64 { return max(n, -n) }
