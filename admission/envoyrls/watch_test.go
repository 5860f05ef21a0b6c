package envoyrls_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/envoyrls"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

// TestWatch: the watcher applies a changed file, refuses a broken one
// (the configuration in force keeps serving), and reloads on SIGHUP.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	writeFile(t, file, "domain: api\ndescriptors:\n  - {key: a, rate_limit: {unit: day, requests_per_unit: 1}}\n")
	r := start(t, mustLoad(t, "ratelimit/example1.yaml"), rigOption{})
	logs := &syncbuf.Buffer{}
	w, err := envoyrls.Watch(file, r.srv, reload.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	stats := func(applied, refused int64) {
		t.Helper()
		poll.Until(t, time.Second, fmt.Sprintf("Stats() = %d applied, %d refused", applied, refused), func() bool {
			a, f := w.Stats()
			return a == applied && f == refused
		})
	}
	stats(1, 0)
	if got := outcome(r.call("api", desc("a", "x"))); got != "OK: OK" {
		t.Fatalf("first call = %s", got)
	}
	writeFile(t, file, "domain: api\ndescriptors:\n  - {key: a, rate_limit: {unit: day, requests_per_unit: 1}}\n  - {key: a}\n")
	stats(1, 1)
	if got := outcome(r.call("api", desc("a", "x"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("after a refused file = %s; want the old limit still refusing", got)
	}
	writeFile(t, file, "domain: api\ndescriptors:\n  - {key: a, rate_limit: {unit: day, requests_per_unit: 2}}\n")
	stats(2, 1)
	if got := outcome(r.call("api", desc("a", "x"))); got != "OK: OK" {
		t.Fatalf("after raising the limit = %s; want OK", got)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	stats(3, 1)
}
