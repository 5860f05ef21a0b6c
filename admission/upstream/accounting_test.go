package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/upstream"
)

// TestLearnedAccounting: a provider of 60,000 tokens a minute whose
// limiter counts each request 25% above, or 25% below, the gateway's
// estimate; the gateway's static budget is the provider's published
// tier. Told what each request was estimated at (Report.Sent), the store
// learns the ratio and reserves in the provider's units: at most 1% of
// the admitted requests meet a provider 429 and at least 95% of the
// provider's tokens are used. Without it (the estimate taken for the
// provider's count) a provider counting more refuses a large part of
// them, and one counting less is used at about 75%.
func TestLearnedAccounting(t *testing.T) {
	for _, tc := range []struct {
		factor      float64 // the provider's count over the estimate
		learn       bool
		max429      float64
		min429      float64
		minUseful   float64
		maxUseful   float64
		wantRatioAt float64 // 0: not checked
	}{
		{1.25, true, 0.01, 0, 0.95, 1.01, 1.25},
		{0.75, true, 0.01, 0, 0.95, 1.01, 0.75},
		{1.25, false, 1, 0.1, 0, 1.01, 0},
		{0.75, false, 0.01, 0, 0, 0.8, 0},
	} {
		t.Run(fmt.Sprintf("factor=%v/learn=%v", tc.factor, tc.learn), func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			s, _ := upstream.New(upstream.Config{})
			c, err := admission.New(admission.Config{Policies: []limits.Policy{{
				Name: "tpm", Store: "upstream", Key: []limits.KeyPart{limits.KeyModel}, Unit: limits.UnitTokens,
				Algorithm: limits.TokenBucket, Limit: 60_000, Per: time.Minute,
			}}}, admission.WithClock(clock), admission.WithStore("upstream", s))
			if err != nil {
				t.Fatal(err)
			}
			p := &provider{limit: 60_000, level: 60_000, last: clock.Now()}
			const run = time.Minute
			var admitted, throttled, used int64
			for clock.Now().Sub(backendtest.Epoch) < run {
				for tenant := range 4 {
					r := admission.Request{Tenant: fmt.Sprint("t", tenant), Model: "gpt-4o", Tokens: 100}
					tk, err := c.TryAdmit(context.Background(), r)
					if errors.Is(err, admission.ErrRateLimited) {
						continue
					} else if err != nil {
						t.Fatal(err)
					}
					admitted++
					charge := int64(math.Round(float64(r.Tokens) * tc.factor))
					status, h := p.call(charge, clock.Now())
					rep := upstream.Parse(h.Get, status, clock.Now())
					if tc.learn {
						rep.Sent = r.Tokens
					}
					s.Observe(r.Model, rep)
					if status == http.StatusTooManyRequests {
						throttled++
						tk.Settle(admission.Usage{TokensKnown: true}) // the provider counted nothing
					} else {
						used += charge
						tk.Done()
					}
				}
				clock.Advance(25 * time.Millisecond)
			}
			capacity := 60_000 + 60_000*run.Minutes()
			ratio, useful := float64(throttled)/float64(admitted), float64(used)/capacity
			t.Logf("admitted %d, provider 429s %d (%.2f%%), provider tokens used %.1f%%", admitted, throttled, 100*ratio, 100*useful)
			if ratio > tc.max429 || ratio < tc.min429 || useful < tc.minUseful || useful > tc.maxUseful {
				t.Errorf("429s %.3f of admitted, %.3f of the provider's tokens used; want 429s in [%v, %v] and use in [%v, %v]",
					ratio, useful, tc.min429, tc.max429, tc.minUseful, tc.maxUseful)
			}
			if tc.wantRatioAt > 0 {
				// The ratio learned shows in what one request reserves.
				got := s.Ratio("gpt-4o")
				if math.Abs(got-tc.wantRatioAt) > 0.02 {
					t.Errorf("Ratio(%q) = %v; want %v", "gpt-4o", got, tc.wantRatioAt)
				}
			}
		})
	}
}

