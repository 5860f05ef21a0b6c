package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/pgtest"
)

const dbPolicies = `policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}
  - {name: inflight, key: [tenant], algorithm: concurrency, limit: 4}
identity: {anonymous: deny}
directory: {source: postgres}
`

// TestDBCommands runs the operator's flow against a real database: migrate
// (twice), plans, a tenant, a key printed once, a refused override, a
// revocation, and an export imported into a second database unchanged.
func TestDBCommands(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDB(t)
	pf := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(pf, []byte(dbPolicies), 0o644); err != nil {
		t.Fatal(err)
	}
	db := func(want int, args ...string) string {
		t.Helper()
		code, out, errs := runArgs("", append([]string{"db", "-dsn", dsn, "-f", pf}, args...)...)
		if code != want {
			t.Fatalf("db %s = %d; want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errs)
		}
		return out + errs
	}
	if out := db(0, "migrate"); !strings.Contains(out, "applied migration 1") {
		t.Errorf("first migrate: %q", out)
	}
	if out := db(0, "migrate"); !strings.Contains(out, "schema up to date") {
		t.Errorf("second migrate: %q", out)
	}
	db(0, "plan", "set", "basic", "rpm", "limit=10")
	db(0, "plan", "set", "pro", "rpm", "limit=600", "burst=900")
	db(0, "plan", "default", "basic")
	db(0, "tenant", "add", "acme", "basic")
	out := db(0, "key", "create", "acme", "acme-1", "alice")
	key := strings.Fields(out)[0]
	if !strings.HasPrefix(key, "sk-sluice-") || !strings.Contains(out, "shown this once") {
		t.Errorf("key create printed %q", out)
	}
	db(0, "tenant", "plan", "acme", "pro")
	db(0, "override", "set", "acme", "inflight", "limit=16")
	// Refused with check's message, and nothing written.
	if out := db(1, "override", "set", "acme", "inflight", "burst=3"); !strings.Contains(out, "tenants.acme.overrides.inflight.burst: only a token_bucket has a burst") {
		t.Errorf("bad override: %q", out)
	}
	if out := db(1, "tenant", "plan", "acme", "gold"); !strings.Contains(out, `tenants.acme.plan: no plan "gold"`) {
		t.Errorf("missing plan: %q", out)
	}
	list := db(0, "tenant", "list")
	if !strings.Contains(list, "acme") || !strings.Contains(list, "pro") {
		t.Errorf("tenant list:\n%s", list)
	}
	export := db(0, "export")
	for _, want := range []string{"default_plan: basic", "limit: 600", "burst: 900", "plan: pro", "limit: 16", apikey.Sum(key).String(), "id: acme-1", "user: alice"} {
		if !strings.Contains(export, want) {
			t.Errorf("export lacks %q:\n%s", want, export)
		}
	}
	if strings.Contains(export, key) {
		t.Error("the export holds the key itself")
	}
	db(0, "key", "create", "acme", "acme-2")
	db(0, "key", "revoke", "acme-2")
	if out := db(1, "key", "revoke", "acme-2"); !strings.Contains(out, "not found") {
		t.Errorf("revoking twice: %q", out)
	}

	// The export, imported into a second database, exports the same.
	exp := filepath.Join(t.TempDir(), "export.yaml")
	if err := os.WriteFile(exp, []byte(export), 0o644); err != nil {
		t.Fatal(err)
	}
	dsn = srv.NewDB(t)
	db(0, "migrate")
	if out := db(0, "import", exp); !strings.Contains(out, "imported 2 plans, 1 tenants, 1 keys") {
		t.Errorf("import: %q", out)
	}
	if again := db(0, "export"); again != export {
		t.Errorf("export after import:\n%s\nwant:\n%s", again, export)
	}
	code, _, errs := runArgs("", "db", "-dsn", dsn, "plan", "set", "x")
	if code != 2 || !strings.Contains(errs, "want NAME POLICY") {
		t.Errorf("bad usage = %d, %q; want 2", code, errs)
	}
}

// TestDBImportPolicyFile moves a file-based setup into the database in one
// command: its plans, tenants and hashed keys.
func TestDBImportPolicyFile(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDB(t)
	if code, _, errs := runArgs("", "db", "-dsn", dsn, "migrate"); code != 0 {
		t.Fatal(errs)
	}
	code, out, errs := runArgs("", "db", "-dsn", dsn, "import", "../../examples/policies/example.yaml")
	if code != 0 || !strings.Contains(out, "imported 2 plans, 2 tenants, 3 keys") {
		t.Fatalf("import = %d, %q, %q", code, out, errs)
	}
}

// TestDBRefusesInvalidRows: without -f, a row the gateways would refuse
// (a sign, a name, a unit) is refused with their message, nothing
// written, and a non-zero exit; the schema refuses such names from any
// writer.
func TestDBRefusesInvalidRows(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDB(t)
	db := func(want int, args ...string) string {
		t.Helper()
		code, out, errs := runArgs("", append([]string{"db", "-dsn", dsn}, args...)...)
		if code != want {
			t.Fatalf("db %q = %d; want %d\nstdout: %s\nstderr: %s", args, code, want, out, errs)
		}
		return out + errs
	}
	db(0, "migrate")
	db(0, "plan", "set", "pro", "requests-per-minute", "limit=600")
	db(0, "tenant", "add", "acme", "pro")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "set", "pro", "requests-per-minute", "limit=-5"}, "plans.pro.requests-per-minute.limit: must be > 0, got -5"},
		{[]string{"plan", "set", "pro", "requests-per-minute", "burst=-1"}, "plans.pro.requests-per-minute.burst: must be > 0, got -1"},
		{[]string{"plan", "set", "pro", "requests-per-minute", "per=-1m"}, "plans.pro.requests-per-minute.per: must be > 0, got -1m0s"},
		{[]string{"plan", "set", "pro", "requests-per-minute", "limit=0"}, "limit: must be > 0, got 0"},
		{[]string{"plan", "set", "pro", "requests-per-minute", "limit=10", "limit=20"}, "limit given twice"},
		{[]string{"plan", "set", "pro", "requests-per-minute", "limit=4611686018427387904"}, "plans.pro.requests-per-minute.limit: must be <= "},
		{[]string{"plan", "set", "pro", "requests-per-minute", "per=1500ns"}, "plans.pro.requests-per-minute.per: 1.5µs is finer than the database keeps"},
		{[]string{"plan", "set", "pro'; DROP TABLE sluice_plans; --", "requests-per-minute", "limit=5"}, `is not a valid plan name`},
		{[]string{"plan", "set", "pro", "rpm;--", "limit=5"}, `"rpm;--" is not a valid policy name`},
		{[]string{"plan", "default", "free plan"}, `plans.free plan: "free plan" is not a valid plan name`},
		{[]string{"override", "set", "acme", "requests-per-minute", "limit=-5"}, "tenants.acme.overrides.requests-per-minute.limit: must be > 0, got -5"},
		{[]string{"tenant", "add", "evil\n", "pro"}, "is not a valid tenant name"},
		{[]string{"tenant", "add", "globex", "pro'--"}, `plan "pro'--": not found`},
		{[]string{"tenant", "plan", "acme", "gold"}, `plan "gold": not found`},
	} {
		out := db(1, tc.args...)
		if !strings.Contains(out, tc.want) {
			t.Errorf("db %q: %q; want %q", tc.args, out, tc.want)
		}
	}
	// Nothing was written: the directory is as the valid commands left it.
	if got, want := db(0, "export"), "plans:\n  pro:\n    requests-per-minute:\n      limit: 600\ntenants:\n  acme:\n    plan: pro\n"; !strings.HasSuffix(got, want) {
		t.Errorf("export after the refusals:\n%s\nwant it to end with:\n%s", got, want)
	}
	conn := pgtest.Conn(t, dsn)
	for _, q := range []string{
		`INSERT INTO sluice_plans (name) VALUES ('a;b')`,
		`INSERT INTO sluice_plan_limits (plan, policy, "limit") VALUES ('pro', 'x y', 5)`,
		`INSERT INTO sluice_tenant_overrides (tenant, policy, "limit") VALUES ('acme', '-x', 5)`,
	} {
		var pe *pgconn.PgError
		if _, err := conn.Exec(context.Background(), q); !errors.As(err, &pe) || pe.Code != "23514" {
			t.Errorf("%s = %v; want a check violation", q, err)
		}
	}
}

