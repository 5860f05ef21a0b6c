package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/admission/config"
)

// budgetLines lists the quotas that warn, at which thresholds, and where
// the warnings go; nothing when no quota warns and no webhook is set.
func budgetLines(w io.Writer, f *config.File) {
	c := budget.FileConfig(f)
	hook := f.Budgets.Webhook
	if len(c.Policies) == 0 && hook == nil {
		return
	}
	var parts []string
	for _, p := range c.Policies {
		pcts := make([]string, len(p.Thresholds))
		for i, t := range p.Thresholds {
			pcts[i] = fmt.Sprintf("%d%%", t)
		}
		soft := ""
		if p.Soft {
			soft = " (soft: never refuses)"
		}
		parts = append(parts, fmt.Sprintf("%s%s at %s", p.Name, soft, strings.Join(pcts, ", ")))
	}
	if len(parts) == 0 {
		parts = append(parts, "no quota declares warn or soft: nothing will be sent")
	}
	fmt.Fprintf(w, "budgets: warnings once per tenant per period: %s\n", strings.Join(parts, "; "))
	if hook != nil {
		fmt.Fprintf(w, "budgets: warnings are POSTed to %s, signed with the secret in $%s (at least %d bytes where the program runs)\n",
			hook.URL, hook.SecretEnv, budget.MinSecret)
	}
}
