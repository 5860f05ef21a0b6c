package budget_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSettlementFiguresWarn steps settlements that carry the partition's
// figures (used of 1000) through a daily quota with 50% and 80%
// thresholds: an overrun warns at once of what the figures cross, even
// for a tenant the watcher never saw past a threshold, once per period.
func TestSettlementFiguresWarn(t *testing.T) {
	type step struct {
		at       time.Duration // since t0
		tenant   string
		used     int64         // the settlement's figures: used of 1000 (0: a decision of 100 instead)
		over     int64         // actual above the estimate
		admitted time.Duration // how long before the settlement the request was admitted
		want     []int
	}
	steps := []step{
		{0, "a", 0, 0, 0, nil},                        // a is below every threshold
		{time.Minute, "a", 550, 450, 0, []int{50}},    // one overrun crosses 50%
		{2 * time.Minute, "a", 600, 50, 0, nil},       // once per period
		{3 * time.Minute, "a", 790, 0, 0, nil},        // a refund or a settlement at the estimate never warns
		{4 * time.Minute, "a", 810, 10, 0, []int{80}}, // tracked now: the figures still count
		{5 * time.Minute, "b", 990, 900, 0, []int{50, 80}},
		{6 * time.Minute, "c", 400, 300, 0, nil},                // below every threshold
		{15 * time.Hour, "a", 900, 100, time.Hour, nil},         // admitted the day before: its figures are that day's
		{16 * time.Hour, "a", 500, 100, time.Minute, []int{50}}, // the next day warns afresh
		{16*time.Hour + time.Minute, "d", 0, 700, 0, nil},       // no figures (a store that failed open): seen at its next request
	}
	clk := admissiontest.NewClock(t0)
	var s sink
	w := newWatcher(t, clk, &s, budget.Policy{Name: "q", Thresholds: []int{50, 80}, Period: limits.PeriodDay})
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		switch {
		case st.used == 0 && st.over == 0:
			w.Decision(decision("q", st.tenant, 100, 1000, admission.Admitted))
		default:
			set := admission.Settlement{
				Policy: "q", Unit: limits.UnitTokens, Algorithm: limits.Quota, Tenant: st.tenant,
				Estimated: 100, Actual: 100 + st.over, Admitted: clk.Now().Add(-st.admitted),
				Window: time.Hour,
			}
			if st.used > 0 {
				set.Limit, set.Remaining = 1000, 1000-st.used
			}
			if st.over == 0 {
				set.Actual = 50
			}
			w.Settled(set)
		}
		var got []int
		for _, wn := range s.take() {
			got = append(got, wn.Threshold)
			if wn.Tenant != st.tenant || wn.Limit != 1000 || wn.Used < st.used || !wn.Time.Equal(clk.Now()) {
				t.Errorf("step %d: warning %+v; want tenant %q, used >= %d of 1000, at %v", i, wn, st.tenant, st.used, clk.Now())
			}
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("step %d (%+v): warned %v; want %v", i, st, got, st.want)
		}
	}
}

// TestSettlementWarnsOnRedis runs a controller on a real Redis with the
// watcher as its observer: a tenant admitted well below every threshold
// whose one request overruns past 50% is warned at the settlement.
func TestSettlementWarnsOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	st, err := redisstore.New(client, redisstore.Config{Prefix: "settled-test", CallerTime: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clk := admissiontest.NewClock(t0)
	var s sink
	w := newWatcher(t, clk, &s, budget.Policy{Name: "daily", Thresholds: []int{50, 80}, Period: limits.PeriodDay})
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "daily", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
		Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: 10_000, Store: "redis",
	}}}, admission.WithClock(clk), admission.WithObserver(w), admission.WithStore("redis", st))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, actual := range []int64{1000, 5500} {
		tk, err := ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 500})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.take(); len(got) != 0 {
			t.Fatalf("request %d: admitted at 5%% or 15%%, warned %+v", i, got)
		}
		tk.Settle(admission.Usage{Tokens: actual, TokensKnown: true})
	}
	got := s.take()
	if len(got) != 1 || got[0].Threshold != 50 || got[0].Used != 6500 || got[0].Tenant != "acme" {
		t.Errorf("after an overrun to 6500 of 10000: warned %+v; want one 50%% warning for acme, used 6500", got)
	}
}

// TestSettledAllocationFree: an overrun's settlement that crosses nothing
// (of a tenant untracked or tracked) costs no allocation.
func TestSettledAllocationFree(t *testing.T) {
	clk := admissiontest.NewClock(t0)
	var s sink
	w := newWatcher(t, clk, &s, budget.Policy{Name: "q", Thresholds: []int{50, 80}, Period: limits.PeriodDay})
	w.Decision(decision("q", "tracked", 600, 1000, admission.Admitted))
	s.take()
	for _, tenant := range []string{"untracked", "tracked"} {
		set := admission.Settlement{
			Policy: "q", Algorithm: limits.Quota, Tenant: tenant, Estimated: 1, Actual: 2,
			Admitted: clk.Now(), Limit: 1_000_000, Remaining: 999_000, Window: time.Hour,
		}
		if tenant == "tracked" {
			set.Limit, set.Remaining = 1000, 400
		}
		if n := testing.AllocsPerRun(100, func() { w.Settled(set) }); n != 0 {
			t.Errorf("Settled(%s, nothing crossed): %v allocations; want 0", tenant, n)
		}
	}
	if got := s.take(); len(got) != 0 {
		t.Errorf("warned %+v; want nothing crossed", got)
	}
}
