package pgdir

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
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
	"github.com/sluicehq/sluice/internal/testproc"
)

// FuzzReadSnapshot feeds arbitrary files to the snapshot reader: it never
// panics, and a snapshot it accepts, written again, reads back the same.
func FuzzReadSnapshot(f *testing.F) {
	f.Add([]byte(`{"version":1,"written":"2026-01-02T03:04:05Z","default_plan":"free","plans":{"free":{"rpm":{"Limit":5,"Burst":0,"Per":0}}},"tenants":{"acme":{"Plan":"free","Overrides":null}},"keys":[{"hash":"sha256:` + zeros64 + `","id":"k1","tenant":"acme"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"keys":[{"hash":"md5:00","id":"k"}]}`))
	f.Add([]byte(`[`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "in.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := readSnapshot(path)
		if err != nil {
			return
		}
		out := filepath.Join(dir, "out.json")
		if _, err := writeSnapshot(out, s.Data, nil); err != nil {
			t.Fatal(err)
		}
		again, err := readSnapshot(out)
		if err != nil {
			t.Fatalf("a written snapshot does not read back: %v", err)
		}
		if !reflect.DeepEqual(again.Data.Keys, s.Data.Keys) || again.Data.Plans.Default != s.Data.Plans.Default ||
			len(again.Data.Plans.Tenants) != len(s.Data.Plans.Tenants) || len(again.Data.Plans.Plans) != len(s.Data.Plans.Plans) {
			t.Fatalf("round trip changed the snapshot:\n%+v\n%+v", s.Data, again.Data)
		}
	})
}

const zeros64 = "0000000000000000000000000000000000000000000000000000000000000000"

// TestSnapshotRewrittenOnlyWhenChanged: a refresh that brings the same
// directory (its keys in another map order too) leaves the file alone; a
// change rewrites it.
func TestSnapshotRewrittenOnlyWhenChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "directory.json")
	data := func(tenants ...string) *directory.Data {
		d := &directory.Data{Plans: limits.Plans{Default: "free", Tenants: map[string]limits.TenantPlan{}}, Keys: map[apikey.Hash]apikey.Identity{}}
		for _, tn := range tenants {
			d.Plans.Tenants[tn] = limits.TenantPlan{Plan: "free"}
			d.Keys[apikey.Sum("sk-"+tn)] = apikey.Identity{Tenant: tn, KeyID: "k-" + tn}
		}
		return d
	}
	var last [32]byte
	written := func() string {
		t.Helper()
		s, err := readSnapshot(path)
		if err != nil {
			t.Fatal(err)
		}
		return s.Written.Format(time.RFC3339Nano)
	}
	if _, err := writeSnapshot(path, data("a", "b", "c", "d"), &last); err != nil {
		t.Fatal(err)
	}
	first := written()
	time.Sleep(2 * time.Millisecond)
	for i := 0; i < 5; i++ {
		if _, err := writeSnapshot(path, data("d", "c", "b", "a"), &last); err != nil {
			t.Fatal(err)
		}
	}
	if got := written(); got != first {
		t.Errorf("the same directory rewrote the snapshot: written %s, then %s", first, got)
	}
	if _, err := writeSnapshot(path, data("a", "b", "c"), &last); err != nil {
		t.Fatal(err)
	}
	if got := written(); got == first {
		t.Errorf("a changed directory (a tenant gone) did not rewrite the snapshot")
	}
	s, err := readSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Data.Keys) != 3 || len(s.Data.Plans.Tenants) != 3 {
		t.Errorf("snapshot holds %d keys and %d tenants; want 3 and 3", len(s.Data.Keys), len(s.Data.Plans.Tenants))
	}
}

