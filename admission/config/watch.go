package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// A Watcher keeps a program in step with a policy file. It reloads the
// file when it changes on disk and when the process receives SIGHUP; every
// reload is validated first and handed to the program's Subscriber, and a
// file that does not validate (or that the subscriber refuses) is logged,
// counted and reported (OnReload) while the previous configuration keeps
// serving. Policies that keep their
// name, algorithm, unit and key keep their partitions across a reload,
// including a policy flipped from shadow to enforce.
//
// File changes are seen through fsnotify on the file's directory, so that
// editors that write a new file and rename it, and Kubernetes ConfigMap
// volumes that swap a symlink, are both followed. Events of other files in
// the directory (a log written next to the policy file, an editor's swap
// file) are ignored, and events of the file are debounced.
//
// Each version of the file, told apart by the SHA-256 of its content (or,
// for a file that cannot be read, by the error), is tried once: a version
// that was refused is refused, logged and counted once, not again on every
// event, and a version equal to the last one tried is skipped. The next
// change is tried again. SIGHUP and Reload retry the file on demand,
// whatever it holds.
type Watcher struct {
	path     string
	sub      Subscriber
	onReload func(Reload)
	log      *slog.Logger
	signals  []os.Signal
	debounce time.Duration

	mu      sync.Mutex // serialises reloads and guards tried
	tried   version    // the version of the file the last reload read
	real    string     // the file's path with symlinks resolved, for the loop
	cur     atomic.Pointer[File]
	applied atomic.Int64
	refused atomic.Int64

	fsw  *fsnotify.Watcher
	sigs chan os.Signal
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// version tells versions of the file apart: the hash of its content, or
// the reason it could not be read.
type version struct {
	sum     [sha256.Size]byte
	readErr string
}

// A WatchOption configures a Watcher.
type WatchOption func(*Watcher)

// A Subscriber is where a policy file takes effect: Apply installs all
// the program derives from it (policies, keys, HTTP settings, prices) as
// one step (see Epoch), or fails and leaves the previous file in force.
// httpadmit.Middleware is one; a program with only a controller applies
// f.Config with Controller.SetConfig.
type Subscriber interface {
	Apply(f *File) error
}

// Reload is one reload of the file, applied or refused, as OnReload
// reports it.
type Reload struct {
	Source   string // the file's path
	Policies int    // the policies in force afterwards
	Err      error  // why the file was refused; nil when applied
}

// OnReload sets the function told about every reload, applied or refused
// (the first load included), for example to count reloads
// (metrics.Observer.CountReload).
func OnReload(fn func(Reload)) WatchOption { return func(w *Watcher) { w.onReload = fn } }

// WithLogger sets the logger of reloads; the default is slog.Default().
func WithLogger(l *slog.Logger) WatchOption { return func(w *Watcher) { w.log = l } }

// WithSignals sets the signals that force a reload; the default is SIGHUP.
// No signal at all disables signal handling.
func WithSignals(sigs ...os.Signal) WatchOption {
	return func(w *Watcher) { w.signals = sigs }
}

// WithDebounce sets how long file events must be quiet before a reload
// (default 100ms).
func WithDebounce(d time.Duration) WatchOption { return func(w *Watcher) { w.debounce = d } }

// Watch loads the policy file at path, applies it to sub and keeps
// watching it until Close. It fails when the first load fails.
func Watch(path string, sub Subscriber, opts ...WatchOption) (*Watcher, error) {
	w := &Watcher{
		path: filepath.Clean(path), sub: sub, onReload: func(Reload) {}, log: slog.Default(),
		signals: []os.Signal{syscall.SIGHUP}, debounce: 100 * time.Millisecond,
		stop: make(chan struct{}),
	}
	for _, o := range opts {
		o(w)
	}
	w.real, _ = filepath.EvalSymlinks(w.path)
	if err := w.reload(true); err != nil {
		return nil, err
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("config: watching %s: %w", path, err)
	}
	if err := fsw.Add(filepath.Dir(w.path)); err != nil {
		_ = fsw.Close()
		return nil, fmt.Errorf("config: watching %s: %w", path, err)
	}
	w.fsw = fsw
	if len(w.signals) > 0 {
		w.sigs = make(chan os.Signal, 1)
		signal.Notify(w.sigs, w.signals...)
	}
	w.wg.Add(1)
	go w.loop()
	return w, nil
}

// Current returns the file in force.
func (w *Watcher) Current() *File { return w.cur.Load() }

// Stats returns how many reloads were applied and refused since Watch
// (the first load counts as applied).
func (w *Watcher) Stats() (applied, refused int64) { return w.applied.Load(), w.refused.Load() }

// Reload reads the file now and applies it, even when its content has not
// changed since the last reload (applied or refused), as SIGHUP does. It
// returns the reason a refused file was refused.
func (w *Watcher) Reload() error { return w.reload(true) }

// Close stops watching. It does not touch the subscriber.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() {
		close(w.stop)
		if w.sigs != nil {
			signal.Stop(w.sigs)
		}
		err = w.fsw.Close()
		w.wg.Wait()
	})
	return err
}

