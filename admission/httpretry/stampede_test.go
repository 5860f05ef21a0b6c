package httpretry_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpretry"
	"github.com/sluicehq/sluice/admission/limits"
)

// sim runs callers one at a time on a virtual clock: a caller runs until
// it sleeps or ends (its HTTP round trips on loopback included), and only
// then is the clock stepped to the next wake-up. The outcome depends on
// nothing but the seed, however busy the machine.
type sim struct {
	clock   *admissiontest.Clock
	mu      sync.Mutex
	cond    *sync.Cond
	running int
}

func newSim(start time.Time) *sim {
	s := &sim{clock: admissiontest.NewClock(start)}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// Sleep parks the calling caller until the clock has moved by d.
func (s *sim) Sleep(ctx context.Context, d time.Duration) error {
	wake := make(chan struct{})
	s.clock.AfterFunc(d, func() {
		s.mu.Lock()
		s.running++
		s.mu.Unlock()
		close(wake)
	})
	s.park()
	<-wake
	return ctx.Err()
}

// park marks the calling caller as not running.
func (s *sim) park() {
	s.mu.Lock()
	s.running--
	s.cond.Broadcast()
	s.mu.Unlock()
}

// run starts n callers and steps the clock until they have all ended.
func (s *sim) run(n int, caller func(i int)) {
	s.mu.Lock()
	s.running = n
	s.mu.Unlock()
	for i := range n {
		go func() {
			defer s.park()
			_ = s.Sleep(context.Background(), 0) // start in turn
			caller(i)
		}()
	}
	for {
		s.mu.Lock()
		for s.running > 0 {
			s.cond.Wait()
		}
		s.mu.Unlock()
		if !s.clock.Step(s.clock.Now().Add(time.Hour)) {
			return
		}
	}
}

// stampede has 8 callers share one retrying client in front of a token
// bucket of 4 per second; each sends 10 requests, one every 2 s, all at
// the same instants: the bucket's capacity suffices, but half of each
// round is told to come back. It returns how many of the 80 requests
// ended admitted.
func stampede(t *testing.T, retryAfterMs bool, jitter float64, seed uint64) int {
	t.Helper()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSim(start)
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-tenant", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.TokenBucket, Limit: 4, Per: time.Second,
	}}}, admission.WithClock(s.clock))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmit.WithRetryAfterMs(retryAfterMs),
		httpadmit.WithIdentity(func(*http.Request) (httpadmit.Identity, error) {
			return httpadmit.Identity{Tenant: "acme"}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	var rmu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 2))
	client := &http.Client{Transport: &httpretry.Transport{
		Base: base, Now: s.clock.Now, Sleep: s.Sleep, Jitter: jitter,
		Rand: func() float64 { rmu.Lock(); defer rmu.Unlock(); return rng.Float64() },
	}}
	var mu sync.Mutex
	admitted, rejected := 0, 0
	s.run(8, func(int) {
		for k := range 10 {
			_ = s.Sleep(context.Background(), start.Add(time.Duration(k)*2*time.Second).Sub(s.clock.Now()))
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			switch resp.StatusCode {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests:
				rejected++
			default:
				t.Errorf("status %d", resp.StatusCode)
			}
			mu.Unlock()
		}
	})
	if admitted+rejected != 80 {
		t.Errorf("%d admitted + %d rejected; want 80 answers", admitted, rejected)
	}
	return admitted
}

// TestJitterNoStampede: 8 callers told by retry-after-ms to come back
// when the next permit frees stampede when they honour the hint exactly
// (the same 10 of 80 end rejected whatever the seed), and at least 78 of
// 80 are admitted with the default jitter, for every seed.
func TestJitterNoStampede(t *testing.T) {
	if got := stampede(t, true, -1, 0); got > 70 {
		t.Errorf("retry-after-ms honoured exactly: %d of 80 admitted; want at most 70 (the stampede this test guards against)", got)
	}
	if got := stampede(t, false, -1, 0); got != 80 {
		t.Errorf("whole-second Retry-After honoured exactly: %d of 80 admitted; want 80", got)
	}
	for seed := range uint64(10) {
		got := stampede(t, true, 0, seed)
		t.Logf("seed %d: %d of 80 admitted", seed, got)
		if got < 78 {
			t.Errorf("retry-after-ms with the default jitter, seed %d: %d of 80 admitted; want >= 78", seed, got)
		}
	}
}
