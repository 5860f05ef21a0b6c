package reload_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/reload"
)

// A Subscriber of a program with only a controller.
type controllerSub struct{ ctl *admission.Controller }

func (s controllerSub) Apply(f *config.File) error { return s.ctl.SetConfig(f.Config) }

// Watch applies the file now and each new version of it; a version that
// does not validate is refused and the previous one keeps serving.
func ExampleWatch() {
	dir, _ := os.MkdirTemp("", "reload")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "policies.yaml")
	os.WriteFile(path, []byte("policies:\n  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 60, per: 1m}\n"), 0o644)
	ctl, _ := admission.New(admission.Config{})
	w, err := reload.Watch(path, controllerSub{ctl}, reload.WithSignals(), reload.WithDebounce(time.Hour), reload.WithLogger(slog.New(slog.DiscardHandler)),
		reload.OnReload(func(e reload.Event) { fmt.Println("applied:", e.Applied(), "policies:", e.Policies) }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	os.WriteFile(path, []byte("policies:\n  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 0, per: 1m}\n"), 0o644)
	fmt.Println(w.Reload() != nil) // what a change on disk does after WithDebounce
	applied, refused := w.Stats()
	fmt.Println(applied, refused, len(ctl.Policies()))
	// Output:
	// applied: true policies: 1
	// applied: false policies: 1
	// true
	// 1 1 1
}
