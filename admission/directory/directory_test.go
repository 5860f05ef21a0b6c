package directory_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

func newDir(t *testing.T) *directory.Directory {
	d, _, _ := newDirMW(t)
	return d
}

// newDirMW returns a directory installing into a middleware, the
// middleware and its controller.
func newDirMW(t *testing.T) (*directory.Directory, *httpadmit.Middleware, *admission.Controller) {
	t.Helper()
	f, err := config.Parse("p.yaml", []byte(`policies:
  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: 5, per: 1m}
  - {name: c.x, key: [tenant], algorithm: concurrency, limit: 4}
directory: {source: postgres}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmitfile.Options(f)...)
	if err != nil {
		t.Fatal(err)
	}
	d, err := directory.New(httpadmitfile.Middleware{Middleware: mw}, directory.Config{Source: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(f); err != nil {
		t.Fatal(err)
	}
	return d, mw, ctl
}

// TestInstallRefusesEntries: each bad entry is left out by itself (names
// with dots included), the rest installed.
func TestInstallRefusesEntries(t *testing.T) {
	d := newDir(t)
	data := &directory.Data{
		Plans: limits.Plans{
			Default: "gold",
			Plans: map[string]map[string]limits.Override{
				"a.b": {"rpm": {Limit: 10}, "c.x": {Burst: 2}},
				"a":   {"rpm": {Limit: 20}},
			},
			Tenants: map[string]limits.TenantPlan{
				"t.1":       {Plan: "a.b", Overrides: map[string]limits.Override{"c.x": {Limit: -1}, "rpm": {Limit: 7}}},
				"t.2":       {Plan: "nope"},
				"anonymous": {},
			},
		},
		Keys: map[apikey.Hash]apikey.Identity{
			apikey.Sum("k1"): {Tenant: "t.1", KeyID: "k1"},
			apikey.Sum("k2"): {Tenant: "anonymous", KeyID: "k2"},
		},
	}
	err := d.Install(data)
	if !errors.Is(err, directory.ErrRefused) {
		t.Fatalf("Install = %v; want ErrRefused", err)
	}
	for _, want := range []string{
		`db: default_plan: no plan "gold"`,
		"db: plans.a.b.c.x.burst: only a token_bucket has a burst",
		"db: tenants.t.1.overrides.c.x.limit: must be > 0, got -1",
		`db: tenants.t.2.plan: no plan "nope"`,
		"db: tenants.anonymous: \"anonymous\" is the anonymous tenant",
		"db: keys.key_",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Install error lacks %q:\n%v", want, err)
		}
	}
	got := d.Data()
	want := map[string]limits.TenantPlan{"t.1": {Plan: "a.b", Overrides: map[string]limits.Override{"rpm": {Limit: 7}}}}
	if len(got.Plans.Tenants) != 1 || got.Plans.Tenants["t.1"].Plan != "a.b" || len(got.Plans.Tenants["t.1"].Overrides) != 1 {
		t.Errorf("installed tenants = %+v; want %+v", got.Plans.Tenants, want)
	}
	if got.Plans.Default != "" || len(got.Plans.Plans["a.b"]) != 1 || len(got.Plans.Plans["a"]) != 1 {
		t.Errorf("installed plans = %+v, default %q", got.Plans.Plans, got.Plans.Default)
	}
	if len(got.Keys) != 1 {
		t.Errorf("installed keys = %v; want k1 only", got.Keys)
	}
	// The caller's data is not changed by the refusals.
	if data.Plans.Default != "gold" || len(data.Plans.Tenants) != 3 {
		t.Errorf("Install changed its argument: %+v", data.Plans)
	}
}

// TestInstallRefusesPlanWithItsTenants installs a directory holding a
// plan whose name the gateways refuse (a row written before the schema
// checked names), with tenants on it and as the default: the plan is
// refused, and with it the tenants on it and the default plan, while the
// rest is installed, a revoked key gone with it.
func TestInstallRefusesPlanWithItsTenants(t *testing.T) {
	d := newDir(t)
	k0, k1, k2 := apikey.Sum("k0"), apikey.Sum("k1"), apikey.Sum("k2")
	if err := d.Install(&directory.Data{Keys: map[apikey.Hash]apikey.Identity{k0: {Tenant: "u", KeyID: "k0"}}}); err != nil {
		t.Fatal(err)
	}
	err := d.Install(&directory.Data{
		Plans: limits.Plans{
			Default: "team plan",
			Plans:   map[string]map[string]limits.Override{"team plan": {"rpm": {Limit: 50}}, "p": {"rpm": {Limit: 9}}},
			Tenants: map[string]limits.TenantPlan{"t": {Plan: "team plan"}, "u": {Plan: "p"}},
		},
		Keys: map[apikey.Hash]apikey.Identity{k1: {Tenant: "t", KeyID: "k1"}, k2: {Tenant: "u", KeyID: "k2"}},
	})
	if !errors.Is(err, directory.ErrRefused) {
		t.Fatalf("Install = %v; want ErrRefused", err)
	}
	for _, want := range []string{`plans.team plan: "team plan" is not a valid plan name`, `tenants.t.plan: no plan "team plan"`, `default_plan: no plan "team plan"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Install error lacks %q:\n%v", want, err)
		}
	}
	got := d.Data()
	if _, ok := got.Keys[k0]; ok {
		t.Errorf("the key gone from the directory is still installed")
	}
	if len(got.Keys) != 2 || got.Plans.Tenants["u"].Plan != "p" || len(got.Plans.Tenants) != 1 || len(got.Plans.Plans) != 1 || got.Plans.Default != "" {
		t.Errorf("installed %+v; want plan p with tenant u, no default, keys k1 and k2", got)
	}
	if n := d.Refused(); n != 3 {
		t.Errorf("Refused() = %d; want 3", n)
	}
}

