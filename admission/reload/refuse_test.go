package reload_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/internal/poll"
)

// waitFor waits until cond holds, with no deadline (package poll).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, what, cond)
}

// syncFile is a log destination in the watched directory whose lines the
// test can count while the watcher writes them.
type syncFile struct {
	mu sync.Mutex
	f  *os.File
}

func (s *syncFile) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Write(p)
}

// count returns the number of lines of the log holding substr.
func (s *syncFile) count(t *testing.T, substr string) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := os.ReadFile(s.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range bytes.Lines(data) {
		if bytes.Contains(line, []byte(substr)) {
			n++
		}
	}
	return n
}

// TestReloadRefusesBadFileOnce keeps the process's log in the directory of
// the policy file, as an operator running `llmproxy > gateway.log` next to
// its policies.yaml does, and writes other files there too: every refused
// version of the file is refused, logged and reported exactly once, however
// much else happens in the directory; the next change is tried again, and
// SIGHUP or Reload retry on demand.
func TestReloadRefusesBadFileOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policies.yaml")
	write(t, path, policyFile(10, "enforce", 1000))
	lf, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	logs := &syncFile{f: lf}
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	obs := &reloads{}
	w, err := reload.Watch(path, controller{ctl}, reload.OnReload(obs.add), reload.WithDebounce(5*time.Millisecond),
		reload.WithSignals(syscall.SIGHUP), reload.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// noise writes another file of the directory for d, as a busy log or
	// an editor's swap file does.
	noise := func(d time.Duration) {
		t.Helper()
		other := filepath.Join(dir, "decisions.log")
		for end := time.Now().Add(d); time.Now().Before(end); {
			fh, err := os.OpenFile(other, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			fh.WriteString("decision\n")
			fh.Close()
			time.Sleep(time.Millisecond)
		}
	}
	// expect checks every count of refusals and applications: the
	// watcher's, the observer's (what admission_reloads_total counts) and
	// the log's.
	expect := func(step string, applied, refused int64) {
		t.Helper()
		gotApplied, gotRefused := w.Stats()
		obsOK, obsFailed := obs.count()
		logRefused := logs.count(t, `level=ERROR msg="policy file refused`)
		logApplied := logs.count(t, `msg="policy file applied"`)
		if gotApplied != applied || gotRefused != refused || int64(obsOK) != applied || int64(obsFailed) != refused ||
			int64(logApplied) != applied || int64(logRefused) != refused {
			t.Fatalf("%s: Stats() = %d applied, %d refused; observer %d, %d; log %d, %d; want %d applied and %d refused everywhere",
				step, gotApplied, gotRefused, obsOK, obsFailed, logApplied, logRefused, applied, refused)
		}
	}
	refusedAt := func(n int64) func() bool {
		return func() bool { _, refused := w.Stats(); return refused >= n }
	}
	appliedAt := func(n int64) func() bool {
		return func() bool { applied, _ := w.Stats(); return applied >= n }
	}
	broken := "policies:\n  - name: per-tenant\n    limit: 0\n"
	alsoBroken := "policies: ["

	write(t, path, broken)
	waitFor(t, "the broken file to be refused", refusedAt(1))
	// The refusal was logged into the directory, and other files there
	// keep changing: 100 debounce periods with nothing more to refuse.
	noise(500 * time.Millisecond)
	expect("a broken file, then 500ms of other writes in its directory", 1, 1)

	// Saving the same bytes again is no change.
	write(t, path, broken)
	// The next change is tried.
	write(t, path, alsoBroken)
	waitFor(t, "the second broken file to be refused", refusedAt(2))
	noise(100 * time.Millisecond)
	expect("another broken file", 1, 2)

	// SIGHUP and Reload retry the same file at once.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGHUP to retry the broken file", refusedAt(3))
	if err := w.Reload(); err == nil {
		t.Fatal("Reload() of a broken file = nil; want its error")
	}
	expect("SIGHUP and Reload", 1, 4)

	// A good file is applied, and a broken one after it is refused again,
	// although the watcher refused those very bytes before.
	write(t, path, policyFile(20, "enforce", 1000))
	waitFor(t, "the fixed file to be applied", appliedAt(2))
	if got := w.Current().Config.Policies[0].Limit; got != 20 {
		t.Errorf("limit after the fix = %d; want 20", got)
	}
	write(t, path, broken)
	waitFor(t, "the broken file to be refused after a good one", refusedAt(5))
	// A good file last: once it is applied, every event before it has been
	// handled, so the counts are final.
	noise(100 * time.Millisecond)
	write(t, path, policyFile(30, "enforce", 1000))
	waitFor(t, "the last file to be applied", appliedAt(3))
	expect("the end", 3, 5)
}

// TestReloadNotStarvedByOtherFiles writes another file of the directory
// without a pause as long as the debounce: a change of the policy file is
// still applied (events of other files do not postpone it).
func TestReloadNotStarvedByOtherFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policies.yaml")
	write(t, path, policyFile(10, "enforce", 1000))
	w, _ := serve(t, path, &reloads{}, reload.WithDebounce(250*time.Millisecond))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		other := filepath.Join(dir, "decisions.log")
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := os.WriteFile(other, []byte("decision\n"), 0o644); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { close(stop); <-done }()
	write(t, path, policyFile(20, "enforce", 1000))
	waitFor(t, "the change to be applied while another file keeps changing", func() bool {
		applied, _ := w.Stats()
		return applied >= 2
	})
	if got := w.Current().Config.Policies[0].Limit; got != 20 {
		t.Errorf("limit = %d; want 20", got)
	}
}

