package admission

import (
	"hash/maphash"
	"maps"
	"sync/atomic"

	"github.com/sluicehq/sluice/admission/limits"
)

// tenantShards is the number of shards of a limit table: an update to one
// tenant copies one shard, 1/64 of the tenants.
const tenantShards = 64

// limitTable holds the effective limits per tenant, indexed like
// config.policies. A nil table means every tenant has the policies' limits.
// The tenants are sharded; each shard is an immutable map replaced whole
// (copy on write) by SetTenant, so that the request path reads it with an
// atomic load and a slice handed out is never changed.
type limitTable struct {
	seed     maphash.Seed
	shards   [tenantShards]atomic.Pointer[map[string][]limits.Limit]
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
	var shards [tenantShards]map[string][]limits.Limit
	for i := range shards {
		shards[i] = make(map[string][]limits.Limit, len(pl.Tenants)/tenantShards)
	}
	for tenant, tp := range pl.Tenants {
		shards[t.shard(tenant)][tenant] = t.build(tp.Plan, tp.Overrides)
	}
	for i := range shards {
		t.shards[i].Store(&shards[i])
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
	ls, ok := (*t.shards[t.shard(tenant)].Load())[tenant]
	return ls, ok
}

// set replaces (tp non-nil) or removes one tenant, copying its shard; the
// caller serialises writers.
func (t *limitTable) set(tenant string, tp *limits.TenantPlan) {
	s := &t.shards[t.shard(tenant)]
	m := maps.Clone(*s.Load())
	if tp == nil {
		delete(m, tenant)
	} else {
		m[tenant] = t.build(tp.Plan, tp.Overrides)
	}
	s.Store(&m)
}

// SetTenant replaces one tenant's plan and overrides (tp nil removes the
// tenant: it gets the default plan), without touching the other tenants'
// limits or any partition: the tenant's next request is decided by its new
// limits against the levels its partitions have. tp is validated against
// the installed policies and plans first; on error nothing changes.
func (c *Controller) SetTenant(tenant string, tp *limits.TenantPlan) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.cfg.Load()
	check := Config{}
	for _, p := range cur.policies {
		check.Policies = append(check.Policies, p.Policy)
	}
	if cur.limits != nil {
		check.Plans.Default, check.Plans.Plans = cur.limits.deflt, cur.limits.plans
	}
	if tp != nil {
		check.Plans.Tenants = map[string]limits.TenantPlan{tenant: *tp}
	}
	if err := check.Validate(); err != nil {
		return err
	}
	if cur.limits == nil {
		if tp == nil {
			return nil
		}
		next := *cur
		next.limits = compilePlans(&check.Plans, cur.policies)
		c.cfg.Store(&next)
		return nil
	}
	cur.limits.set(tenant, tp)
	return nil
}
