package budget_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

func TestFile(t *testing.T) {
	f, err := config.Parse("budgets.yaml", []byte(`
budgets:
  webhook: {url: "https://hooks.example.com/sluice", secret_env: HOOK_SECRET, attempts: 2, queue: 10}
policies:
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 60, per: 1m}
  - {name: monthly, key: tenant, unit: cost, algorithm: quota, period: month, location: Europe/Paris, limit: 5M, warn: [80%, 50%], max_partitions: 500}
  - {name: shared, algorithm: quota, per: 1h, limit: 1000, soft: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	want := budget.Config{Policies: []budget.Policy{
		{Name: "monthly", Thresholds: []int{50, 80}, Period: limits.PeriodMonth, Location: paris, MaxTenants: 500},
		{Name: "shared", Thresholds: []int{100}, Soft: true, Global: true, Period: limits.PeriodFixed},
	}}
	if got := budget.FileConfig(f); !reflect.DeepEqual(got, want) {
		t.Errorf("FileConfig = %+v; want %+v", got, want)
	}
	env := map[string]string{}
	_, err = budget.FileWebhook(f, func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "$HOOK_SECRET") {
		t.Errorf("FileWebhook without the secret = %v; want an error naming $HOOK_SECRET", err)
	}
	env["HOOK_SECRET"] = "short-secret"
	if _, err = budget.FileWebhook(f, func(k string) string { return env[k] }); err == nil || strings.Contains(err.Error(), "short-secret") {
		t.Errorf("FileWebhook with a short secret = %v; want an error that does not show it", err)
	}
	env["HOOK_SECRET"] = string(secret)
	wc, err := budget.FileWebhook(f, func(k string) string { return env[k] })
	if err != nil || wc.URL != "https://hooks.example.com/sluice" || string(wc.Secret) != string(secret) || wc.Attempts != 2 || wc.Queue != 10 || wc.Timeout != config.DefaultWebhookTimeout {
		t.Errorf("FileWebhook = %+v, %v", wc, err)
	}
}
