package pgdir_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/admission/apikey"
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
	k1, k2 := apikey.Sum("sk-1"), apikey.Sum("sk-2")
	must(pgdir.PutKey(ctx, conn, k1, apikey.Identity{Tenant: "acme", KeyID: "acme-1"}))

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
		Keys: map[apikey.Hash]apikey.Identity{
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
		Keys: map[apikey.Hash]apikey.Identity{
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
			Keys:  map[apikey.Hash]apikey.Identity{apikey.Sum("sk-3"): {Tenant: "other", KeyID: "no way"}},
		}, nil, []string{`key no way: "no way" is not a valid key id`}},
		{"key id taken", &directory.Data{
			Plans: limits.Plans{Tenants: map[string]limits.TenantPlan{"other": {}}},
			Keys:  map[apikey.Hash]apikey.Identity{apikey.Sum("sk-3"): {Tenant: "other", KeyID: "acme-1"}},
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

// notifications returns the payloads sent on the directory's channel by
// run, as a connection listening meanwhile receives them: run's
// transactions are followed by one on another channel, which PostgreSQL
// delivers after theirs.
func notifications(t *testing.T, dsn string, conn *pgx.Conn, run func()) []string {
	t.Helper()
	ctx := context.Background()
	listener := pgtest.Conn(t, dsn)
	if _, err := listener.Exec(ctx, "LISTEN "+pgdir.Channel+"; LISTEN sluice_test_done"); err != nil {
		t.Fatal(err)
	}
	run()
	if _, err := conn.Exec(ctx, "NOTIFY sluice_test_done"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Channel == "sluice_test_done" {
			return got
		}
		got = append(got, n.Payload)
	}
}

// TestImportNotifiesOnce: an import of 2,000 tenants, each with a key and
// half with an override, sends one notification (not one per row), and a
// replica following the database then holds exactly the imported
// directory. A bulk statement outside an import sends one too, a small
// one names each entry it changed, and the replica follows both.
func TestImportNotifiesOnce(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DB(t)
	conn := migrated(t, dsn)
	r := newReplica(t, dsn, pgdir.Config{}, nil)
	const tenants = 2000
	d := &directory.Data{
		Plans: limits.Plans{
			Default: "basic",
			Plans: map[string]map[string]limits.Override{
				"basic": {"rpm": {Limit: 10}},
				"pro":   {"rpm": {Limit: 100}, "inflight": {Limit: 4}},
			},
			Tenants: make(map[string]limits.TenantPlan, tenants),
		},
		Keys: make(map[apikey.Hash]apikey.Identity, tenants),
	}
	for i := range tenants {
		name := fmt.Sprintf("t%04d", i)
		tp := limits.TenantPlan{Plan: []string{"basic", "pro"}[i%2]}
		if i%4 < 2 {
			tp.Overrides = map[string]limits.Override{"rpm": {Limit: int64(i%7 + 1), Per: time.Duration(i%3+1) * time.Minute}}
		}
		d.Plans.Tenants[name] = tp
		h := apikey.Sum("sk-" + name)
		d.Keys[h] = apikey.Identity{Tenant: name, KeyID: fmt.Sprintf("k%04d", i), User: "u"}
	}
	got := notifications(t, dsn, conn, func() {
		if err := pgdir.Import(ctx, conn, d); err != nil {
			t.Fatal(err)
		}
	})
	if want := []string{"plan:*"}; !reflect.DeepEqual(got, want) {
		t.Errorf("an import of %d tenants sent %d notifications (%q...); want %q", tenants, len(got), got[:min(len(got), 3)], want)
	}
	waitFor(t, 30*time.Second, "import on the replica", func() bool { return len(r.dir.Data().Keys) == tenants })
	if view := r.dir.Data(); !reflect.DeepEqual(view, d) {
		t.Errorf("the replica's directory after the import differs from the directory imported:\n%.500v\nwant %.500v", view, d)
	}

	// An operator's bulk statement: one notification, and the replica
	// reloads.
	got = notifications(t, dsn, conn, func() {
		if _, err := conn.Exec(ctx, "UPDATE sluice_tenants SET plan = 'pro' WHERE plan = 'basic'"); err != nil {
			t.Fatal(err)
		}
	})
	if want := []string{"plan:*"}; !reflect.DeepEqual(got, want) {
		t.Errorf("an UPDATE of %d tenants sent %d notifications (%q...); want %q", tenants/2, len(got), got[:min(len(got), 3)], want)
	}
	waitFor(t, 30*time.Second, "bulk update on the replica", func() bool { return limitOf(r, "t0003") == 100 })
	// A small statement names each entry, renames both names, and the
	// replica re-reads them.
	got = notifications(t, dsn, conn, func() {
		if _, err := conn.Exec(ctx, "UPDATE sluice_tenants SET name = name || '-x' WHERE name IN ('t0004', 't0008')"); err != nil {
			t.Fatal(err)
		}
	})
	slices.Sort(got)
	if want := []string{"key:" + apikey.Sum("sk-t0004").String(), "key:" + apikey.Sum("sk-t0008").String(),
		"tenant:t0004", "tenant:t0004-x", "tenant:t0008", "tenant:t0008-x"}; !slices.Equal(got, want) {
		t.Errorf("renaming two tenants sent %q; want %q", got, want)
	}
	waitFor(t, 30*time.Second, "rename on the replica", func() bool {
		view := r.dir.Data()
		_, old := view.Plans.Tenants["t0004"]
		return !old && view.Plans.Tenants["t0004-x"].Overrides["rpm"].Limit == 5 && view.Keys[apikey.Sum("sk-t0004")].Tenant == "t0004-x"
	})
}