// TestJournalReplay reads a snapshot with its journal: the changes that
// follow it are applied in order, a last line a crash cut short is left
// out, a journal of another snapshot is not read, and a line that does not
// read in the middle is an error.
func TestJournalReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "directory.json")
	k1, k2 := apikey.Sum("sk-1"), apikey.Sum("sk-2")
	d := &directory.Data{
		Plans: limits.Plans{Plans: map[string]map[string]limits.Override{"free": {"rpm": {Limit: 5}}}, Tenants: map[string]limits.TenantPlan{"acme": {Plan: "free"}, "gone": {}}},
		Keys:  map[apikey.Hash]apikey.Identity{k1: {Tenant: "acme", KeyID: "k1"}},
	}
	written, err := writeSnapshot(path, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	head := `{"base":"` + written.Format(time.RFC3339Nano) + `"}` + "\n"
	changes := `{"gone_key":"` + k1.String() + `"}` + "\n" +
		`{"key":{"hash":"` + k2.String() + `","id":"k2","tenant":"acme"}}` + "\n" +
		`{"at":"2100-01-02T03:04:05Z","tenant":"gone"}` + "\n" +
		`{"tenant":"new","plan":{"Plan":"free","Overrides":null}}` + "\n"
	for _, tc := range []struct {
		name, journal string
		keys          []apikey.Hash
		tenants       []string
		err           string
	}{
		{"none", "", []apikey.Hash{k1}, []string{"acme", "gone"}, ""},
		{"applied", head + changes, []apikey.Hash{k2}, []string{"acme", "new"}, ""},
		{"cut short", head + changes + `{"gone_key":"` + k2.String(), []apikey.Hash{k2}, []string{"acme", "new"}, ""},
		{"another snapshot", `{"base":"2001-01-01T00:00:00Z"}` + "\n" + changes, []apikey.Hash{k1}, []string{"acme", "gone"}, ""},
		{"bad line", head + "{]\n" + changes, nil, nil, "line 2"},
		{"not a change", head + "{}\n", nil, nil, "not a change"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(path + ".changes")
			if tc.journal != "" {
				if err := os.WriteFile(path+".changes", []byte(tc.journal), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s, err := readSnapshot(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("readSnapshot = %v; want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var keys []apikey.Hash
			for h := range s.Data.Keys {
				keys = append(keys, h)
			}
			tenants := slices.Sorted(maps.Keys(s.Data.Plans.Tenants))
			if !reflect.DeepEqual(keys, tc.keys) || !reflect.DeepEqual(tenants, tc.tenants) {
				t.Errorf("keys %v, tenants %v; want %v, %v", keys, tenants, tc.keys, tc.tenants)
			}
			// Known current when its last change was read.
			current := written
			if len(tc.keys) == 1 && tc.keys[0] == k2 {
				current = time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC)
			}
			if !s.Current.Equal(current) {
				t.Errorf("Current = %v; want %v", s.Current, current)
			}
		})
	}
}

// FuzzReplayJournal feeds arbitrary journals to a snapshot's reader: it
// never panics, and a journal it accepts leaves only valid keys.
func FuzzReplayJournal(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "directory.json")
	written, err := writeSnapshot(path, &directory.Data{Keys: map[apikey.Hash]apikey.Identity{apikey.Sum("sk-1"): {Tenant: "a", KeyID: "k1"}}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	head := `{"base":"` + written.Format(time.RFC3339Nano) + `"}` + "\n"
	f.Add([]byte(head + `{"gone_key":"sha256:` + zeros64 + `"}` + "\n"))
	f.Add([]byte(head + `{"key":{"hash":"sha256:` + zeros64 + `","id":"k2","tenant":"a"}}` + "\n" + `{"tenant":"t","plan":{"Plan":"p"}}` + "\n"))
	f.Add([]byte(head + `{"tenant":"t"}` + "\n" + `{"gone_key":"md5:1"}` + "\n"))
	f.Add([]byte(head + `{"key":{"hash":"sha256:` + zeros64 + `","id":"bad id","tenant":"a"}}`))
	f.Fuzz(func(t *testing.T, journal []byte) {
		if err := os.WriteFile(path+".changes", journal, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := readSnapshot(path)
		if err != nil {
			return
		}
		for h, k := range s.Data.Keys {
			if h.ID() == "" || !config.ValidKeyID(k.KeyID) || !config.ValidUser(k.User) {
				t.Fatalf("replay installed an invalid key %v: %+v", h, k)
			}
		}
	})
}

// TestCrashWhileRewritingSnapshot kills a process (os.Exit: no deferred
// clean-up runs, as at a crash) in the middle of rewriting the snapshot,
// then in the middle of rewriting its journal, after a revocation was
// journaled: a replica then started while the database is down refuses
// the revoked key, and leaves in the snapshot's directory nothing but the
// snapshot and its journal, however many crashes came before.
func TestCrashWhileRewritingSnapshot(t *testing.T) {
	if path := os.Getenv("PGDIR_CRASH_WRITING"); path != "" {
		_ = replaceFile(path, func(w io.Writer) error {
			_, _ = w.Write(bytes.Repeat([]byte("x"), 1<<20))
			os.Exit(3)
			return nil
		})
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "directory.json")
	revoked, live := apikey.Sum("sk-revoked"), apikey.Sum("sk-live")
	f := &Follower{cfg: Config{Snapshot: path}, log: slog.New(slog.DiscardHandler)}
	f.snapshot(&directory.Data{
		Plans: limits.Plans{Tenants: map[string]limits.TenantPlan{"acme": {}}},
		Keys:  map[apikey.Hash]apikey.Identity{revoked: {Tenant: "acme", KeyID: "k1"}, live: {Tenant: "acme", KeyID: "k2"}},
	})
	f.record([]change{{entry: "key:" + revoked.String(), hash: &revoked, at: time.Now().UTC()}})
	f.closeJournal()
	for _, target := range []string{path, journalPath(path), path, journalPath(path)} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWhileRewritingSnapshot$")
		cmd.Env = append(os.Environ(), "PGDIR_CRASH_WRITING="+target)
		if out, err := cmd.CombinedOutput(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 {
			t.Fatalf("the crashing process: %v\n%s", err, out)
		}
	}

	pf, err := config.Parse("p.yaml", []byte("policies:\n  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: 5, per: 1m}\ndirectory: {source: postgres}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(pf.Config)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmitfile.Options(pf)...)
	if err != nil {
		t.Fatal(err)
	}
	d, err := directory.New(httpadmitfile.Middleware{Middleware: mw}, directory.Config{Source: "postgres"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(pf); err != nil {
		t.Fatal(err)
	}
	port, err := testproc.FreePort() // nothing listens there: the database is down
	if err != nil {
		t.Fatal(err)
	}
	fol, err := Open(context.Background(), fmt.Sprintf("postgres://sluice@127.0.0.1:%d/x?sslmode=disable", port), d,
		Config{Snapshot: path, Timeout: time.Second}, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer fol.Close()
	keys := d.Data().Keys
	if _, ok := keys[revoked]; ok {
		t.Error("the key revoked before the crashes is accepted")
	}
	if _, ok := keys[live]; !ok {
		t.Error("the live key is refused")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"directory.json", "directory.json.changes"}; !reflect.DeepEqual(names, want) {
		t.Errorf("the snapshot's directory holds %q; want %q (the crashes' partial files removed)", names, want)
	}
}