// TestReloadConfigMapSwap follows a file laid out as a Kubernetes
// ConfigMap volume mounts it (policies.yaml -> ..data/policies.yaml, with
// ..data a symlink to a versioned directory swapped by rename): a swap to a
// good version is applied, a swap to a broken one refused once.
func TestReloadConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, data string) { swapConfigMap(t, dir, name, map[string]string{"policies.yaml": data}) }
	version("..v1", policyFile(10, "enforce", 1000))
	path := filepath.Join(dir, "policies.yaml")
	if err := os.Symlink(filepath.Join("..data", "policies.yaml"), path); err != nil {
		t.Fatal(err)
	}
	obs := &reloads{}
	w, _ := serve(t, path, obs, reload.WithDebounce(5*time.Millisecond))
	version("..v2", policyFile(20, "enforce", 1000))
	waitFor(t, "the swap to v2 to be applied", func() bool { applied, _ := w.Stats(); return applied >= 2 })
	if got := w.Current().Config.Policies[0].Limit; got != 20 {
		t.Errorf("limit after the swap = %d; want 20", got)
	}
	version("..v3", "policies: [")
	waitFor(t, "the swap to v3 to be refused", func() bool { _, refused := w.Stats(); return refused >= 1 })
	version("..v4", policyFile(40, "enforce", 1000))
	waitFor(t, "the swap to v4 to be applied", func() bool { applied, _ := w.Stats(); return applied >= 3 })
	if applied, refused := w.Stats(); applied != 3 || refused != 1 {
		t.Errorf("Stats() = %d applied, %d refused; want 3, 1", applied, refused)
	}
	if okN, failed := obs.count(); okN != 3 || failed != 1 {
		t.Errorf("observer saw %d applied, %d refused; want 3, 1", okN, failed)
	}
}

// swapConfigMap lays out version name of a Kubernetes ConfigMap volume in
// dir as the kubelet does: its files in the directory name, then the
// symlink ..data swapped to it by rename.
func swapConfigMap(t *testing.T, dir, name string, files map[string]string) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	for file, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name, file), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(name, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// controller is the subscriber of a program whose only reader of the file
// is a controller.
type controller struct{ *admission.Controller }

func (c controller) Apply(f *config.File) error { return c.SetConfig(f.Config) }

// TestReloadSymlinkTarget follows a policy file that is a symlink to a
// file kept elsewhere (/etc/sluice/policies.yaml -> /srv/config/...), as
// an operator links a file from a checked-out repository: editing the
// target, in place or by an editor's rename, is a change of the policy
// file, and is applied.
func TestReloadSymlinkTarget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sameDir bool
	}{{"other directory", false}, {"same directory", true}} {
		t.Run(tc.name, func(t *testing.T) {
			linkDir, targetDir := t.TempDir(), t.TempDir()
			if tc.sameDir {
				targetDir = linkDir
			}
			target := filepath.Join(targetDir, "policies-main.yaml")
			if err := os.WriteFile(target, []byte(policyFile(10, "enforce", 1000)), 0o644); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(linkDir, "policies.yaml")
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			w, _ := serve(t, path, &reloads{}, reload.WithDebounce(5*time.Millisecond), reload.WithSignals())
			if err := os.WriteFile(target, []byte(policyFile(20, "enforce", 1000)), 0o644); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the edit of the target to be applied", func() bool { applied, _ := w.Stats(); return applied >= 2 })
			if got := w.Current().Config.Policies[0].Limit; got != 20 {
				t.Errorf("limit after the edit = %d; want 20", got)
			}
			tmp := filepath.Join(targetDir, ".policies-main.yaml.swp")
			if err := os.WriteFile(tmp, []byte(policyFile(30, "enforce", 1000)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, target); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the rename over the target to be applied", func() bool { applied, _ := w.Stats(); return applied >= 3 })
			if got := w.Current().Config.Policies[0].Limit; got != 30 {
				t.Errorf("limit after the rename = %d; want 30", got)
			}
		})
	}
}
