package admission

import (
	"hash/maphash"
	"maps"

	"github.com/sluicehq/sluice/admission/limits"
)

// tenantShards is the number of shards of a limit table: an update to one
// tenant copies one shard, 1/64 of the tenants, and the 64 shard pointers.
const tenantShards = 64

// limitTable holds the effective limits per tenant, indexed like
// PolicySet.policies. A nil table means every tenant has the policies'
// limits. A table is immutable, as the set holding it: the tenants are
// sharded, and a change of one tenant (WithTenant) makes a new table
// sharing every shard but the tenant's, which it copies, so that a set
// with 100,000 tenants changes one without copying the others, and a
// slice handed out is never changed.
type limitTable struct {
	seed     maphash.Seed
	shards   [tenantShards]map[string][]limits.Limit
	dflt     []limits.Limit
	plans    map[string]map[string]limits.Override // read only
	deflt    string                                // the default plan
	policies []*policy                             // in evaluation order
}

// compilePlans resolves plans, already validated, against the policies in
// evaluation order.
func compilePlans(pl *limits.Plans, policies []*policy) *limitTable {
	if pl.Default == "" && len(pl.Plans) == 0 && len(pl.Tenants) == 0 {
		return nil
	}
	t := &limitTable{seed: maphash.MakeSeed(), plans: maps.Clone(pl.Plans), deflt: pl.Default, policies: policies}
	if pl.Default != "" {
		t.dflt = t.build(pl.Default, nil)
	}
	for i := range t.shards {
		t.shards[i] = make(map[string][]limits.Limit, len(pl.Tenants)/tenantShards)
	}
	for tenant, tp := range pl.Tenants {
		t.shards[t.shard(tenant)][tenant] = t.build(tp.Plan, tp.Overrides)
	}
	return t
}

// build returns the limits of a tenant on plan (empty: the default plan)
// with its own overrides.
func (t *limitTable) build(plan string, own map[string]limits.Override) []limits.Limit {
	if plan == "" {
		plan = t.deflt
	}
	ls := make([]limits.Limit, len(t.policies))
	for i, p := range t.policies {
		ls[i] = p.base
		if o, ok := t.plans[plan][p.Name]; ok {
			ls[i] = o.Apply(ls[i])
		}
		if o, ok := own[p.Name]; ok {
			ls[i] = o.Apply(ls[i])
		}
	}
	return ls
}

func (t *limitTable) shard(tenant string) int {
	return int(maphash.String(t.seed, tenant) % tenantShards)
}

// lookup returns the limits of a tenant the table lists.
func (t *limitTable) lookup(tenant string) ([]limits.Limit, bool) {
	ls, ok := t.shards[t.shard(tenant)][tenant]
	return ls, ok
}

// with returns t with one tenant replaced (tp non-nil) or removed,
// copying that tenant's shard only.
func (t *limitTable) with(tenant string, tp *limits.TenantPlan) *limitTable {
	next := *t
	i := t.shard(tenant)
	m := maps.Clone(t.shards[i])
	if tp == nil {
		delete(m, tenant)
	} else {
		m[tenant] = t.build(tp.Plan, tp.Overrides)
	}
	next.shards[i] = m
	return &next
}

// WithTenant returns s with one tenant's plan and overrides replaced (tp
// nil removes the tenant: it gets the default plan), sharing every other
// tenant's limits and every partition with s: the tenant's next request
// decided by the new set is decided by its new limits against the levels
// its partitions have. tp is validated against the policies and plans of
// s first; s itself never changes.
func (s *PolicySet) WithTenant(tenant string, tp *limits.TenantPlan) (*PolicySet, error) {
	check := s.config()
	if tp != nil {
		check.Plans.Tenants = map[string]limits.TenantPlan{tenant: *tp}
	}
	if err := check.Validate(); err != nil {
		return nil, err
	}
	// Every field of s but installed: next is installed when it is.
	next := &PolicySet{ctl: s.ctl, policies: s.policies, early: s.early, lone: s.lone, byName: s.byName, limits: s.limits}
	switch {
	case s.limits != nil:
		next.limits = s.limits.with(tenant, tp)
	case tp != nil:
		next.limits = compilePlans(&check.Plans, s.policies)
	}
	return next, nil
}

// SetTenant installs the set WithTenant derives from the one installed:
// one tenant changed, the others' limits and every partition kept. On
// error nothing changes.
func (c *Controller) SetTenant(tenant string, tp *limits.TenantPlan) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	next, err := c.cfg.Load().WithTenant(tenant, tp)
	if err != nil {
		return err
	}
	c.install(next)
	return nil
}
