package pgdir_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/directory/pgdir"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/pgtest"
)

const (
	benchTenants = 100_000
	benchKeys    = 200_000
)

// seedLarge fills a migrated database with benchTenants tenants on three
// plans (one in ten with an override of its own) and benchKeys keys.
func seedLarge(b *testing.B, conn *pgx.Conn) {
	b.Helper()
	ctx := context.Background()
	for i, plan := range []string{"free", "team", "enterprise"} {
		if err := pgdir.SetPlan(ctx, conn, plan, map[string]limits.Override{"rpm": {Limit: int64(10 * (i + 1))}}, i == 0); err != nil {
			b.Fatal(err)
		}
	}
	plans := []string{"free", "team", "enterprise"}
	_, err := conn.CopyFrom(ctx, pgx.Identifier{"sluice_tenants"}, []string{"name", "plan"},
		pgx.CopyFromSlice(benchTenants, func(i int) ([]any, error) { return []any{fmt.Sprintf("tenant-%06d", i), plans[i%3]}, nil }))
	if err != nil {
		b.Fatal(err)
	}
	_, err = conn.CopyFrom(ctx, pgx.Identifier{"sluice_tenant_overrides"}, []string{"tenant", "policy", "limit"},
		pgx.CopyFromSlice(benchTenants/10, func(i int) ([]any, error) {
			return []any{fmt.Sprintf("tenant-%06d", i*10), "rpm", int64(1000 + i)}, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	_, err = conn.CopyFrom(ctx, pgx.Identifier{"sluice_keys"}, []string{"hash", "key_id", "tenant"},
		pgx.CopyFromSlice(benchKeys, func(i int) ([]any, error) {
			return []any{apikey.Sum(fmt.Sprintf("sk-bench-%07d", i)).String(), fmt.Sprintf("k%07d", i), fmt.Sprintf("tenant-%06d", i/2)}, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReady measures a replica's start with 100,000 tenants and
// 200,000 keys: from Open to a directory installed in the controller and
// the key set (ready-ms; load-ms is the database's part, pgdir.Load
// alone; ready-cpu-ms the replica's own CPU time, which a busy machine
// inflates less), and the heap it keeps per tenant
// (heap-bytes/tenant: the controller's limit table, the key set and the
// directory's copy, keys included).
func BenchmarkReady(b *testing.B) {
	dsn := pgtest.DB(b)
	conn := migrated(b, dsn)
	seedLarge(b, conn)
	var ready, heap, load, cpu float64
	for b.Loop() {
		start := time.Now()
		if _, _, err := pgdir.Load(context.Background(), conn); err != nil {
			b.Fatal(err)
		}
		load += float64(time.Since(start).Milliseconds())
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		start, cpu0 := time.Now(), cpuTime()
		r := newReplica(b, dsn, pgdir.Config{}, nil)
		ready += float64(time.Since(start).Milliseconds())
		cpu += float64((cpuTime() - cpu0).Milliseconds())
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap += float64(after.HeapAlloc) - float64(before.HeapAlloc)
		if code, q := r.call("sk-bench-0000003"); code != 200 || q != 20 {
			b.Fatalf("tenant-000001's key: status %d, quota %d; want 200, 20", code, q)
		}
		runtime.KeepAlive(r)
		r.fol.Close()
	}
	b.ReportMetric(ready/float64(b.N), "ready-ms")
	b.ReportMetric(load/float64(b.N), "load-ms")
	b.ReportMetric(cpu/float64(b.N), "ready-cpu-ms")
	b.ReportMetric(heap/float64(b.N)/benchTenants, "heap-bytes/tenant")
	b.ReportMetric(0, "ns/op")
}

// cpuTime returns the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRevokeWithSnapshot measures, with 100,000 tenants and 200,000
// keys, how long a replica with a snapshot takes to refuse a key revoked
// (revoke-ms: the snapshot is written to disk before the replica acts),
// against one without (revoke-nosnap-ms), and the snapshot's size.
func BenchmarkRevokeWithSnapshot(b *testing.B) {
	dsn := pgtest.DB(b)
	conn := migrated(b, dsn)
	seedLarge(b, conn)
	snap := filepath.Join(b.TempDir(), "directory.json")
	with := newReplica(b, dsn, pgdir.Config{Snapshot: snap}, nil)
	without := newReplica(b, dsn, pgdir.Config{}, nil)
	var withMs, withoutMs float64
	i := 0
	for b.Loop() {
		key := fmt.Sprintf("sk-bench-%07d", i)
		start := time.Now()
		if err := pgdir.RevokeKey(context.Background(), conn, fmt.Sprintf("k%07d", i)); err != nil {
			b.Fatal(err)
		}
		for _, r := range []*replica{without, with} {
			waitFor(b, time.Minute, "revocation", func() bool { code, _ := r.call(key); return code == http.StatusUnauthorized })
			ms := float64(time.Since(start).Microseconds()) / 1000
			if r == with {
				withMs += ms
			} else {
				withoutMs += ms
			}
		}
		i++
	}
	st, err := os.Stat(snap)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(withMs/float64(b.N), "revoke-ms")
	b.ReportMetric(withoutMs/float64(b.N), "revoke-nosnap-ms")
	b.ReportMetric(float64(st.Size())/1e6, "snapshot-MB")
	b.ReportMetric(0, "ns/op")
}

// importData returns a directory of tenants tenants on three plans (one
// in ten with an override of its own), each with two keys.
func importData(tenants int) *directory.Data {
	d := &directory.Data{
		Plans: limits.Plans{Default: "free", Plans: map[string]map[string]limits.Override{}, Tenants: make(map[string]limits.TenantPlan, tenants)},
		Keys:  make(map[apikey.Hash]apikey.Identity, 2*tenants),
	}
	plans := []string{"free", "team", "enterprise"}
	for i, plan := range plans {
		d.Plans.Plans[plan] = map[string]limits.Override{"rpm": {Limit: int64(10 * (i + 1))}}
	}
	for i := range tenants {
		name := fmt.Sprintf("tenant-%06d", i)
		tp := limits.TenantPlan{Plan: plans[i%3]}
		if i%10 == 0 {
			tp.Overrides = map[string]limits.Override{"rpm": {Limit: 100, Per: time.Minute}}
		}
		d.Plans.Tenants[name] = tp
		for j := range 2 {
			h := apikey.Sum(fmt.Sprintf("sk-%s-%d", name, j))
			d.Keys[h] = apikey.Identity{Tenant: name, KeyID: h.ID()}
		}
	}
	return d
}

// BenchmarkImport imports a directory into a new database: with Import
// (bulk), and, its peer, with one statement per row as the single writes
// make them (rows), on 5,000 tenants with 10,000 keys; and with Import on
// 100,000 tenants with 200,000 keys (bulk-100k).
func BenchmarkImport(b *testing.B) {
	ctx := context.Background()
	srv := pgtest.Start(b)
	rows := func(conn *pgx.Conn, d *directory.Data) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for plan, os := range d.Plans.Plans {
				if err := pgdir.SetPlan(ctx, tx, plan, os, plan == d.Plans.Default); err != nil {
					return err
				}
			}
			for tenant, tp := range d.Plans.Tenants {
				if err := pgdir.AddTenant(ctx, tx, tenant, tp.Plan); err != nil {
					return err
				}
				for pol, o := range tp.Overrides {
					if err := pgdir.SetOverride(ctx, tx, tenant, pol, o); err != nil {
						return err
					}
				}
			}
			for h, k := range d.Keys {
				if err := pgdir.PutKey(ctx, tx, h, k); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, bc := range []struct {
		name    string
		tenants int
		write   func(*pgx.Conn, *directory.Data) error
	}{
		{"bulk", 5_000, func(c *pgx.Conn, d *directory.Data) error { return pgdir.Import(ctx, c, d) }},
		{"rows", 5_000, rows},
		{"bulk-100k", 100_000, func(c *pgx.Conn, d *directory.Data) error { return pgdir.Import(ctx, c, d) }},
	} {
		d := importData(bc.tenants)
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				conn := migrated(b, srv.NewDB(b))
				b.StartTimer()
				if err := bc.write(conn, d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