func (w *Watcher) loop() {
	defer w.wg.Done()
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-w.stop:
			if timer != nil {
				timer.Stop()
			}
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod || !w.concerns(ev) {
				continue
			}
			if timer == nil {
				timer = time.NewTimer(w.debounce)
			} else {
				timer.Reset(w.debounce)
			}
			fire = timer.C
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.log.Warn("policy file watch error", slog.String("file", w.path), slog.String("error", err.Error()))
		case <-fire:
			fire = nil
			_ = w.reload(false)
		case <-w.sigs:
			w.log.Info("policy file reload requested by signal", slog.String("file", w.path))
			_ = w.reload(true)
		}
	}
}

// concerns reports whether ev may have changed the file: an event of the
// file itself, or any event after which the file resolves to another path
// (a ConfigMap volume swaps a symlink in the directory: "..data").
func (w *Watcher) concerns(ev fsnotify.Event) bool {
	if filepath.Clean(ev.Name) == w.path {
		return true
	}
	real, _ := filepath.EvalSymlinks(w.path)
	if real == w.real {
		return false
	}
	w.real = real
	return true
}

// reload reads, validates and applies the file; force tries it even when
// it is the version the last reload read.
func (w *Watcher) reload(force bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := os.ReadFile(w.path)
	var v version
	if err != nil {
		v.readErr = err.Error()
	} else {
		v.sum = sha256.Sum256(data)
	}
	if !force && v == w.tried {
		return nil
	}
	w.tried = v
	if err != nil {
		return w.refuse(err)
	}
	f, err := Parse(w.path, data)
	if err != nil {
		return w.refuse(err)
	}
	if err := w.sub.Apply(f); err != nil {
		return w.refuse(fmt.Errorf("%s: %w", w.path, err))
	}
	w.cur.Store(f)
	w.onReload(Reload{Source: w.path, Policies: len(f.Config.Policies)})
	w.log.Info("policy file applied", slog.String("file", w.path), slog.Int("policies", len(f.Config.Policies)))
	w.applied.Add(1) // last: once Stats counts a reload, it was reported
	return nil
}

func (w *Watcher) refuse(err error) error {
	defer w.refused.Add(1) // last, as for an applied file
	w.onReload(Reload{Source: w.path, Err: err, Policies: w.policies()})
	n := 0
	var es Errors
	if errors.As(err, &es) {
		n = len(es)
	}
	w.log.Error("policy file refused; the previous configuration stays in force",
		slog.String("file", w.path), slog.Int("problems", n), slog.String("error", err.Error()))
	return err
}

func (w *Watcher) policies() int {
	if f := w.cur.Load(); f != nil {
		return len(f.Config.Policies)
	}
	return 0
}

// An Epoch makes a reload one step for requests that read several things
// derived from one file (the policies, the key table saying whose they
// are). A Subscriber installs under Install, which brackets its swaps with
// two increments; a request takes Stable before reading and asks Changed
// once admitted: false means every read saw all of one install or none
// (sync/atomic is sequentially consistent), true that the request may
// have mixed two files (see httpadmit.Readmit). Two atomic loads.
type Epoch struct {
	mu sync.Mutex
	n  atomic.Uint64 // odd while an install runs
}

// Install runs swap, which installs one file, as one step; installs are
// serialised. Before it changes anything, swap calls moves if the file
// changes what requests read from it besides the controller's policies
// (the key table, the identity settings, prices): an install that does
// not is not counted, since every request reads the same from both files.
func (e *Epoch) Install(swap func(moves func()) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	// n changes only here: even before, odd once moves opened the bracket.
	defer func() { e.n.Add(e.n.Load() & 1) }()
	return swap(func() { e.n.Add(1 - e.n.Load()&1) })
}

// Stable returns the current epoch, waiting for an install in progress.
func (e *Epoch) Stable() (n uint64) {
	if n = e.n.Load(); n&1 != 0 {
		e.Hold(func() { n = e.n.Load() })
	}
	return n
}

// Hold runs fn with installs held off (they wait for it), for a request
// reloads overlapped too often: all fn reads come from one file.
func (e *Epoch) Hold(fn func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn()
}

// Changed reports whether an install ran, or is running, since Stable
// returned n.
func (e *Epoch) Changed(n uint64) bool { return e.n.Load() != n }
