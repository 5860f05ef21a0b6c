package dashboards_test

import (
	"fmt"

	"github.com/sluicehq/sluice/dashboards"
)

// Each dashboard has a stable uid and is written to its own JSON file,
// importable into Grafana as it is.
func ExampleAll() {
	for _, d := range dashboards.All() {
		fmt.Printf("%s %s %q\n", d.File(), d.UID, d.Title)
	}
	// Output:
	// overview.json sluice-overview "Sluice / Overview"
	// rollout.json sluice-rollout "Sluice / Rollout"
	// tenant.json sluice-tenant "Sluice / Tenant"
	// llm.json sluice-llm "Sluice / LLM"
	// provider.json sluice-provider "Sluice / Provider"
}
