package budget

import (
	"fmt"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

// FileConfig returns the quotas of a policy file that declare warning
// thresholds (warn, or soft).
func FileConfig(f *config.File) Config {
	var c Config
	for i, info := range f.Policies {
		if len(info.Warn) == 0 {
			continue
		}
		p := &f.Config.Policies[i]
		c.Policies = append(c.Policies, Policy{
			Name: p.Name, Thresholds: info.Warn, Soft: info.Soft,
			Global:   len(p.Key) == 0 || p.Key[0] == limits.KeyGlobal,
			Period:   p.Period,
			Location: p.Location, MaxTenants: p.MaxPartitions,
		})
	}
	return c
}

// FileWebhook returns the webhook settings of a policy file's budgets
// section, the secret read with getenv (os.Getenv) from the variable the
// file names; a zero WebhookConfig (no URL: nothing is sent) when the
// file has no webhook. The error names the variable, never its value.
func FileWebhook(f *config.File, getenv func(string) string) (WebhookConfig, error) {
	w := f.Budgets.Webhook
	if w == nil {
		return WebhookConfig{Queue: config.DefaultWebhookQueue}, nil
	}
	secret := getenv(w.SecretEnv)
	if len(secret) < MinSecret {
		return WebhookConfig{}, fmt.Errorf("%s: budgets.webhook.secret_env: $%s must hold a secret of at least %d bytes (it holds %d)",
			f.Source, w.SecretEnv, MinSecret, len(secret))
	}
	return WebhookConfig{
		URL: w.URL, Secret: []byte(secret), Timeout: w.Timeout, Attempts: w.Attempts,
		Backoff: w.Backoff, MaxBackoff: w.MaxBackoff, Queue: w.Queue,
	}, nil
}
