package redisstore

import (
	"math/bits"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestBreakerRatio: the breaker opens when half of the last 2×threshold
// round trips failed, never on a few failures among answers, and forgets
// the failures that opened it once a probe succeeds.
func TestBreakerRatio(t *testing.T) {
	cases := []struct {
		name string
		// trips are round trips in order: 'o' answered, 'x' failed, 'p'
		// a probe after the cooldown (allow must refuse it until then, and
		// grant it then) that answers.
		trips string
		open  bool
	}{
		{"no round trip", "", false},
		{"four failures", "xxxx", false},
		{"five failures", "xxxxx", true},
		{"five failures among answers", "oxoxoxoxox", true},
		{"four of the last ten", "xxxxooooooxoxoxox", false},
		{"failures shifted out by answers", "xxxxoooooooooooxxxx", false},
		{"one slow answer in a long run", "oooooooooooooooooooxoooooooooo", false},
		{"a probe's answer closes it and forgets", "xxxxxpxxxx", false},
		{"...until five fail again", "xxxxxpxxxxx", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var changes []bool
			clock := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			b := newBreaker(DefaultBreakerFailures, time.Second, clock, func(open bool) { changes = append(changes, open) })
			for i, r := range c.trips {
				switch r {
				case 'o':
					b.success()
				case 'x':
					b.failure(0)
				case 'p':
					clock.Advance(time.Second - time.Nanosecond)
					if _, ok := b.allow(); ok {
						t.Fatalf("trip %d: allow 1ns before the end of the cooldown = true; want false", i)
					}
					clock.Advance(time.Nanosecond)
					if _, ok := b.allow(); !ok {
						t.Fatalf("trip %d: allow after the cooldown = false; want a probe", i)
					}
					b.success()
				}
			}
			if got := b.openUntil.Load() != 0; got != c.open {
				t.Fatalf("after %q: open = %v (changes %v); want %v", c.trips, got, changes, c.open)
			}
		})
	}
}

// TestBreakerOneProbe: while the open breaker's probe is on its way, no
// other call goes through, whatever becomes of the calls sent before it
// opened (a failure, an abandon) or of an earlier probe that ends late;
// only the probe's own end frees its slot.
func TestBreakerOneProbe(t *testing.T) {
	type step struct {
		op    string // "fail", "abandon" or "allow"
		who   string // a probe's name ("" for a call that is no probe); for allow, the probe granted ("" for none)
		after time.Duration
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"a call sent before it opened is abandoned", []step{
			{"allow", "p1", time.Second}, {"abandon", "", 0}, {"allow", "", 0},
		}},
		{"a call sent before it opened fails", []step{
			{"allow", "p1", time.Second}, {"fail", "", 0}, {"allow", "", 0}, {"allow", "", time.Second},
		}},
		{"the probe is abandoned", []step{
			{"allow", "p1", time.Second}, {"abandon", "p1", 0}, {"allow", "p2", 0},
		}},
		{"the probe fails", []step{
			{"allow", "p1", time.Second}, {"fail", "p1", 0}, {"allow", "", 0},
			{"allow", "", time.Second - time.Nanosecond}, {"allow", "p2", time.Nanosecond},
		}},
		{"an abandoned probe's round trip fails late", []step{
			{"allow", "p1", time.Second}, {"abandon", "p1", 0}, {"allow", "p2", 0},
			{"fail", "p1", 0}, {"abandon", "p1", 0}, {"allow", "", 0}, {"allow", "", time.Second},
			{"fail", "p2", 0}, {"allow", "p3", time.Second},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			b := newBreaker(DefaultBreakerFailures, time.Second, clock, func(bool) {})
			for range DefaultBreakerFailures {
				b.failure(0)
			}
			tickets := map[string]uint64{}
			for i, s := range c.steps {
				clock.Advance(s.after)
				switch s.op {
				case "fail":
					b.failure(tickets[s.who])
				case "abandon":
					b.abandon(tickets[s.who])
				case "allow":
					probe, ok := b.allow()
					if ok != (s.who != "") || ok && probe == 0 {
						t.Fatalf("step %d: allow = %d, %v; want a probe %v", i, probe, ok, s.who != "")
					}
					if ok {
						tickets[s.who] = probe
					}
				}
				if b.openUntil.Load() == 0 {
					t.Fatalf("step %d: the breaker closed with no answer", i)
				}
			}
		})
	}
}

// TestPipelineTimeoutCounts: a pipeline of queued decisions that Redis
// does not answer within the timeout counts once in the breaker, as one
// failed round trip, beside the three answered calls before it.
func TestPipelineTimeoutCounts(t *testing.T) {
	srv := redistest.Start(t)
	f := newDecisionFixture(t, srv.Addr, 200*time.Millisecond)
	f.hold.beforePipeline = func() {
		// Paused for longer than the test runs: no call is answered
		// after it, however slow the machine.
		if _, err := redistest.Do(srv.Addr, "CLIENT", "PAUSE", "3600000", "WRITE"); err != nil {
			t.Error(err)
		}
	}
	tenants := tenantsN(maxSending + 5)
	out := f.decideHeld(t, tenants, nil)
	close(f.hold.release)
	got := collect(t, out, len(tenants))
	// The calls held on their way went alone: each is a round trip (the
	// pause may catch those still on their way when the first returns);
	// the five queued meanwhile went in one pipeline.
	alone, queued := 0, 0
	for i, tn := range tenants {
		switch {
		case got[tn].err == nil:
		case i < maxSending:
			alone++
		default:
			queued++
		}
	}
	if queued != 5 {
		t.Fatalf("%d queued decisions failed; want the 5 of the pipeline Redis did not answer", queued)
	}
	// The callers return at their deadline; the pipeline's sender counts
	// its round trip when the pipeline returns.
	poll.Until(t, 5*time.Second, "no round trip on its way", func() bool {
		f.st.group.mu.Lock()
		defer f.st.group.mu.Unlock()
		return f.st.group.sending == 0
	})
	if n := bits.OnesCount64(f.st.brk.history.Load()); n != alone+1 {
		t.Errorf("failed round trips in the breaker = %d; want %d (%d calls alone, and the pipeline once)", n, alone+1, alone)
	}
}
