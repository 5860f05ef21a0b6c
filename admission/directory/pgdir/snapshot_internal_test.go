package pgdir

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
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
		if err := writeSnapshot(out, s.Data); err != nil {
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