func TestSetTenantRefused(t *testing.T) {
	d := newDir(t)
	if err := d.Install(&directory.Data{Plans: limits.Plans{Plans: map[string]map[string]limits.Override{"p": {"rpm": {Limit: 9}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetTenant("x", &limits.TenantPlan{Plan: "q"}); !errors.Is(err, directory.ErrRefused) || !strings.Contains(err.Error(), `tenants.x.plan: no plan "q"`) {
		t.Errorf("SetTenant(no plan) = %v", err)
	}
	if err := d.SetTenant("x", &limits.TenantPlan{Plan: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetTenant("x", nil); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Data().Plans.Tenants); n != 0 {
		t.Errorf("tenants after removal = %d; want 0", n)
	}
}

// TestReloadRefusesTheDirectorySectionAlone reloads, through the policy
// file watcher, a file whose directory section changed along with a
// policy: the policy change is applied, the section's change refused and
// logged with what was refused, and later reloads apply too.
func TestReloadRefusesTheDirectorySectionAlone(t *testing.T) {
	const file = `policies:
  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: %d, per: 1m}
directory: %s
`
	path := filepath.Join(t.TempDir(), "p.yaml")
	write := func(limit int, dir string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(fmt.Sprintf(file, limit, dir)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(5, "{source: postgres}")
	first, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(first.Config)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmitfile.Options(first)...)
	if err != nil {
		t.Fatal(err)
	}
	var log syncbuf.Buffer
	d, err := directory.New(httpadmitfile.Middleware{Middleware: mw}, directory.Config{Source: "db"}, directory.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	// Reloads only when asked: no signal, and file events wait an hour.
	var last reload.Event
	w, err := reload.Watch(path, d, reload.WithSignals(), reload.WithDebounce(time.Hour), reload.WithLogger(slog.New(slog.DiscardHandler)),
		reload.OnReload(func(r reload.Event) { last = r }))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	limit := func() int64 {
		t.Helper()
		tk, err := ctl.TryAdmit(context.Background(), admission.Request{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Done()
		return tk.Statuses(nil)[0].Limit
	}
	for i, step := range []struct {
		limit int
		dir   string
	}{
		{7, "{source: postgres, snapshot: /var/lib/sluice/dir.json}"},
		{9, "{source: postgres, snapshot: /var/lib/sluice/dir.json}"},
		{11, "{source: file}\nplans: {p: {rpm: {limit: 3}}}\ndefault_plan: p"},
	} {
		mark := len(log.String())
		write(step.limit, step.dir)
		if err := w.Reload(); err != nil {
			t.Fatalf("reload %d = %v; want the policies applied", i, err)
		}
		if got := limit(); got != int64(step.limit) {
			t.Errorf("reload %d: limit %d; want %d", i, got, step.limit)
		}
		// The reload is reported applied, without its directory section.
		var partial *reload.PartialError
		if !last.Applied() || !errors.As(last.Err, &partial) || partial.Section != "directory" || !strings.Contains(last.Err.Error(), "a restart applies it") {
			t.Errorf("reload %d reported as %+v (applied %v); want applied with a *reload.PartialError naming the directory section", i, last, last.Applied())
		}
		got := log.String()[mark:]
		if !strings.Contains(got, "policy file applied without its directory section: the section changed, and a restart applies it") ||
			!strings.Contains(got, `running="source postgres, dsn_env SLUICE_DATABASE_URL, refresh 1m0s, snapshot \"\""`) {
			t.Errorf("reload %d: the log does not say what was refused:\n%s", i, got)
		}
	}
	if !strings.Contains(log.String(), `refused="source file"`) {
		t.Errorf("the log does not name the refused section:\n%s", log.String())
	}
	if n := len(d.Data().Plans.Plans); n != 0 {
		t.Errorf("the refused section brought %d plans from the file; want none", n)
	}
	// The section restored: applied without a word about it.
	mark := len(log.String())
	write(13, "{source: postgres}")
	if err := w.Reload(); err != nil || limit() != 13 || len(log.String()) != mark || last.Err != nil {
		t.Errorf("restored section: reload %v (reported %v), limit %d, log %q; want applied whole, 13, nothing", err, last.Err, limit(), log.String()[mark:])
	}
}

// TestSetKeyRefusedRemoves: a key moved to the anonymous tenant is refused
// and removed, not left serving its old tenant.
func TestSetKeyRefusedRemoves(t *testing.T) {
	d, mw, _ := newDirMW(t)
	h := apikey.Sum("sk-1")
	if err := d.SetKey(h, &apikey.Identity{Tenant: "acme", KeyID: "k1"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := mw.Snapshot().Identity().KeySource.Lookup("sk-1"); !ok {
		t.Fatal("the key set is not found")
	}
	if err := d.SetKey(h, &apikey.Identity{Tenant: "anonymous", KeyID: "k1"}); !errors.Is(err, directory.ErrRefused) {
		t.Errorf("SetKey(anonymous) = %v; want ErrRefused", err)
	}
	if k, ok := mw.Snapshot().Identity().KeySource.Lookup("sk-1"); ok {
		t.Errorf("the refused key still maps to %+v", k)
	}
	if n := len(d.Data().Keys); n != 0 {
		t.Errorf("keys after the refusal = %d; want 0", n)
	}
}

// TestReloadReportsRefusedEntries reloads, through the policy file
// watcher, a file without a policy the directory's entries override: the
// file is applied and reported partial, with a *directory.RefusedError
// counting every problem and naming the first few; Refused counts them
// until a change installs its entry; and the file restored installs the
// refused entries again.
func TestReloadReportsRefusedEntries(t *testing.T) {
	const file = `policies:
  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: %d, per: 1m}
%s
directory: {source: postgres}
`
	const conc = "  - {name: c.x, key: [tenant], algorithm: concurrency, limit: 4}"
	path := filepath.Join(t.TempDir(), "p.yaml")
	write := func(limit int, extra string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(fmt.Sprintf(file, limit, extra)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(5, conc)
	first, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(first.Config)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmitfile.Options(first)...)
	if err != nil {
		t.Fatal(err)
	}
	d, err := directory.New(httpadmitfile.Middleware{Middleware: mw}, directory.Config{Source: "db"}, directory.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	var last reload.Event
	w, err := reload.Watch(path, d, reload.WithSignals(), reload.WithDebounce(time.Hour), reload.WithLogger(slog.New(slog.DiscardHandler)),
		reload.OnReload(func(r reload.Event) { last = r }))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	data := &directory.Data{Plans: limits.Plans{
		Plans:   map[string]map[string]limits.Override{"p": {"rpm": {Limit: 9}, "c.x": {Limit: 3}}},
		Tenants: map[string]limits.TenantPlan{},
	}}
	for i := range 5 {
		data.Plans.Tenants[fmt.Sprintf("t%d", i)] = limits.TenantPlan{Plan: "p", Overrides: map[string]limits.Override{"c.x": {Limit: 2}}}
	}
	if err := d.Install(data); err != nil {
		t.Fatal(err)
	}

	write(7, "")
	if err := w.Reload(); err != nil {
		t.Fatalf("reload without c.x = %v; want the file applied", err)
	}
	var partial *reload.PartialError
	var refused *directory.RefusedError
	if !last.Applied() || !errors.As(last.Err, &partial) || partial.Section != "" || !errors.As(last.Err, &refused) || !errors.Is(last.Err, directory.ErrRefused) {
		t.Fatalf("reload reported as %v (applied %v); want applied with a *reload.PartialError wrapping a *directory.RefusedError", last.Err, last.Applied())
	}
	msg := last.Err.Error()
	if len(refused.Problems) != 6 || !strings.HasPrefix(msg, "applied without the entries refused: 6 problems (db): ") ||
		!strings.Contains(msg, `plans.p.c.x: no such policy "c.x"; tenants.t0.overrides.c.x: no such policy "c.x"; tenants.t1`) || !strings.HasSuffix(msg, "(and 3 more)") {
		t.Errorf("reload error: %d problems, %q; want 6, the first three named and 3 more", len(refused.Problems), msg)
	}
	if got := ctl.Policies()[0].Limit; got != 7 {
		t.Errorf("after the reload: rpm limit %d; want 7 (the file applied)", got)
	}
	if n := d.Refused(); n != 6 {
		t.Errorf("Refused() = %d after the reload; want 6", n)
	}
	if err := d.SetTenant("t0", &limits.TenantPlan{Plan: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetTenant("t1", &limits.TenantPlan{Plan: "p", Overrides: map[string]limits.Override{"nope": {Limit: 1}}}); !errors.Is(err, directory.ErrRefused) {
		t.Fatalf("SetTenant(nope) = %v; want ErrRefused", err)
	}
	if n := d.Refused(); n != 5 {
		t.Errorf("Refused() = %d after one tenant's change installed and another's refused; want 5", n)
	}

	// The file restored: applied whole, the refused entries installed
	// (t1's refused override is refused again, the rest of t1 installed).
	write(5, conc)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if !errors.As(last.Err, &refused) || len(refused.Problems) != 1 || refused.Problems[0].Path != "tenants.t1.overrides.nope" || d.Refused() != 1 {
		t.Errorf("reload of the file restored: %v, Refused() = %d; want t1's change alone refused", last.Err, d.Refused())
	}
	got := d.Data()
	if got.Plans.Plans["p"]["c.x"].Limit != 3 || got.Plans.Tenants["t2"].Overrides["c.x"].Limit != 2 || len(got.Plans.Tenants["t1"].Overrides) != 0 || len(got.Plans.Tenants) != 5 {
		t.Errorf("after the file restored: plans %v, tenants %v; want p's and t2's c.x back, t1 without its override", got.Plans.Plans, got.Plans.Tenants)
	}
}

// TestChangesMakeSnapshots: a change of one tenant or one key installs a
// new snapshot and leaves the one a request in flight holds as it was:
// that request keeps the key and the limits of one directory version.
func TestChangesMakeSnapshots(t *testing.T) {
	d, mw, ctl := newDirMW(t)
	h := apikey.Sum("sk-1")
	if err := d.Install(&directory.Data{
		Plans: limits.Plans{Plans: map[string]map[string]limits.Override{"p": {"rpm": {Limit: 2}}, "q": {"rpm": {Limit: 3}}},
			Tenants: map[string]limits.TenantPlan{"x": {Plan: "p"}}},
		Keys: map[apikey.Hash]apikey.Identity{h: {Tenant: "x", KeyID: "k1"}},
	}); err != nil {
		t.Fatal(err)
	}
	held := mw.Snapshot() // a request in flight
	if err := d.SetTenant("x", &limits.TenantPlan{Plan: "q"}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetKey(h, nil); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := func(s *httpadmit.Snapshot) int64 {
		t.Helper()
		tk, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "x", Operation: "GET /", Policies: s.Policies()})
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Done()
		return tk.Statuses(nil)[0].Limit
	}
	_, heldKey := held.Identity().KeySource.Lookup("sk-1")
	_, nowKey := mw.Snapshot().Identity().KeySource.Lookup("sk-1")
	if got := limit(held); got != 2 || !heldKey {
		t.Errorf("the snapshot held: limit %d, key found %v; want 2, true (a snapshot never changes)", got, heldKey)
	}
	if got := limit(mw.Snapshot()); got != 3 || nowKey {
		t.Errorf("the snapshot installed: limit %d, key found %v; want 3, false", got, nowKey)
	}
}

// TestRefusedErrorQuotesNames: a tenant name with control characters,
// written into the database by another tool, is quoted in the message a
// status page and the logs show, not written out raw.
func TestRefusedErrorQuotesNames(t *testing.T) {
	name := "evil\x1b[2J\n\x00"
	e := &directory.RefusedError{Source: "postgres", Problems: config.Errors{
		{File: "postgres", Path: "tenants." + name, Msg: fmt.Sprintf("%q is not a valid tenant name", name)},
		{File: "postgres", Path: "tenants.ok.overrides.rpm", Msg: "no such policy"},
	}}
	got := e.Error()
	if strings.ContainsFunc(got, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		t.Errorf("Error() = %q; want no control character", got)
	}
	if want := `2 problems (postgres): "tenants.evil\x1b[2J\n\x00": "evil\x1b[2J\n\x00" is not a valid tenant name; tenants.ok.overrides.rpm: no such policy`; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
}
