package config_test

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/admission/config"
)

// Every problem in a file is reported at once, with line, column and path.
func ExampleParse() {
	_, err := config.Parse("policies.yaml", []byte(`
policies:
  - name: per-tenant
    key: tenant
    algorithm: token_bucket
    limit: 60
    per: 60
    burst: 5
    max_cost: 8
plans:
  premium:
    per-tennant: {limit: 600}
`))
	var es config.Errors
	if errors.As(err, &es) {
		for _, e := range es {
			fmt.Println(e)
		}
	}
	// Output:
	// policies.yaml:7:10: policies[0].per: "60" has no unit (write 90s, 1m, 1h or 1d)
	// policies.yaml:8:5: policies[0].burst: 5 is smaller than max_cost 8: the largest request could never be admitted
	// policies.yaml:12:5: plans.premium.per-tennant: no such policy "per-tennant"
}

// Effective lists the limits each plan gives each policy.
func ExampleFile_Effective() {
	f, err := config.Parse("policies.yaml", []byte(`
policies:
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 60, per: 1m}
default_plan: basic
plans:
  basic: {}
  premium:
    rpm: {limit: 600, burst: 100}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range f.Effective() {
		fmt.Println(r.Plan, r.Policy, r.Limit, r.Burst, r.Per)
	}
	// Output:
	// - rpm 60 60 1m0s
	// basic rpm 60 60 1m0s
	// premium rpm 600 100 1m0s
}
