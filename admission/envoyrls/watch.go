package envoyrls

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
)

// A Watcher reloads a Server's configuration when its file or directory
// changes, and on SIGHUP. A configuration that does not load is refused
// and logged; the one in force keeps serving.
type Watcher struct {
	path    string
	srv     *Server
	log     *slog.Logger
	fsw     *fsnotify.Watcher
	sigs    chan os.Signal
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	mu      sync.Mutex
	applied int64
	refused int64
}

// debounce is how long the watcher waits for a burst of file events
// (an editor's save, a ConfigMap's symlink swap) to end.
const debounce = 100 * time.Millisecond

// Watch loads path (a file or a directory, as Load) into srv now, and
// again whenever it changes or the process gets SIGHUP, until Close.
func Watch(path string, srv *Server, log *slog.Logger) (*Watcher, error) {
	w := &Watcher{path: filepath.Clean(path), srv: srv, log: log, stop: make(chan struct{})}
	if err := w.Reload(); err != nil {
		return nil, err
	}
	dir := w.path
	if st, err := os.Stat(w.path); err == nil && !st.IsDir() {
		dir = filepath.Dir(w.path)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("envoyrls: watching %s: %w", path, err)
	}
	if err := fsw.Add(dir); err != nil {
		_ = fsw.Close()
		return nil, fmt.Errorf("envoyrls: watching %s: %w", path, err)
	}
	w.fsw = fsw
	w.sigs = make(chan os.Signal, 1)
	signal.Notify(w.sigs, syscall.SIGHUP)
	w.wg.Add(1)
	go w.loop()
	return w, nil
}

// Reload loads the configuration now and applies it; it returns why a
// refused one was refused.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	cfg, err := rlsconfig.Load(w.path)
	if err == nil {
		err = w.srv.SetConfig(cfg)
	}
	if err != nil {
		w.refused++
		w.log.Error("rate limit configuration refused; the previous one keeps serving", slog.String("path", w.path), slog.String("error", err.Error()))
		return err
	}
	w.applied++
	w.log.Info("rate limit configuration applied", slog.String("path", w.path), slog.Int("domains", len(cfg.Domains())), slog.Int("policies", len(cfg.Policies)))
	return nil
}

// Stats returns how many configurations were applied (the first load
// included) and refused.
func (w *Watcher) Stats() (applied, refused int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applied, w.refused
}

// Close stops watching.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() {
		close(w.stop)
		signal.Stop(w.sigs)
		err = w.fsw.Close()
		w.wg.Wait()
	})
	return err
}

func (w *Watcher) loop() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-w.stop:
			timer.Stop()
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if ev.Op != fsnotify.Chmod {
				timer.Reset(debounce)
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.log.Warn("rate limit configuration watch error", slog.String("path", w.path), slog.String("error", err.Error()))
		case <-timer.C:
			_ = w.Reload()
		case <-w.sigs:
			_ = w.Reload()
		}
	}
}
