package reload_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/reload"
)

// dirStep is a change of a watched directory and the reloads it makes.
type dirStep struct {
	what             string
	do               func()
	applied, refused int64  // the counts afterwards
	seen             string // what the last applied load saw
}

// watchDir watches dir with a load that reads its *.yaml files as a
// program does (a file holding "bad" is refused), and runs steps: after
// each, the counts of the watcher and of OnReload are exactly the step's
// (a change reloaded twice, or a non-change reloaded at all, fails).
func watchDir(t *testing.T, dir string, steps []dirStep) *reload.Watcher {
	t.Helper()
	var seen atomic.Value
	load := func(path string) (int, error) {
		names, _ := filepath.Glob(filepath.Join(path, "*.yaml"))
		var files []string
		for _, name := range names {
			data, err := os.ReadFile(name)
			if err != nil {
				return 0, err
			}
			if string(data) == "bad" {
				return 0, errors.New(name + ": bad")
			}
			files = append(files, filepath.Base(name)+"="+string(data))
		}
		seen.Store(strings.Join(files, " "))
		return len(files), nil
	}
	obs := &reloads{}
	debounce := 20 * time.Millisecond
	w, err := reload.NewWatcher(dir, load, reload.OnReload(obs.add), reload.WithDebounce(debounce),
		reload.WithSignals(), reload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	for _, s := range steps {
		applied, refused := w.Stats()
		s.do()
		if s.applied == applied && s.refused == refused {
			// Nothing to wait for: give the watcher 25 debounce periods
			// to (wrongly) reload.
			time.Sleep(25 * debounce)
		} else {
			waitFor(t, s.what, func() bool { a, r := w.Stats(); return a >= s.applied && r >= s.refused })
			time.Sleep(5 * debounce) // a second reload of one change would come now
		}
		applied, refused = w.Stats()
		okN, failed := obs.count()
		if applied != s.applied || refused != s.refused || int64(okN) != s.applied || int64(failed) != s.refused {
			t.Fatalf("%s: Stats() = %d applied, %d refused; observer %d, %d; want %d, %d",
				s.what, applied, refused, okN, failed, s.applied, s.refused)
		}
		if got := seen.Load(); got != s.seen {
			t.Errorf("%s: the last load saw %q; want %q", s.what, got, s.seen)
		}
	}
	obs.mu.Lock()
	last := obs.got[len(obs.got)-1]
	obs.mu.Unlock()
	if want := strings.Count(steps[len(steps)-1].seen, "="); last.Source != dir || last.Policies != want {
		t.Errorf("last reload reported = %+v; want source %s, %d policies in force", last, dir, want)
	}
	return w
}

// remove returns a step removing path and all it holds.
func remove(t *testing.T, path string) func() {
	return func() {
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWatchDirectory follows a directory of files, as sluice-rls follows
// a directory of rate limit files: a file added, changed or removed in it
// is one reload each, which sees the directory as it is; a file rewritten
// with the same bytes, or a subdirectory made in it, is none; a version
// the program refuses is refused once and the next change applies;
// Reload retries an unchanged directory.
func TestWatchDirectory(t *testing.T) {
	dir := t.TempDir()
	put := func(name, data string) func() {
		return func() {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("a.yaml", "a1")()
	w := watchDir(t, dir, []dirStep{
		{"start", func() {}, 1, 0, "a.yaml=a1"},
		{"a file added", put("b.yaml", "b1"), 2, 0, "a.yaml=a1 b.yaml=b1"},
		{"a file changed", put("a.yaml", "a2"), 3, 0, "a.yaml=a2 b.yaml=b1"},
		{"a file rewritten with the same bytes", put("b.yaml", "b1"), 3, 0, "a.yaml=a2 b.yaml=b1"},
		{"a subdirectory made", func() {
			if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, 3, 0, "a.yaml=a2 b.yaml=b1"},
		{"a file removed", remove(t, filepath.Join(dir, "b.yaml")), 4, 0, "a.yaml=a2"},
		{"a file refused", put("c.yaml", "bad"), 4, 1, "a.yaml=a2"},
		{"the refused file rewritten with the same bytes", put("c.yaml", "bad"), 4, 1, "a.yaml=a2"},
		{"the refused file fixed", put("c.yaml", "c1"), 5, 1, "a.yaml=a2 c.yaml=c1"},
	})
	if w.Current() != nil {
		t.Errorf("Current() = %v; want nil (not a policy file)", w.Current())
	}
	if err := w.Reload(); err != nil {
		t.Errorf("Reload() = %v; want nil", err)
	}
	if applied, _ := w.Stats(); applied != 6 {
		t.Errorf("after Reload, %d applied; want 6", applied)
	}
}

// TestWatchDirectoryConfigMap follows a directory mounted as a Kubernetes
// ConfigMap volume (api.yaml -> ..data/api.yaml, ..data a symlink swapped
// to a new versioned directory): a swap to a new version is one reload, a
// swap to a refused one is refused once, and the kubelet removing an old
// version is no reload.
func TestWatchDirectoryConfigMap(t *testing.T) {
	dir := t.TempDir()
	swap := func(name, data string) func() {
		return func() { swapConfigMap(t, dir, name, map[string]string{"api.yaml": data}) }
	}
	swap("..v1", "a1")()
	if err := os.Symlink(filepath.Join("..data", "api.yaml"), filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
	watchDir(t, dir, []dirStep{
		{"start", func() {}, 1, 0, "api.yaml=a1"},
		{"a swap to v2", swap("..v2", "a2"), 2, 0, "api.yaml=a2"},
		{"an old version removed", remove(t, filepath.Join(dir, "..v1")), 2, 0, "api.yaml=a2"},
		{"a swap to a refused v3", swap("..v3", "bad"), 2, 1, "api.yaml=a2"},
		{"a swap to v4, as v2", swap("..v4", "a2"), 3, 1, "api.yaml=a2"},
	})
}

// TestWatchDirectoryLargeFile watches a directory holding, besides the
// configuration, a file under config.MaxFileSize and one over it (a log,
// a core dump written next to the rate limit files): a reload reads
// neither into memory (the one over is not read at all), and a change of
// the large file is still seen.
func TestWatchDirectoryLargeFile(t *testing.T) {
	dir := t.TempDir()
	sparse := func(name string, size int64) func() {
		return func() {
			fh, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				err = errors.Join(fh.Truncate(size), fh.Close())
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("a1"), 0o644); err != nil {
		t.Fatal(err)
	}
	sparse("under.log", config.MaxFileSize/2)()
	sparse("over.log", config.MaxFileSize+1)()
	w := watchDir(t, dir, []dirStep{
		{"start", func() {}, 1, 0, "a.yaml=a1"},
		{"the large file grown", sparse("over.log", config.MaxFileSize+2), 2, 0, "a.yaml=a1"},
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("a reload allocated %d bytes; want under 1 MiB, whatever the sizes of the directory's files", n)
	}
}
