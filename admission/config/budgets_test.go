package config_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestBudgets reads warn, soft and the webhook section: thresholds
// sorted, a soft quota in shadow mode warning at 100% too, the webhook's
// defaults filled in.
func TestBudgets(t *testing.T) {
	f, err := config.Parse("budgets.yaml", []byte(`
budgets:
  webhook: {url: "http://127.0.0.1:9/hook", secret_env: SLUICE_WEBHOOK_SECRET, attempts: 3}
policies:
  - {name: monthly, key: tenant, unit: cost, algorithm: quota, period: month, limit: 500M, warn: [95%, 50%, 80%]}
  - {name: soft-daily, key: tenant, unit: tokens, algorithm: quota, period: day, limit: 1M, soft: true, warn: [90%]}
  - {name: soft-only, key: global, algorithm: quota, per: 1h, limit: 1000, soft: true}
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 60, per: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		warn []int
		soft bool
		mode limits.Mode
	}{
		{[]int{50, 80, 95}, false, limits.Enforce},
		{[]int{90, 100}, true, limits.Shadow},
		{[]int{100}, true, limits.Shadow},
		{nil, false, limits.Enforce},
	} {
		info, pol := f.Policies[i], f.Config.Policies[i]
		if !slices.Equal(info.Warn, want.warn) || info.Soft != want.soft || pol.Mode != want.mode {
			t.Errorf("policies[%d] = warn %v soft %v mode %v; want %v %v %v", i, info.Warn, info.Soft, pol.Mode, want.warn, want.soft, want.mode)
		}
	}
	want := config.Webhook{URL: "http://127.0.0.1:9/hook", SecretEnv: "SLUICE_WEBHOOK_SECRET", Timeout: 5 * time.Second,
		Attempts: 3, Backoff: time.Second, MaxBackoff: time.Minute, Queue: 1024}
	if f.Budgets.Webhook == nil || *f.Budgets.Webhook != want {
		t.Errorf("webhook = %+v; want %+v", f.Budgets.Webhook, want)
	}
	f, err = config.Parse("none.yaml", []byte("policies: [{name: q, key: tenant, algorithm: quota, period: day, limit: 5, warn: [80%]}]\n"))
	if err != nil || f.Budgets.Webhook != nil {
		t.Errorf("without a budgets section: webhook %+v, err %v; want none", f.Budgets.Webhook, err)
	}
}
