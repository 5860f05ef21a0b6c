package budget_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/admission/limits"
)

// A daily token quota of 1000 warning at 50% and 80%: the tenant's
// requests cross each once, and the next day starts afresh.
func Example() {
	clk := admissiontest.NewClock(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC))
	w, _ := budget.New(budget.Config{Policies: []budget.Policy{
		{Name: "daily-tokens", Thresholds: []int{50, 80}, Period: limits.PeriodDay},
	}},
		budget.WithClock(clk),
		budget.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		budget.WithHandler(func(wn budget.Warning) {
			fmt.Printf("%s crossed %d%% of %s: %d of %d tokens, until %s\n",
				wn.Tenant, wn.Threshold, wn.Policy, wn.Used, wn.Limit, wn.PeriodEnd.Format(time.DateOnly))
		}))
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "daily-tokens", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
		Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: 1000,
	}}}, admission.WithClock(clk), admission.WithObserver(w))
	for _, day := range []int{1, 2} {
		fmt.Println("day", day)
		for range 5 {
			tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: "acme", Tokens: 200})
			if err == nil {
				tk.Done()
			}
		}
		clk.Advance(24 * time.Hour)
	}
	// Output:
	// day 1
	// acme crossed 50% of daily-tokens: 600 of 1000 tokens, until 2026-01-06
	// acme crossed 80% of daily-tokens: 800 of 1000 tokens, until 2026-01-06
	// day 2
	// acme crossed 50% of daily-tokens: 600 of 1000 tokens, until 2026-01-07
	// acme crossed 80% of daily-tokens: 800 of 1000 tokens, until 2026-01-07
}
