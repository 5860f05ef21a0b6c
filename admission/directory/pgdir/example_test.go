package pgdir_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/directory/pgdir"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/pgtest"
)

// A program whose tenants live in PostgreSQL: migrate, add a plan, a
// tenant and a key, then load the directory and look the key up.
func Example() {
	srv, err := pgtest.Launch()
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	dsn := srv.DSN("postgres")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)
	applied, _ := pgdir.Migrate(ctx, conn)
	fmt.Println("applied migrations:", applied)
	_ = pgdir.SetPlan(ctx, conn, "pro", map[string]limits.Override{"rpm": {Limit: 600}}, false)
	_ = pgdir.AddTenant(ctx, conn, "acme", "pro")
	key, id, _ := pgdir.CreateKey(ctx, conn, "acme", "acme-1", "")
	fmt.Println("created key", id)

	f, _ := config.Parse("policies.yaml", []byte(`policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}
directory: {source: postgres}
`))
	ctl, _ := admission.New(f.Config)
	mw, _ := httpadmit.New(ctl, httpadmitfile.Options(f)...)
	dir, _ := directory.New(httpadmitfile.Middleware{Middleware: mw}, directory.Config{Source: "postgres"})
	_ = dir.Apply(f)
	fol, err := pgdir.Open(ctx, dsn, dir, pgdir.Config{}, pgdir.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	defer fol.Close()

	snap := mw.Snapshot() // one snapshot: the key and the limits of one directory version
	caller, _ := snap.Identity().KeySource.Lookup(key)
	tk, _ := ctl.TryAdmit(ctx, admission.Request{Tenant: caller.Tenant, KeyID: caller.KeyID, Policies: snap.Policies()})
	fmt.Println(caller.Tenant, "limit:", tk.Statuses(nil)[0].Limit)
	tk.Done()
	// Output:
	// applied migrations: [1 2 3]
	// created key acme-1
	// acme limit: 600
}
