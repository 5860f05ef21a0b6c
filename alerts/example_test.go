package alerts_test

import (
	"fmt"

	"github.com/sluicehq/sluice/alerts"
)

// The rollout gate: the alert that says a shadow policy is not ready to be
// enforced.
func ExampleRules() {
	rules, err := alerts.Rules()
	if err != nil {
		panic(err)
	}
	for _, r := range rules {
		if r.Alert == "AdmissionShadowWouldRejectAboveThreshold" {
			fmt.Println(r.Expr)
			fmt.Println("for", r.For, "severity", r.Labels["severity"])
		}
	}
	// Output:
	// policy:admission_would_reject:ratio_rate30m > 0.02 unless on (job, policy) admission_budget_soft == 1
	// for 15m severity ticket
}