// oldExport is the export as the yaml.v3 encoder writes the whole file at
// once: the bytes writeExport must give.
func oldExport(t testing.TB, d *directory.Data) string {
	t.Helper()
	x := exportFile{DefaultPlan: d.Plans.Default, Plans: map[string]map[string]exportOverride{}, Tenants: map[string]exportTenant{}}
	for plan, os := range d.Plans.Plans {
		x.Plans[plan] = exportOverrides(os)
		if x.Plans[plan] == nil {
			x.Plans[plan] = map[string]exportOverride{}
		}
	}
	for tenant, tp := range d.Plans.Tenants {
		x.Tenants[tenant] = exportTenant{Plan: tp.Plan, Overrides: exportOverrides(tp.Overrides)}
	}
	for h, k := range d.Keys {
		t := x.Tenants[k.Tenant]
		t.APIKeys = append(t.APIKeys, exportKey{Hash: h.String(), ID: k.KeyID, User: k.User})
		x.Tenants[k.Tenant] = t
	}
	for name, t := range x.Tenants {
		sort.Slice(t.APIKeys, func(i, j int) bool { return t.APIKeys[i].ID < t.APIKeys[j].ID })
		x.Tenants[name] = t
	}
	var b strings.Builder
	b.WriteString("# The tenant directory, as a policy file's default_plan, plans and tenants sections.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&x); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// oddNames are names and values the encoder quotes, orders by their
// digits, wraps or writes as complex keys, with plain ones among them.
var oddNames = []string{
	"acme", "t9", "t10", "t009", "T1", "a1b", "a01b", "a-b", "a.b", "a_b", "ä", "日本",
	"yes", "No", "true", "null", "on", "y", "~", "123", "0x1F", "1e3", "-lead", "a:b", "a:", "a: b",
	"#hash", "a #b", "it's", `say "hi"`, "tab\there", "  spaced ", "[x]", "{x}", "*x", "&x", "!x", "%x", "@x", "`x",
	"with space", strings.Repeat("word ", 25), strings.Repeat("x", 128), strings.Repeat("y", 101), "sha256:" + strings.Repeat("ab", 32),
}

// TestWriteExportAsEncoder: the export is byte for byte what the yaml.v3
// encoder writes for the whole file, for names and values that need
// quoting, ordering by digits, wrapping or complex keys, and for
// directories drawn at random from them.
func TestWriteExportAsEncoder(t *testing.T) {
	check := func(name string, d *directory.Data) {
		t.Helper()
		var b strings.Builder
		if err := writeExport(&b, d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, want := b.String(), oldExport(t, d); got != want {
			t.Errorf("%s: writeExport =\n%s\nwant (the encoder's):\n%s", name, got, want)
		}
	}
	check("empty", &directory.Data{})
	check("default only", &directory.Data{Plans: limits.Plans{Default: "yes"}})

	d := &directory.Data{Plans: limits.Plans{Default: "basic", Plans: map[string]map[string]limits.Override{}, Tenants: map[string]limits.TenantPlan{}}, Keys: map[apikey.Hash]apikey.Identity{}}
	pers := []time.Duration{0, time.Minute, 1500 * time.Nanosecond, 2 * time.Millisecond, 26*time.Hour + 3*time.Second}
	for i, n := range oddNames {
		o := limits.Override{Limit: int64(i), Burst: int64(i % 3), Per: pers[i%len(pers)]}
		d.Plans.Plans[n] = map[string]limits.Override{n: o, "rpm": {Limit: 10}}
		d.Plans.Tenants[n] = limits.TenantPlan{Plan: oddNames[(i+1)%len(oddNames)], Overrides: map[string]limits.Override{n: o}}
		d.Plans.Tenants["empty-"+n] = limits.TenantPlan{}
		h := apikey.Sum(n)
		d.Keys[h] = apikey.Identity{Tenant: n, KeyID: h.ID(), User: oddNames[(i+2)%len(oddNames)]}
		h = apikey.Sum("only-" + n)
		d.Keys[h] = apikey.Identity{Tenant: "keys-only-" + n, KeyID: n}
	}
	d.Plans.Plans["none"] = nil
	check("odd names", d)

	r := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return oddNames[r.IntN(len(oddNames))] + oddNames[r.IntN(len(oddNames))][:1] }
	for i := range 200 {
		d := &directory.Data{Plans: limits.Plans{Plans: map[string]map[string]limits.Override{}, Tenants: map[string]limits.TenantPlan{}}, Keys: map[apikey.Hash]apikey.Identity{}}
		if r.IntN(2) == 0 {
			d.Plans.Default = pick()
		}
		for range r.IntN(4) {
			d.Plans.Plans[pick()] = map[string]limits.Override{pick(): {Limit: r.Int64N(100), Per: pers[r.IntN(len(pers))]}}
		}
		for range r.IntN(6) {
			d.Plans.Tenants[pick()] = limits.TenantPlan{Plan: pick(), Overrides: map[string]limits.Override{pick(): {Burst: r.Int64N(3)}}}
		}
		for j := range r.IntN(6) {
			h := apikey.Sum(fmt.Sprint(i, j))
			d.Keys[h] = apikey.Identity{Tenant: pick(), KeyID: pick(), User: pick()}
		}
		check(fmt.Sprintf("random directory %d", i), d)
	}
}

// TestReadImportShapes: an export is read with the policy file's
// policies whatever its YAML shape (block, as written, with a comment and
// a document start, flow, empty); its errors name its own lines; a
// policies section it holds, however written, is not silently replaced.
func TestReadImportShapes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pf, err := config.Parse(write("policies.yaml", dbPolicies), []byte(dbPolicies))
	if err != nil {
		t.Fatal(err)
	}
	var empty strings.Builder
	if err := writeExport(&empty, &directory.Data{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, text string
		tenants    int
	}{
		{"block", "default_plan: basic\nplans:\n  basic:\n    rpm:\n      limit: 10\ntenants:\n  acme:\n    plan: basic\n  globex: {}\n", 2},
		{"comment and start", "# exported\n---\nplans:\n  basic: {}\ntenants:\n  acme:\n    plan: basic", 1},
		{"flow", "{plans: {basic: {rpm: {limit: 10}}}, tenants: {acme: {plan: basic}}}\n", 1},
		{"empty", empty.String(), 0},
	} {
		d, err := readImport(write(tc.name+".yaml", tc.text), pf)
		if err != nil {
			t.Errorf("%s: readImport: %v", tc.name, err)
			continue
		}
		if len(d.Plans.Tenants) != tc.tenants {
			t.Errorf("%s: %d tenants; want %d", tc.name, len(d.Plans.Tenants), tc.tenants)
		}
	}
	for _, tc := range []struct{ name, text, want string }{
		{"line kept", "plans:\n  basic: {}\n\n\ntenants:\n  acme:\n    plann: basic\n", "line kept.yaml:7:"},
		{"own policies", "tenants: {}\npolicies: []\n", "at least one policy is needed"},
		{"quoted policies first", "\"policies\": []\ntenants: {}\n", "at least one policy is needed"},
		{"quoted policies", "tenants: {}\n\"policies\": []\n", "duplicate key"},
		{"flow policies", "{policies: [], tenants: {}}\n", "at least one policy is needed"},
		{"not a mapping", "- a\n- b\n", "not a mapping"},
	} {
		_, err := readImport(write(tc.name+".yaml", tc.text), pf)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: readImport = %v; want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestDBSaysWhatWasNotDone: a command that would change nothing, or that
// leaves rows out, says so and exits 1: a default plan named with a typo
// (not created empty for every tenant without a plan to fall to), an
// override cleared that is not there, an export without the rows that
// cannot be read (listed, the rest exported).
func TestDBSaysWhatWasNotDone(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDB(t)
	db := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, errs := runArgs("", append([]string{"db", "-dsn", dsn}, args...)...)
		if code != want {
			t.Fatalf("db %q = %d; want %d\nstdout: %s\nstderr: %s", args, code, want, out, errs)
		}
		return out, errs
	}
	db(0, "migrate")
	db(0, "plan", "set", "basic", "rpm", "limit=10")
	db(0, "plan", "default", "basic")
	db(0, "tenant", "add", "acme", "basic")
	db(0, "override", "set", "acme", "rpm", "limit=5")
	db(0, "override", "clear", "acme", "rpm")
	const want = "default_plan: basic\nplans:\n  basic:\n    rpm:\n      limit: 10\ntenants:\n  acme:\n    plan: basic\n"
	if out, _ := db(0, "export"); !strings.HasSuffix(out, want) {
		t.Fatalf("export:\n%s\nwant it to end with:\n%s", out, want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "default", "bsic"}, `plan "bsic": not found`},
		{[]string{"override", "clear", "acme", "rpm"}, `override of tenant "acme" for policy "rpm": not found`},
		{[]string{"override", "clear", "acmee", "rpm"}, `override of tenant "acmee" for policy "rpm": not found`},
	} {
		if _, errs := db(1, tc.args...); !strings.Contains(errs, tc.want) {
			t.Errorf("db %q: %q; want %q", tc.args, errs, tc.want)
		}
	}
	if out, _ := db(0, "export"); !strings.HasSuffix(out, want) {
		t.Errorf("export after the refusals:\n%s\nwant it to end with:\n%s", out, want)
	}
	conn := pgtest.Conn(t, dsn)
	if _, err := conn.Exec(context.Background(), `INSERT INTO sluice_keys (hash, key_id, tenant) VALUES ('sha256:`+strings.Repeat("0", 64)+`', 'bad id!', 'acme')`); err != nil {
		t.Fatal(err)
	}
	out, errs := db(1, "export")
	if !strings.HasSuffix(out, want) || !strings.Contains(errs, `left out: postgres: keys.key_000000000000: "bad id!" is not a valid key id`) ||
		!strings.Contains(errs, "1 rows left out of the export") {
		t.Errorf("export with an unreadable row: stdout\n%s\nstderr\n%s\nwant the rest exported, the row named and exit 1", out, errs)
	}
}
