package admission

import "github.com/sluicehq/sluice/admission/limits"

// limitTable holds the effective limits per tenant, indexed like
// config.policies. A nil table means every tenant has the policies' limits.
type limitTable struct {
	tenants map[string][]limits.Limit
	dflt    []limits.Limit
}

// compilePlans resolves plans, already validated, against the policies in
// evaluation order.
func compilePlans(pl *limits.Plans, policies []*policy) *limitTable {
	if pl.Default == "" && len(pl.Plans) == 0 && len(pl.Tenants) == 0 {
		return nil
	}
	build := func(plan string, own map[string]limits.Override) []limits.Limit {
		ls := make([]limits.Limit, len(policies))
		for i, p := range policies {
			ls[i] = p.base
			if o, ok := pl.Plans[plan][p.Name]; ok {
				ls[i] = o.Apply(ls[i])
			}
			if o, ok := own[p.Name]; ok {
				ls[i] = o.Apply(ls[i])
			}
		}
		return ls
	}
	t := &limitTable{tenants: make(map[string][]limits.Limit, len(pl.Tenants))}
	if pl.Default != "" {
		t.dflt = build(pl.Default, nil)
	}
	for tenant, tp := range pl.Tenants {
		plan := tp.Plan
		if plan == "" {
			plan = pl.Default
		}
		t.tenants[tenant] = build(plan, tp.Overrides)
	}
	return t
}
