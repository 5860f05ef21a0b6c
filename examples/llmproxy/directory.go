package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/directory/pgdir"
)

// tenantDirectory is the tenant directory of a policy file with
// directory.source postgres: the tenants, plans and keys loaded from the
// database and kept current.
type tenantDirectory struct {
	dir *directory.Directory
	fol *pgdir.Follower
}

// openDirectory loads the directory the file names into the gateway (its
// controller and keys) and follows its changes.
func openDirectory(s *server, mp metric.MeterProvider) (*tenantDirectory, error) {
	d := s.file.Directory
	dsn := os.Getenv(d.DSNEnv)
	if dsn == "" {
		return nil, fmt.Errorf("%s: directory.source is postgres: set %s to the database's connection string", s.file.Source, d.DSNEnv)
	}
	dir, err := directory.New(s.gw, directory.Config{Source: "postgres"}, directory.WithLogger(s.log))
	if err != nil {
		return nil, err
	}
	if err := dir.Apply(s.file); err != nil {
		return nil, err
	}
	fol, err := pgdir.Open(context.Background(), dsn, dir, pgdir.Config{Refresh: d.Refresh, Snapshot: d.Snapshot},
		pgdir.WithLogger(s.log), pgdir.WithMeterProvider(mp))
	if err != nil {
		return nil, err
	}
	return &tenantDirectory{dir: dir, fol: fol}, nil
}

func (t *tenantDirectory) close() { t.fol.Close() }

// banner says where the tenants come from.
func (t *tenantDirectory) banner(w io.Writer, f *config.File) {
	d := t.dir.Data()
	fmt.Fprintf(w, "llmproxy: tenants: PostgreSQL ($%s): %d tenants, %d plans, %d keys, changes followed as they happen (admitctl db manages them)\n",
		f.Directory.DSNEnv, len(d.Plans.Tenants), len(d.Plans.Plans), len(d.Keys))
}
