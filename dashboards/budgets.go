package dashboards

// budgetPanel is the overview's "Tenants near their budget": the quotas
// that declare warning thresholds (package admission/budget) report, per
// policy, the top K tenants past a threshold this period.
func budgetPanel() Panel {
	return table("Tenants near their budget",
		"Share of its quota each tenant past one of the quota's warning thresholds has used this period (the last figure seen; top K per policy, closest first). Only quotas with warn (or soft) report; the period's end clears the list. A soft quota can go past 100% through settlements above their estimate.",
		"percentunit",
		instant(`topk(20, max by (policy, tenant) (admission_budget_used_ratio{policy=~"$policy"}))`, ""))
}
