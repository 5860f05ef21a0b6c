package directory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
	"github.com/sluicehq/sluice/admission/limits"
)

// A directory between the policy file and the middleware: a whole
// directory is installed with its bad entry refused, then one tenant
// changes plan.
func Example() {
	f, err := config.Parse("policies.yaml", []byte(`policies:
  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: 5, per: 1m}
directory: {source: postgres}
`))
	if err != nil {
		panic(err)
	}
	ctl, _ := admission.New(f.Config)
	mw, _ := httpadmit.New(ctl, httpadmitfile.Options(f)...)
	dir, _ := directory.New(httpadmitfile.Middleware{Middleware: mw}, directory.Config{Source: "postgres"})
	_ = dir.Apply(f)

	err = dir.Install(&directory.Data{
		Plans: limits.Plans{
			Plans: map[string]map[string]limits.Override{
				"basic": {"rpm": {Limit: 10}},
				"pro":   {"rpm": {Limit: 100}, "tpm": {Limit: 5}}, // no policy tpm
			},
			Tenants: map[string]limits.TenantPlan{"acme": {Plan: "basic"}},
		},
		Keys: map[apikey.Hash]apikey.Identity{apikey.Sum("sk-acme"): {Tenant: "acme", KeyID: "acme-1"}},
	})
	var refused config.Errors
	if errors.As(err, &refused) {
		for _, e := range refused {
			fmt.Println("refused:", e)
		}
	}
	limit := func(tenant string) int64 {
		// The request names the policy set of the snapshot in force.
		tk, _ := ctl.TryAdmit(context.Background(), admission.Request{Tenant: tenant, Policies: mw.Snapshot().Policies()})
		defer tk.Done()
		return tk.Statuses(nil)[0].Limit
	}
	id, _ := mw.Snapshot().Identity().KeySource.Lookup("sk-acme")
	fmt.Println(id.Tenant, "on basic:", limit("acme"))
	_ = dir.SetTenant("acme", &limits.TenantPlan{Plan: "pro"})
	fmt.Println(id.Tenant, "on pro:", limit("acme"))
	_ = dir.SetKey(apikey.Sum("sk-acme"), nil)
	_, ok := mw.Snapshot().Identity().KeySource.Lookup("sk-acme")
	fmt.Println("key after revocation:", ok)
	// Output:
	// refused: postgres: plans.pro.tpm: no such policy "tpm"
	// acme on basic: 10
	// acme on pro: 100
	// key after revocation: false
}
