package redisstore_test

import (
	"math"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/admission/upstream"
	"github.com/sluicehq/sluice/internal/redistest"
)

// ratioReports returns n provider answers about a tokens budget of
// 60,000 a minute whose limiter charges each request about factor times
// its estimate (Sent), some of them refused, a few arriving late (an
// instant before the one sent ahead of them, as answers to several
// replicas do).
func ratioReports(n int, factor float64) []upstream.Report {
	rng := rand.New(rand.NewPCG(7, 11))
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	const limit, perMinute = 60_000.0, 60_000.0
	left := limit / 2
	var out []upstream.Report
	for range n {
		step := time.Duration(20+rng.IntN(200)) * time.Millisecond
		at = at.Add(step)
		left = min(limit, left+perMinute*step.Minutes())
		sent := int64(50 + rng.IntN(400))
		charge := math.Round(float64(sent) * factor)
		r := upstream.Report{Received: at, Sent: sent}
		if charge > left {
			r.Throttled = true
		} else {
			left -= charge
		}
		reset := time.Duration((limit - math.Floor(left)) / perMinute * float64(time.Minute))
		r.Figures[upstream.Tokens] = upstream.Figure{Limit: limit, Remaining: int64(left), Reset: reset, HasLimit: true, HasRemaining: true, HasReset: true}
		if rng.IntN(10) == 0 {
			r.Received = at.Add(-time.Millisecond) // late: older than the answer before
		}
		out = append(out, r)
	}
	return out
}

// The Redis store learns the provider's accounting exactly as the
// in-memory accounting does (upstream.Ledger): fed the same answers, an
// upstream store on it reserves at the same ratio as one learning
// alone, after every answer, and a second replica on the same server
// takes that ratio from its first answer.
func TestLearnRatioAsInMemory(t *testing.T) {
	srv := redistest.Start(t)
	for _, factor := range []float64{0.75, 1.3, 3} {
		alone, _ := upstream.New(upstream.Config{})
		prefix := uniquePrefix()
		shared := make([]*upstream.Store, 2)
		for i := range shared {
			rs := newStore(t, newClient(t, srv.Addr), redisstore.Config{Prefix: prefix})
			var err error
			if shared[i], err = upstream.New(upstream.Config{Account: "openai"}, upstream.WithStaticStore(rs)); err != nil {
				t.Fatal(err)
			}
		}
		reports := ratioReports(300, factor)
		for i, r := range reports[:len(reports)-1] {
			alone.Observe("gpt-4o", r)
			shared[0].Observe("gpt-4o", r)
			if got, want := shared[0].Ratio("gpt-4o"), alone.Ratio("gpt-4o"); math.Abs(got-want) > 1e-9*want {
				t.Fatalf("factor %v, answer %d: ratio on Redis %v; learned alone %v", factor, i, got, want)
			}
		}
		want := alone.Ratio("gpt-4o")
		if math.Abs(want-factor) > 0.05*factor {
			t.Errorf("factor %v: learned %v", factor, want)
		}
		last := reports[len(reports)-1]
		alone.Observe("gpt-4o", last)
		shared[1].Observe("gpt-4o", last)
		if got, want := shared[1].Ratio("gpt-4o"), alone.Ratio("gpt-4o"); math.Abs(got-want) > 1e-9*want {
			t.Errorf("factor %v: the second replica after its first answer: ratio %v; want the fleet's %v", factor, got, want)
		}
		// Another account, another model: nothing learned there.
		if r := shared[0].Ratio("gpt-4.1"); r != upstream.DefaultRatioInitial {
			t.Errorf("factor %v: ratio of a model nothing was learned about %v; want %v", factor, r, upstream.DefaultRatioInitial)
		}
	}
}

// With Redis down, each replica learns the provider's accounting alone,
// as it would in memory: the ratio does not stop at its initial value.
func TestLearnRatioRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there
	rs := newStore(t, newClient(t, addr), redisstore.Config{Timeout: 100 * time.Millisecond})
	down, err := upstream.New(upstream.Config{Account: "openai"}, upstream.WithStaticStore(rs))
	if err != nil {
		t.Fatal(err)
	}
	alone, _ := upstream.New(upstream.Config{})
	for _, r := range ratioReports(40, 1.3) {
		alone.Observe("gpt-4o", r)
		down.Observe("gpt-4o", r)
	}
	if got, want := down.Ratio("gpt-4o"), alone.Ratio("gpt-4o"); got != want || want == upstream.DefaultRatioInitial {
		t.Errorf("ratio with Redis down %v; learned alone %v (not the initial %v)", got, want, upstream.DefaultRatioInitial)
	}
}
