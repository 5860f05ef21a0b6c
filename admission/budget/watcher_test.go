package budget_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow"
)

var t0 = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// sink collects warnings.
type sink struct {
	mu sync.Mutex
	ws []budget.Warning
}

func (s *sink) add(w budget.Warning) {
	s.mu.Lock()
	s.ws = append(s.ws, w)
	s.mu.Unlock()
}

func (s *sink) take() []budget.Warning {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.ws
	s.ws = nil
	return out
}

func newWatcher(t *testing.T, clk admission.Clock, s *sink, ps ...budget.Policy) *budget.Watcher {
	t.Helper()
	w, err := budget.New(budget.Config{Policies: ps}, budget.WithClock(clk), budget.WithHandler(s.add), budget.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func decision(policy, tenant string, used, limit int64, o admission.Outcome) *admission.Decision {
	d := &admission.Decision{
		Status:  admission.Status{Policy: policy, Algorithm: limits.Quota, Unit: limits.UnitTokens, Limit: limit, Remaining: max(limit-used, 0), Window: time.Hour},
		Outcome: o, Tenant: tenant,
	}
	if o != admission.Admitted {
		d.Reason = admission.ReasonQuota
	}
	return d
}

// tooBig stands in a step for a refusal of a request larger than the
// whole quota (retry after Never).
const tooBig = admission.Outcome(255)

// TestThresholdsOncePerPeriod steps one tenant through a day on a fake
// clock: each step is a decision (or a settlement) and the thresholds it
// must warn of, in order.
func TestThresholdsOncePerPeriod(t *testing.T) {
	type step struct {
		at      time.Duration // since t0
		tenant  string
		used    int64 // of 1000; -1: a settlement of +over instead
		over    int64
		outcome admission.Outcome
		want    []int
	}
	tests := []struct {
		name  string
		pol   budget.Policy
		steps []step
	}{{
		name: "each threshold once, several at once",
		pol:  budget.Policy{Name: "q", Thresholds: []int{50, 80, 95}, Period: limits.PeriodDay},
		steps: []step{
			{0, "a", 499, 0, admission.Admitted, nil},
			{time.Minute, "a", 500, 0, admission.Admitted, []int{50}},
			{2 * time.Minute, "a", 600, 0, admission.Admitted, nil},
			{3 * time.Minute, "a", 960, 0, admission.Admitted, []int{80, 95}},
			{4 * time.Minute, "a", 1000, 0, admission.Admitted, nil},
			{5 * time.Minute, "b", 990, 0, admission.Admitted, []int{50, 80, 95}},
		},
	}, {
		name: "a refund does not re-arm; the next period does",
		pol:  budget.Policy{Name: "q", Thresholds: []int{50, 80}, Period: limits.PeriodDay},
		steps: []step{
			{0, "a", 810, 0, admission.Admitted, []int{50, 80}},
			{time.Hour, "a", 100, 0, admission.Admitted, nil}, // refunded below every threshold
			{2 * time.Hour, "a", 850, 0, admission.Admitted, nil},
			{15 * time.Hour, "a", 10, 0, admission.Admitted, nil}, // next day (t0 is 09:00)
			{16 * time.Hour, "a", 500, 0, admission.Admitted, []int{50}},
		},
	}, {
		name: "100% on reaching the limit or on a quota refusal",
		pol:  budget.Policy{Name: "q", Thresholds: []int{90, 100}, Period: limits.PeriodDay},
		steps: []step{
			{0, "a", 950, 0, admission.Rejected, []int{90, 100}},
			{time.Minute, "b", 999, 0, admission.Admitted, []int{90}},
			{2 * time.Minute, "b", 999, 0, admission.WouldReject, []int{100}},
			{3 * time.Minute, "c", 1000, 0, admission.Admitted, []int{90, 100}},
			{4 * time.Minute, "d", 10, 0, admission.Canceled, nil},
			{5 * time.Minute, "e", 10, 0, tooBig, nil}, // refused: larger than the whole quota
			{6 * time.Minute, "e", 10, 0, admission.Rejected, []int{100}},
		},
	}, {
		name: "a settlement's overrun crosses the next threshold of a tracked tenant",
		pol:  budget.Policy{Name: "q", Thresholds: []int{50, 80}, Period: limits.PeriodDay},
		steps: []step{
			{0, "a", 600, 0, admission.Admitted, []int{50}},
			{time.Minute, "a", -1, 100, admission.Admitted, nil},
			{2 * time.Minute, "a", -1, 150, admission.Admitted, []int{80}},
			{3 * time.Minute, "b", -1, 900, admission.Admitted, nil}, // untracked: seen at its next request
			{4 * time.Minute, "b", 910, 0, admission.Admitted, []int{50, 80}},
		},
	}, {
		name: "a global quota warns once, for everyone",
		pol:  budget.Policy{Name: "q", Thresholds: []int{50}, Global: true, Period: limits.PeriodFixed},
		steps: []step{
			{0, "a", 500, 0, admission.Admitted, []int{50}},
			{time.Minute, "b", 700, 0, admission.Admitted, nil},
			{time.Hour, "b", 700, 0, admission.Admitted, []int{50}}, // 10:00: the next hour
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := admissiontest.NewClock(t0)
			var s sink
			w := newWatcher(t, clk, &s, tc.pol)
			for i, st := range tc.steps {
				clk.Set(t0.Add(st.at))
				if st.used < 0 {
					w.Settled(admission.Settlement{Policy: "q", Unit: limits.UnitTokens, Tenant: st.tenant, Estimated: 10, Actual: 10 + st.over, Admitted: clk.Now()})
				} else if st.outcome == tooBig {
					d := decision("q", st.tenant, st.used, 1000, admission.Rejected)
					d.RetryAfter = limits.Never
					w.Decision(d)
				} else {
					w.Decision(decision("q", st.tenant, st.used, 1000, st.outcome))
				}
				var got []int
				for _, wn := range s.take() {
					got = append(got, wn.Threshold)
					want := st.tenant
					if tc.pol.Global {
						want = ""
					}
					if wn.Tenant != want || wn.Policy != "q" || wn.Limit != 1000 || !wn.Time.Equal(clk.Now()) {
						t.Errorf("step %d: warning %+v; want tenant %q, policy q, limit 1000, time %v", i, wn, want, clk.Now())
					}
					if !wn.PeriodStart.Before(wn.Time.Add(1)) || !wn.Time.Before(wn.PeriodEnd) {
						t.Errorf("step %d: period [%v, %v) does not hold %v", i, wn.PeriodStart, wn.PeriodEnd, wn.Time)
					}
				}
				if !slices.Equal(got, st.want) {
					t.Errorf("step %d (%+v): warned %v; want %v", i, st, got, st.want)
				}
			}
		})
	}
}

// TestReloadKeepsCrossed checks a reload that keeps a policy's period
// keeps what its tenants crossed, even with other thresholds, and one
// that changes the period starts afresh.
func TestReloadKeepsCrossed(t *testing.T) {
	clk := admissiontest.NewClock(t0)
	var s sink
	w := newWatcher(t, clk, &s, budget.Policy{Name: "q", Thresholds: []int{50, 80}, Period: limits.PeriodDay})
	w.Decision(decision("q", "a", 850, 1000, admission.Admitted))
	if got := len(s.take()); got != 2 {
		t.Fatalf("warnings = %d; want 2", got)
	}
	if err := w.SetConfig(budget.Config{Policies: []budget.Policy{{Name: "q", Thresholds: []int{50, 80, 90}, Period: limits.PeriodDay}}}); err != nil {
		t.Fatal(err)
	}
	w.Decision(decision("q", "a", 910, 1000, admission.Admitted))
	if got := s.take(); len(got) != 1 || got[0].Threshold != 90 {
		t.Errorf("after a reload adding 90%%: %+v; want only 90", got)
	}
	if err := w.SetConfig(budget.Config{Policies: []budget.Policy{{Name: "q", Thresholds: []int{50, 80, 90}, Period: limits.PeriodMonth}}}); err != nil {
		t.Fatal(err)
	}
	w.Decision(decision("q", "a", 910, 1000, admission.Admitted))
	if got := len(s.take()); got != 3 {
		t.Errorf("after a reload changing the period: %d warnings; want 3", got)
	}
	if err := w.SetConfig(budget.Config{Policies: []budget.Policy{{Name: "q", Thresholds: []int{90, 50}}}}); err == nil {
		t.Error("SetConfig(thresholds out of order) = nil; want an error")
	}
}

// TestTenantsBounded fills a policy's table: the tenants past the bound
// are not warned (and counted), and the table makes room again once the
// period has ended.
func TestTenantsBounded(t *testing.T) {
	clk := admissiontest.NewClock(t0)
	var s sink
	const max = 64
	w := newWatcher(t, clk, &s, budget.Policy{Name: "q", Thresholds: []int{50}, Period: limits.PeriodDay, MaxTenants: max})
	for i := range 10 * max {
		w.Decision(decision("q", fmt.Sprint("t", i), 600, 1000, admission.Admitted))
	}
	// 640 tenants fill each of the 16 shards' share of 4.
	if warned := len(s.take()); warned != max {
		t.Errorf("warned %d tenants with room for %d", warned, max)
	}
	// Those remembered are not warned again; the rest still cannot be.
	for i := range 10 * max {
		w.Decision(decision("q", fmt.Sprint("t", i), 700, 1000, admission.Admitted))
	}
	if got := len(s.take()); got != 0 {
		t.Errorf("second pass warned %d; want 0", got)
	}
	clk.Advance(24 * time.Hour)
	// As many new tenants as one shard holds: wherever they land, the
	// ended periods' entries make room for them.
	for i := range max / 16 {
		w.Decision(decision("q", fmt.Sprint("new", i), 600, 1000, admission.Admitted))
	}
	if got := len(s.take()); got != max/16 {
		t.Errorf("next day: warned %d new tenants; want %d (ended periods make room)", got, max/16)
	}
}

// tee passes every decision and settlement to each observer.
type recorder struct {
	admission.NopObserver
	mu  sync.Mutex
	now func() time.Time
	ds  []seen
}

type seen struct {
	tenant      string
	used, limit int64
	at          time.Time
	refused     bool
}

func (r *recorder) Decision(d *admission.Decision) {
	if d.Algorithm != limits.Quota {
		return
	}
	r.mu.Lock()
	refused := d.Outcome != admission.Admitted && d.Reason == admission.ReasonQuota
	if d.Outcome == admission.Admitted || refused {
		r.ds = append(r.ds, seen{d.Tenant, d.Limit - d.Remaining, d.Limit, r.now(), refused})
	}
	r.mu.Unlock()
}

// Settled records the figures of an overrun's settlement, which the
// watcher must warn of as it does of a decision's.
func (r *recorder) Settled(s admission.Settlement) {
	if s.Algorithm != limits.Quota || s.Limit <= 0 || s.Actual <= s.Estimated {
		return
	}
	r.mu.Lock()
	r.ds = append(r.ds, seen{s.Tenant, s.Limit - s.Remaining, s.Limit, r.now(), false})
	r.mu.Unlock()
}

// TestPropertyOncePerPeriodAndAlways runs random traffic through a
// controller with a daily token quota (enforced, or soft) on a fake
// clock, settling each request above or below its estimate, across
// several days: every threshold warns at most once per tenant per day,
// and always in a day where a decision or an overrun's settlement showed
// it crossed, with figures that cross it.
func TestPropertyOncePerPeriodAndAlways(t *testing.T) {
	for _, mode := range []limits.Mode{limits.Enforce, limits.Shadow} {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("%s/seed%d", mode, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				clk := admissiontest.NewClock(t0)
				var s sink
				thresholds := []int{25, 50, 80, 95, 100}
				w := newWatcher(t, clk, &s, budget.Policy{Name: "daily", Thresholds: thresholds, Period: limits.PeriodDay, Soft: mode == limits.Shadow})
				rec := &recorder{now: clk.Now}
				ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
					Name: "daily", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
					Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: 10_000, Mode: mode,
				}}}, admission.WithClock(clk), admission.WithObserver(shadow.Join(w, rec)))
				if err != nil {
					t.Fatal(err)
				}
				for range 3000 {
					clk.Advance(time.Duration(rng.IntN(90)) * time.Second)
					tenant := fmt.Sprint("t", rng.IntN(8))
					est := int64(1 + rng.IntN(400))
					tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: tenant, Tokens: est})
					if err != nil {
						continue
					}
					actual := max(0, est+int64(rng.IntN(300))-150)
					tk.Settle(admission.Usage{Tokens: actual, TokensKnown: true})
				}
				type key struct {
					tenant string
					pct    int
					day    int64
				}
				dayOf := func(at time.Time) int64 {
					l := limits.Limit{Period: limits.PeriodDay}
					start, _ := limits.QuotaPeriod(&l, at.UnixNano())
					return start
				}
				warned := map[key]budget.Warning{}
				for _, wn := range s.take() {
					k := key{wn.Tenant, wn.Threshold, wn.PeriodStart.UnixNano()}
					if _, dup := warned[k]; dup {
						t.Errorf("%s warned twice at %d%% in the day of %v", wn.Tenant, wn.Threshold, wn.PeriodStart)
					}
					warned[k] = wn
					if k.day != dayOf(wn.Time) {
						t.Errorf("warning %+v: period start is not the day of its time", wn)
					}
					if wn.Used*100 < int64(wn.Threshold)*wn.Limit && wn.Threshold != 100 {
						t.Errorf("warning %+v: used %d of %d does not reach %d%%", wn, wn.Used, wn.Limit, wn.Threshold)
					}
				}
				crossings := 0
				for _, d := range rec.ds {
					for _, pct := range thresholds {
						if d.used*100 >= int64(pct)*d.limit || pct == 100 && d.refused {
							crossings++
							if _, ok := warned[key{d.tenant, pct, dayOf(d.at)}]; !ok {
								t.Errorf("%s showed %d of %d at %v (or was refused), yet no %d%% warning that day", d.tenant, d.used, d.limit, d.at, pct)
							}
						}
					}
				}
				if crossings == 0 || len(warned) < 10 {
					t.Errorf("the traffic crossed %d thresholds, %d warnings: too little to test", crossings, len(warned))
				}
			})
		}
	}
}