// TestAccountingBounds: the learned ratio stays within [Min, Max] whatever
// the provider reports, a 429 above what was reserved raises it at once,
// and a bad Accounting is refused.
func TestAccountingBounds(t *testing.T) {
	s, err := upstream.New(upstream.Config{Accounting: upstream.Accounting{Min: 0.8, Max: 2}})
	if err != nil {
		t.Fatal(err)
	}
	at := backendtest.Epoch
	report := func(remaining int64, status int, sent int64) {
		r := upstream.Report{Received: at, Throttled: status == http.StatusTooManyRequests, Sent: sent}
		r.Figures[upstream.Tokens] = upstream.Figure{Limit: 1_000_000, Remaining: remaining, HasLimit: true, HasRemaining: true}
		s.Observe("m", r)
		at = at.Add(time.Millisecond)
	}
	if got := s.Ratio("m"); got != 1 {
		t.Errorf("Ratio before anything = %v; want 1 (Initial)", got)
	}
	// The provider charges 100 times the estimate: bounded by Max.
	level := int64(1_000_000)
	for range 10 {
		level -= 1000
		report(level, http.StatusOK, 10)
	}
	if got := s.Ratio("m"); got != 2 {
		t.Errorf("Ratio after huge charges = %v; want 2 (Max)", got)
	}
	// The provider's remaining rises: no charge at all, bounded by Min.
	for range 200 {
		report(level, http.StatusOK, 10)
	}
	if got := s.Ratio("m"); got != 0.8 {
		t.Errorf("Ratio after free requests = %v; want 0.8 (Min)", got)
	}
	// A 429 for a request of 100 while plenty of tokens remained but no
	// request: the requests budget refused it, nothing is learned.
	r := upstream.Report{Received: at, Throttled: true, Sent: 100}
	r.Figures[upstream.Tokens] = upstream.Figure{Limit: 1_000_000, Remaining: level, HasLimit: true, HasRemaining: true}
	r.Figures[upstream.Requests] = upstream.Figure{Remaining: 0, HasRemaining: true}
	s.Observe("m", r)
	at = at.Add(time.Millisecond)
	if got := s.Ratio("m"); got != 0.8 {
		t.Errorf("Ratio after a 429 of the requests budget = %v; want 0.8 still", got)
	}
	// A 429 for a request of 100 while 150 remained: the provider counts
	// it above 150.
	report(150, http.StatusTooManyRequests, 100)
	if got := s.Ratio("m"); got < 1.5 {
		t.Errorf("Ratio after a 429 with 150 left for 100 sent = %v; want >= 1.5", got)
	}
	for _, a := range []upstream.Accounting{{Min: 2, Max: 1}, {Initial: 5, Max: 4}, {Min: -1}, {Max: math.NaN()}, {Window: -1}} {
		if _, err := upstream.New(upstream.Config{Accounting: a}); err == nil {
			t.Errorf("New(Accounting %+v) = nil error; want one", a)
		}
	}
}

// TestOverrunOnceLearned: an answer whose usage passes its estimate is
// charged to the provider's budget while the group has not learned the
// provider's ratio (the best guess of what it counted); once learned, the
// reservation in the provider's units is what its limiter counted when
// it accepted the request, and the overrun is not charged again.
func TestOverrunOnceLearned(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	s, _ := upstream.New(upstream.Config{})
	c, err := admission.New(admission.Config{Policies: []limits.Policy{{
		Name: "tpm", Store: "upstream", Key: []limits.KeyPart{limits.KeyModel}, Unit: limits.UnitTokens,
		Algorithm: limits.TokenBucket, Limit: 10_000, Per: 1000 * time.Hour,
	}}}, admission.WithClock(clock), admission.WithStore("upstream", s))
	if err != nil {
		t.Fatal(err)
	}
	// Group "learned": the provider counts 1.3 times each estimate of 100.
	for i := range 6 {
		r := upstream.Report{Received: clock.Now().Add(time.Duration(i) * time.Millisecond), Sent: 100}
		r.Figures[upstream.Tokens] = upstream.Figure{Limit: 1_000_000, Remaining: 900_000 - 130*int64(i), HasLimit: true, HasRemaining: true}
		s.Observe("learned", r)
	}
	if got := s.Ratio("learned"); math.Abs(got-1.3) > 1e-9 {
		t.Fatalf("Ratio(learned) = %v; want 1.3", got)
	}
	for _, tc := range []struct {
		model string
		want  int64 // remaining after two requests of 100, the first used 150
	}{
		{"new", 10_000 - 150 - 100},     // the overrun charged, at the initial ratio 1
		{"learned", 10_000 - 130 - 130}, // the reservation at 1.3 stands
	} {
		tk, err := c.TryAdmit(context.Background(), admission.Request{Model: tc.model, Tokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		tk.Settle(admission.Usage{Tokens: 150, TokensKnown: true})
		tk, err = c.TryAdmit(context.Background(), admission.Request{Model: tc.model, Tokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		if st := tk.Statuses(nil); len(st) != 1 || st[0].Remaining != tc.want {
			t.Errorf("%s: statuses %+v; want remaining %d", tc.model, st, tc.want)
		}
		tk.Done()
	}
}
