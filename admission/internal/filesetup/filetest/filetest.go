// Package filetest holds what the tests of httpadmitfile.FromFile and
// grpcadmitfile.FromFile share: policy files written whole, and the
// watcher's reports awaited.
package filetest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/admission/reload"
)

// Write writes content to the file at path as an editor that saves
// atomically does: to a temporary file in its directory, renamed over
// it, so that the watcher never reads half of it.
func Write(t testing.TB, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Events returns a function for OnReload that reports each reload on
// the channel it returns as well.
func Events() (func(reload.Event), chan reload.Event) {
	ch := make(chan reload.Event, 16)
	return func(e reload.Event) { ch <- e }, ch
}

// Applied waits, with no deadline (go test's -timeout ends a wait that
// never ends), for the next reload on events, and fails unless it applied
// the file whole with policies policies.
func Applied(t testing.TB, events <-chan reload.Event, policies int) {
	t.Helper()
	e := <-events
	if e.Err != nil || e.Policies != policies {
		t.Fatalf("reload of %s: %d policies, error %v; want %d policies applied whole", e.Source, e.Policies, e.Err, policies)
	}
}
