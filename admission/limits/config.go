package limits

import (
	"errors"
	"fmt"
	"sort"
)

// Config is a set of policies and the tenants' plans: what a controller
// enforces.
type Config struct {
	Policies []Policy
	Plans    Plans
}

// Validate reports every problem with the policies and plans at once.
func (c *Config) Validate() error {
	var errs []error
	seen := map[string]int{}
	algorithms := make(map[string]Algorithm, len(c.Policies))
	for i := range c.Policies {
		p := &c.Policies[i]
		path := fmt.Sprintf("policies[%d]", i)
		errs = append(errs, p.Validate(path))
		if j, dup := seen[p.Name]; dup && p.Name != "" {
			errs = append(errs, &FieldError{Path: path + ".name", Msg: fmt.Sprintf("%q already used by policies[%d]", p.Name, j)})
		}
		seen[p.Name] = i
		algorithms[p.Name] = p.Algorithm
	}
	errs = append(errs, c.Plans.validate(algorithms))
	return errors.Join(errs...)
}

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

// validate checks the plans against the policies' algorithms, by name.
func (pl *Plans) validate(algorithms map[string]Algorithm) error {
	var errs []error
	check := func(path, pol string, o Override) {
		a, ok := algorithms[pol]
		if !ok {
			errs = append(errs, &FieldError{Path: path, Msg: "no such policy"})
			return
		}
		errs = append(errs, o.validate(path, a))
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
	return errors.Join(errs...)
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
	} else if a == SlidingLog && o.Limit > maxLogLimit {
		errs = append(errs, &FieldError{Path: path + ".limit", Msg: fmt.Sprintf("a sliding_log keeps one entry per admission: at most %d, got %d", maxLogLimit, o.Limit)})
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
