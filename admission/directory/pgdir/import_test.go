package pgdir_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/directory/pgdir"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/pgtest"
)

// TestImport: an import updates the entries present (a plan's limits, the
// default plan, a tenant's plan and overrides, a key's tenant and user),
// adds the new ones (a key's tenant missing from the tenants on the
// default plan), removes a tenant's limits given as a zero override and
// nothing else; an import with a refused entry, a tenant on a missing
// plan or a bad key writes nothing, and says which entry.
func TestImport(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	conn := migrated(t, srv.NewDB(t))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(pgdir.SetPlan(ctx, conn, "basic", map[string]limits.Override{"rpm": {Limit: 5}}, true))
	must(pgdir.SetPlan(ctx, conn, "pro", map[string]limits.Override{"rpm": {Limit: 50}}, false))
	must(pgdir.AddTenant(ctx, conn, "acme", "pro"))
	must(pgdir.SetOverride(ctx, conn, "acme", "rpm", limits.Override{Limit: 3}))
	must(pgdir.SetOverride(ctx, conn, "acme", "inflight", limits.Override{Limit: 4}))
	k1, k2 := config.HashKey("sk-1"), config.HashKey("sk-2")
	must(pgdir.PutKey(ctx, conn, k1, config.Key{Tenant: "acme", KeyID: "acme-1"}))

	must(pgdir.Import(ctx, conn, &directory.Data{
		Plans: limits.Plans{
			Default: "gold",
			Plans: map[string]map[string]limits.Override{
				"basic": {"rpm": {Limit: 7, Per: 90 * time.Second}},
				"gold":  {},
			},
			Tenants: map[string]limits.TenantPlan{
				"acme": {Plan: "basic", Overrides: map[string]limits.Override{"rpm": {}, "inflight": {Limit: 6}}},
				"new":  {Plan: "gold", Overrides: map[string]limits.Override{"rpm": {Burst: 9}}},
			},
		},
		Keys: map[config.KeyHash]config.Key{
			k1: {Tenant: "acme", KeyID: "acme-1", User: "alice"},
			k2: {Tenant: "keys-only", KeyID: "ko-1"},
		},
	}))
	want := &directory.Data{
		Plans: limits.Plans{
			Default: "gold",
			Plans: map[string]map[string]limits.Override{
				"basic": {"rpm": {Limit: 7, Per: 90 * time.Second}},
				"pro":   {"rpm": {Limit: 50}},
				"gold":  {},
			},
			Tenants: map[string]limits.TenantPlan{
				"acme":      {Plan: "basic", Overrides: map[string]limits.Override{"inflight": {Limit: 6}}},
				"new":       {Plan: "gold", Overrides: map[string]limits.Override{"rpm": {Burst: 9}}},
				"keys-only": {},
			},
		},
		Keys: map[config.KeyHash]config.Key{
			k1: {Tenant: "acme", KeyID: "acme-1", User: "alice"},
			k2: {Tenant: "keys-only", KeyID: "ko-1"},
		},
	}
	load := func() *directory.Data {
		t.Helper()
		d, problems, err := pgdir.Load(ctx, conn)
		if err != nil || len(problems) > 0 {
			t.Fatalf("Load = %v, %v", problems, err)
		}
		return d
	}
	if got := load(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after Import: %+v\nwant %+v", got, want)
	}

	for _, tc := range []struct {
		name     string
		d        *directory.Data
		is       error
		contains []string
	}{
		{"refused entries", &directory.Data{Plans: limits.Plans{Tenants: map[string]limits.TenantPlan{
			"other": {Plan: "basic"},
			"acme":  {Overrides: map[string]limits.Override{"rpm": {Limit: -1}}},
			"bad\n": {},
		}}}, pgdir.ErrInvalid, []string{"tenants.acme.overrides.rpm.limit: must be > 0, got -1", `"bad\n" is not a valid tenant name`}},
		{"finer than kept", &directory.Data{Plans: limits.Plans{Plans: map[string]map[string]limits.Override{
			"basic": {"rpm": {Limit: 1, Per: 1500 * time.Nanosecond}},
		}}}, pgdir.ErrInvalid, []string{"plans.basic.rpm.per: 1.5µs is finer than the database keeps"}},
		{"missing plan", &directory.Data{Plans: limits.Plans{
			Plans:   map[string]map[string]limits.Override{"basic": {"rpm": {Limit: 1}}},
			Tenants: map[string]limits.TenantPlan{"other": {Plan: "basic"}, "z": {Plan: "platinum"}, "y": {Plan: "platinum"}},
		}}, pgdir.ErrNotFound, []string{`tenant "y": plan "platinum": not found`}},
		{"bad key", &directory.Data{
			Plans: limits.Plans{Tenants: map[string]limits.TenantPlan{"other": {}}},
			Keys:  map[config.KeyHash]config.Key{config.HashKey("sk-3"): {Tenant: "other", KeyID: "no way"}},
		}, nil, []string{`key no way: "no way" is not a valid key id`}},
		{"key id taken", &directory.Data{
			Plans: limits.Plans{Tenants: map[string]limits.TenantPlan{"other": {}}},
			Keys:  map[config.KeyHash]config.Key{config.HashKey("sk-3"): {Tenant: "other", KeyID: "acme-1"}},
		}, nil, []string{"duplicate key value", "Key (key_id)=(acme-1) already exists"}},
	} {
		err := pgdir.Import(ctx, conn, tc.d)
		if err == nil || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: Import = %v; want %v", tc.name, err, tc.is)
			continue
		}
		for _, s := range tc.contains {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: Import = %v; want it to say %q", tc.name, err, s)
			}
		}
		if got := load(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: written: %+v\nwant %+v", tc.name, got, want)
		}
	}
}