// TestConcurrentCrossings races goroutines over the same tenants: each
// threshold still warns exactly once per tenant.
func TestConcurrentCrossings(t *testing.T) {
	clk := admissiontest.NewClock(t0)
	var s sink
	w := newWatcher(t, clk, &s, budget.Policy{Name: "q", Thresholds: []int{10, 50, 90}, Period: limits.PeriodDay})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for used := int64(g); used <= 1000; used += 8 {
				w.Decision(decision("q", fmt.Sprint("t", used%4), used, 1000, admission.Admitted))
				w.Settled(admission.Settlement{Policy: "q", Tenant: fmt.Sprint("t", used%4), Estimated: 1, Actual: 2})
			}
		}()
	}
	wg.Wait()
	count := map[string]int{}
	for _, wn := range s.take() {
		count[fmt.Sprint(wn.Tenant, "/", wn.Threshold)]++
	}
	for tn := range 4 {
		for _, pct := range []int{10, 50, 90} {
			if n := count[fmt.Sprint("t", tn, "/", pct)]; n != 1 {
				t.Errorf("t%d warned %d times at %d%%; want once", tn, n, pct)
			}
		}
	}
}

// TestReloadChangingFixedPeriod: a reload that changes a fixed quota's
// per (30 days to a day, a day to two) moves its tenants to the new
// periods at once: each threshold warns once in each new period, neither
// silenced until the old period would have ended nor repeated inside
// the new one.
func TestReloadChangingFixedPeriod(t *testing.T) {
	const month, day = 720 * time.Hour, 24 * time.Hour
	pol := budget.Policy{Name: "q", Thresholds: []int{50}, Period: limits.PeriodFixed}
	at := func(window time.Duration) *admission.Decision {
		d := decision("q", "a", 600, 1000, admission.Admitted)
		d.Window = window
		return d
	}
	periodOf := func(window time.Duration, now time.Time) int64 {
		start, _ := limits.QuotaPeriod(&limits.Limit{Period: limits.PeriodFixed, Per: window}, now.UnixNano())
		return start
	}
	// A day-aligned start whose next day is in the same 30-day period.
	start := time.Unix(0, periodOf(month, t0))
	if periodOf(month, start.Add(day)) != periodOf(month, start) {
		t.Fatal("the test's instants are not in one 30-day period")
	}
	for _, tc := range []struct {
		name           string
		before, after  time.Duration
		step           time.Duration // from start to the decision after the reload
		wantAfterWarns int
	}{
		{"30 days to a day: the next day warns again", month, day, day, 1},
		{"a day to two: the second day of one period does not", day, 2 * day, day, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := admissiontest.NewClock(start)
			var s sink
			w := newWatcher(t, clk, &s, pol)
			w.Decision(at(tc.before))
			if got := len(s.take()); got != 1 {
				t.Fatalf("first crossing: %d warnings; want 1", got)
			}
			if err := w.SetConfig(budget.Config{Policies: []budget.Policy{pol}}); err != nil {
				t.Fatal(err)
			}
			w.Decision(at(tc.after)) // the period the reload starts
			s.take()
			clk.Set(start.Add(tc.step))
			w.Decision(at(tc.after))
			if got := len(s.take()); got != tc.wantAfterWarns {
				t.Errorf("a day after the reload, per %v: %d warnings; want %d", tc.after, got, tc.wantAfterWarns)
			}
		})
	}
}
