package admission

import (
	"errors"
	"fmt"
	"sort"
)

// Plans give tenants limits other than a policy's own: each tenant is on a
// plan, and a plan overrides the limits of some policies (for example basic
// 60 requests per minute, premium 600). A tenant may also carry its own
// overrides on top of its plan's.
type Plans struct {
	// Default is the plan of tenants not listed in Tenants; empty means the
	// policies' own limits.
	Default string
	// Plans maps a plan name to its overrides, by policy name.
	Plans map[string]map[string]Override
	// Tenants maps a tenant to its plan and own overrides.
	Tenants map[string]TenantPlan
}

// TenantPlan is one tenant's plan and overrides.
type TenantPlan struct {
	Plan      string
	Overrides map[string]Override
}

// limitTable holds the effective limits per tenant, indexed like
// config.policies. A nil table means every tenant has the policies' limits.
type limitTable struct {
	tenants map[string][]Limit
	dflt    []Limit
}

// compile resolves plans against the policies in evaluation order.
func (pl *Plans) compile(policies []*policy) (*limitTable, error) {
	if pl == nil || (pl.Default == "" && len(pl.Plans) == 0 && len(pl.Tenants) == 0) {
		return nil, nil
	}
	index := make(map[string]int, len(policies))
	for i, p := range policies {
		index[p.Name] = i
	}
	var errs []error
	check := func(path, pol string, o Override) {
		i, ok := index[pol]
		if !ok {
			errs = append(errs, &FieldError{Path: path, Msg: "no such policy"})
			return
		}
		errs = append(errs, o.validate(path, policies[i].Algorithm))
	}
	for _, name := range sortedKeys(pl.Plans) {
		for _, pol := range sortedKeys(pl.Plans[name]) {
			check(fmt.Sprintf("plans.%s.%s", name, pol), pol, pl.Plans[name][pol])
		}
	}
	if pl.Default != "" {
		if _, ok := pl.Plans[pl.Default]; !ok {
			errs = append(errs, &FieldError{Path: "plans.default", Msg: fmt.Sprintf("no plan %q", pl.Default)})
		}
	}
	for _, tenant := range sortedKeys(pl.Tenants) {
		tp := pl.Tenants[tenant]
		if tp.Plan != "" {
			if _, ok := pl.Plans[tp.Plan]; !ok {
				errs = append(errs, &FieldError{Path: fmt.Sprintf("tenants.%s.plan", tenant), Msg: fmt.Sprintf("no plan %q", tp.Plan)})
			}
		}
		for _, pol := range sortedKeys(tp.Overrides) {
			check(fmt.Sprintf("tenants.%s.overrides.%s", tenant, pol), pol, tp.Overrides[pol])
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	build := func(plan string, own map[string]Override) []Limit {
		ls := make([]Limit, len(policies))
		for i, p := range policies {
			ls[i] = p.base
			if o, ok := pl.Plans[plan][p.Name]; ok {
				ls[i] = o.apply(ls[i])
			}
			if o, ok := own[p.Name]; ok {
				ls[i] = o.apply(ls[i])
			}
		}
		return ls
	}
	t := &limitTable{tenants: make(map[string][]Limit, len(pl.Tenants))}
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
	return t, nil
}

func (o Override) validate(path string, a Algorithm) error {
	var errs []error
	if o.Burst != 0 && a != TokenBucket {
		errs = append(errs, &FieldError{Path: path + ".burst", Msg: "only a token_bucket has a burst"})
	}
	if o.Per != 0 && (a == Concurrency || a == Quota) {
		errs = append(errs, &FieldError{Path: path + ".per", Msg: fmt.Sprintf("a %s policy's period cannot be overridden", a)})
	}
	if o.Limit < 0 {
		errs = append(errs, &FieldError{Path: path + ".limit", Msg: "must be > 0"})
	}
	if o.Limit > MaxAmount {
		errs = append(errs, &FieldError{Path: path + ".limit", Msg: fmt.Sprintf("must be <= %d (MaxAmount), got %d", MaxAmount, o.Limit)})
	}
	if o.Burst < 0 {
		errs = append(errs, &FieldError{Path: path + ".burst", Msg: "must be > 0"})
	}
	if o.Burst > MaxAmount {
		errs = append(errs, &FieldError{Path: path + ".burst", Msg: fmt.Sprintf("must be <= %d (MaxAmount), got %d", MaxAmount, o.Burst)})
	}
	if o.Per < 0 {
		errs = append(errs, &FieldError{Path: path + ".per", Msg: "must be > 0"})
	}
	if o.Per > maxDuration {
		errs = append(errs, &FieldError{Path: path + ".per", Msg: fmt.Sprintf("must be at most 100 years, got %v", o.Per)})
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
