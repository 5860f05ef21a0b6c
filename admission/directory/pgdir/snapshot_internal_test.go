package pgdir

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/limits"
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
		if err := writeSnapshot(out, s.Data, nil); err != nil {
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
		d := &directory.Data{Plans: limits.Plans{Default: "free", Tenants: map[string]limits.TenantPlan{}}, Keys: map[config.KeyHash]config.Key{}}
		for _, tn := range tenants {
			d.Plans.Tenants[tn] = limits.TenantPlan{Plan: "free"}
			d.Keys[config.HashKey("sk-"+tn)] = config.Key{Tenant: tn, KeyID: "k-" + tn}
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
	if err := writeSnapshot(path, data("a", "b", "c", "d"), &last); err != nil {
		t.Fatal(err)
	}
	first := written()
	time.Sleep(2 * time.Millisecond)
	for i := 0; i < 5; i++ {
		if err := writeSnapshot(path, data("d", "c", "b", "a"), &last); err != nil {
			t.Fatal(err)
		}
	}
	if got := written(); got != first {
		t.Errorf("the same directory rewrote the snapshot: written %s, then %s", first, got)
	}
	if err := writeSnapshot(path, data("a", "b", "c"), &last); err != nil {
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
