//go:build !race

// The scale tests run without the race detector (make test runs them in a
// step of their own): they prove size, not concurrency, and under -race
// they take three to four times longer.

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/pgtest"
)

// largeExport writes, as admitctl db export does, a directory of tenants
// tenants on the basic plan, each with one key, into a file of the test's
// directory and returns its path.
func largeExport(t *testing.T, tenants int) string {
	t.Helper()
	var b bytes.Buffer
	if err := writeExport(&b, largeDirectory(tenants)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "export.yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// largeDirectory returns a directory of tenants tenants on the basic
// plan, each with one key.
func largeDirectory(tenants int) *directory.Data {
	d := &directory.Data{
		Plans: limits.Plans{
			Default: "basic",
			Plans:   map[string]map[string]limits.Override{"basic": {"rpm": {Limit: 10}}},
			Tenants: make(map[string]limits.TenantPlan, tenants),
		},
		Keys: make(map[apikey.Hash]apikey.Identity, tenants),
	}
	for i := range tenants {
		name := fmt.Sprintf("t%06d", i)
		d.Plans.Tenants[name] = limits.TenantPlan{Plan: "basic"}
		h := apikey.Sum("sk-" + name)
		d.Keys[h] = apikey.Identity{Tenant: name, KeyID: h.ID()}
	}
	return d
}

// BenchmarkWriteExport writes the export of 10,000 tenants, each with a
// key, a plan and a tenant at a time (stream) and, its peer, as the
// yaml.v3 encoder writes the whole file at once (encoder).
func BenchmarkWriteExport(b *testing.B) {
	d := largeDirectory(10_000)
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := writeExport(io.Discard, d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			oldExport(b, d)
		}
	})
}

// TestCheckLargeFile: check counts every tenant and every key of a
// policy file of 100,000 tenants, each with a key.
func TestCheckLargeFile(t *testing.T) {
	const tenants = 100_000
	var b strings.Builder
	b.WriteString("policies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}\nidentity: {anonymous: deny}\n")
	b.WriteString("default_plan: basic\nplans:\n  basic: {rpm: {limit: 10}}\ntenants:\n")
	for i := range tenants {
		fmt.Fprintf(&b, "  t%06d: {api_keys: [%s]}\n", i, apikey.Sum(fmt.Sprintf("sk-t%06d", i)))
	}
	code, out, errs := checkFile(t, b.String())
	if want := fmt.Sprintf("F: OK: 1 policies, 1 plans, %d tenants, %d API keys", tenants, tenants); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("check = %d, %.200q; stderr %.500q; want %q", code, out, errs, want)
	}
}

// TestDBImportLargeExport imports into a real database the export of
// 100,000 tenants, each with a key (over 1,000,000 YAML nodes), and
// exports it again unchanged.
func TestDBImportLargeExport(t *testing.T) {
	const tenants = 100_000
	srv := pgtest.Start(t)
	dsn := srv.NewDB(t)
	pf := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(pf, []byte(dbPolicies), 0o644); err != nil {
		t.Fatal(err)
	}
	st := time.Now()
	path := largeExport(t, tenants)
	t.Logf("export of %d tenants written in %v", tenants, time.Since(st))
	export, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"migrate"}, {"import", path}, {"export"}} {
		st := time.Now()
		code, out, errs := runArgs("", append([]string{"db", "-dsn", dsn, "-f", pf}, args...)...)
		t.Logf("db %s: %v", args[0], time.Since(st))
		if code != 0 {
			t.Fatalf("db %s = %d; stderr: %.500s", args[0], code, errs)
		}
		switch args[0] {
		case "import":
			if want := fmt.Sprintf("imported 1 plans, %d tenants, %d keys", tenants, tenants); !strings.Contains(out, want) {
				t.Errorf("import: %q; want %q", out, want)
			}
		case "export":
			if out != string(export) {
				t.Errorf("export after import differs from the export imported (%d bytes; want %d)", len(out), len(export))
			}
		}
	}
}
