// Package reload keeps a running program in step with its configuration
// on disk: Watch follows a policy file (admission/config) and hands each
// version that decodes to a Subscriber, whose Apply installs it whole
// (httpadmitfile.Middleware, directory.Directory, the llmproxy gateway);
// NewWatcher follows any file or directory a program loads itself (the
// Envoy rate-limit configuration). A version that does not load is
// refused, logged and reported (OnReload, an Event) while the previous
// one keeps serving; one applied without a part it cannot take at run
// time is reported with a *PartialError.
//
// Package config is only the schema and its decoder: it neither watches
// files nor serves anything, so a program that decodes a file once links
// no fsnotify.
package reload

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicehq/sluice/admission/config"
)

// A Watcher keeps a program in step with its configuration: a policy
// file (Watch), or any file or directory of files a program loads itself
// (NewWatcher). It reloads the configuration when it changes on disk and
// when the process receives SIGHUP; a configuration that does not load (or
// that the program refuses) is logged, counted and reported (OnReload)
// while the previous one keeps serving; one the program applies without a
// part it cannot take at run time (a *PartialError) is applied, and
// reported with that part. Policies that keep their
// name, algorithm, unit and key keep their partitions across a reload,
// including a policy flipped from shadow to enforce.
//
// File changes are seen through fsnotify on the file's directory, so that
// editors that write a new file and rename it, and Kubernetes ConfigMap
// volumes that swap a symlink, are both followed; a file that is a
// symlink to a file elsewhere has its target's directory watched too, so
// that an edit of the target is seen. Events of other files in
// the directory (a log written next to the policy file, an editor's swap
// file) are ignored, and events of the file are debounced. A directory is
// watched itself: every event inside it concerns it.
//
// Each version of the configuration, told apart by the SHA-256 of its
// content (for a directory, of the names and contents of its files, a
// file larger than config.MaxFileSize by its size and modification time,
// unread; for one that cannot be read, by the error), is tried once: a version that
// was refused is refused, logged and counted once, not again on every
// event, and a version equal to the last one tried is skipped. The next
// change is tried again. SIGHUP and Reload retry on demand, whatever the
// configuration holds.
type Watcher struct {
	path     string
	dir      bool // path is a directory, whose files are the configuration
	load     func(path string) (policies int, err error)
	name     string // what the logs call the configuration
	onReload func(Event)
	log      *slog.Logger
	signals  []os.Signal
	debounce time.Duration

	mu       sync.Mutex // serialises reloads and guards tried, policies and data
	tried    version    // the version the last reload read
	real     string     // the file's path with symlinks resolved, for the loop
	target   string     // the directory of real also watched, for the loop; "" when none
	policies int        // the policies in force
	data     []byte     // the content of the file the last reload read
	cur      atomic.Pointer[config.File]
	applied  atomic.Int64
	refused  atomic.Int64

	fsw  *fsnotify.Watcher
	sigs chan os.Signal
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// version tells versions of the configuration apart: the hash of its
// content, or the reason it could not be read.
type version struct {
	sum     [sha256.Size]byte
	readErr string
}

// A Option configures a Watcher.
type Option func(*Watcher)

// A Subscriber is where a policy file takes effect: Apply builds all the
// program derives from it (policies, keys, HTTP settings, prices) into
// one snapshot and installs it by one swap (httpadmit.Snapshot), or fails
// and leaves the previous file in force.
// httpadmitfile.Middleware is one; a program with only a controller applies
// f.Config with Controller.SetConfig.
type Subscriber interface {
	Apply(f *config.File) error
}

// An Event is one reload of the configuration, applied or refused, as
// OnReload reports it.
type Event struct {
	Source   string // the configuration's path
	Policies int    // the policies in force afterwards
	// Err is nil when the configuration was applied whole, a
	// *PartialError when it was applied without a part of it (see
	// Applied), and otherwise why it was refused.
	Err error
}

// Applied reports whether the configuration is in force: whole, or
// without the part a *PartialError names.
func (r Event) Applied() bool {
	var p *PartialError
	return r.Err == nil || errors.As(r.Err, &p)
}

// A PartialError is what a Subscriber's Apply (or NewWatcher's load)
// returns when it applied the configuration without a part of it, which
// the running program cannot take (a tenant directory's directory
// section, which a restart applies; the directory's entries that the
// file's policies refuse): the rest is in force. The Watcher
// counts and logs the reload as applied, and reports it (Event.Err) with
// this error, so that a status page and the reload metrics say what was
// left out, rather than refusing the whole file.
type PartialError struct {
	// Section names the part left out ("directory"); empty when what was
	// left out is entries refused one by one (a tenant directory's
	// entries that the file's policies refuse), which Err names.
	Section string
	// Err says why.
	Err error
}

// Error returns "applied without its <section> section: " and why, or
// "applied without the entries refused: " and why.
func (e *PartialError) Error() string {
	if e.Section == "" {
		return "applied without the entries refused: " + e.Err.Error()
	}
	return "applied without its " + e.Section + " section: " + e.Err.Error()
}

// Unwrap returns why the section was left out.
func (e *PartialError) Unwrap() error { return e.Err }

// Applied reports that the configuration is in force without the
// section: true. Packages that cannot import reload (package metrics)
// tell a partial reload from a refused one by this method.
func (e *PartialError) Applied() bool { return true }

// OnReload sets the function told about every reload, applied or refused
// (the first load included), for example to count reloads
// (metrics.Observer.CountReload).
func OnReload(fn func(Event)) Option { return func(w *Watcher) { w.onReload = fn } }

// WithLogger sets the logger of reloads; the default is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(w *Watcher) { w.log = l } }

// WithName sets what the logs call the configuration ("<name> applied",
// "<name> refused; ..."); the default is "policy file".
func WithName(name string) Option { return func(w *Watcher) { w.name = name } }

// WithSignals sets the signals that force a reload; the default is SIGHUP.
// No signal at all disables signal handling.
func WithSignals(sigs ...os.Signal) Option {
	return func(w *Watcher) { w.signals = sigs }
}

// WithDebounce sets how long file events must be quiet before a reload
// (default 100ms).
func WithDebounce(d time.Duration) Option { return func(w *Watcher) { w.debounce = d } }

// Watch loads the policy file at path, applies it to sub and keeps
// watching it until Close. It fails when the first load fails.
func Watch(path string, sub Subscriber, opts ...Option) (*Watcher, error) {
	w := newWatcher(path, opts)
	w.load = func(path string) (int, error) {
		f, err := config.Parse(path, w.data) // the bytes of the version tried
		if err != nil {
			return 0, err
		}
		err = sub.Apply(f)
		var partial *PartialError
		if err != nil && !errors.As(err, &partial) {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		w.cur.Store(f)
		return len(f.Config.Policies), err
	}
	return w.start()
}

// NewWatcher follows the configuration at path, a file or a directory of
// files, as Watch follows a policy file: load reads the configuration at
// path and installs it, returning the number of policies now in force, or
// why it refused it (the previous configuration staying in force). load
// runs now, and again for every new version and on SIGHUP, until Close;
// NewWatcher fails when the first load fails. Current is nil.
func NewWatcher(path string, load func(path string) (policies int, err error), opts ...Option) (*Watcher, error) {
	w := newWatcher(path, opts)
	w.load = load
	return w.start()
}

func newWatcher(path string, opts []Option) *Watcher {
	w := &Watcher{
		path: filepath.Clean(path), name: "policy file", onReload: func(Event) {}, log: slog.Default(),
		signals: []os.Signal{syscall.SIGHUP}, debounce: 100 * time.Millisecond,
		stop: make(chan struct{}),
	}
	for _, o := range opts {
		o(w)
	}
	return w
}

// start loads the configuration and starts watching it.
func (w *Watcher) start() (*Watcher, error) {
	st, err := os.Stat(w.path)
	w.dir = err == nil && st.IsDir()
	w.real, _ = filepath.EvalSymlinks(w.path)
	if err := w.reload(true); err != nil {
		return nil, err
	}
	watched := filepath.Dir(w.path)
	if w.dir {
		watched = w.path
	}
	fsw, err := fsnotify.NewWatcher()
	if err == nil {
		if err = fsw.Add(watched); err != nil {
			_ = fsw.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reload: watching %s: %w", w.path, err)
	}
	w.fsw = fsw
	w.watchTarget()
	if len(w.signals) > 0 {
		w.sigs = make(chan os.Signal, 1)
		signal.Notify(w.sigs, w.signals...)
	}
	w.wg.Add(1)
	go w.loop()
	return w, nil
}

// Current returns the policy file in force (nil for a NewWatcher).
func (w *Watcher) Current() *config.File { return w.cur.Load() }

// Stats returns how many reloads were applied (whole or without a part)
// and refused since Watch (the first load counts as applied).
func (w *Watcher) Stats() (applied, refused int64) { return w.applied.Load(), w.refused.Load() }

// Reload reads the configuration now and applies it, even when its content
// has not changed since the last reload (applied or refused), as SIGHUP
// does. It returns the reason a refused configuration was refused (nil
// for one applied without a part: OnReload reports that part).
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
			w.log.Warn(w.name+" watch error", slog.String("file", w.path), slog.String("error", err.Error()))
		case <-fire:
			fire = nil
			_ = w.reload(false)
		case <-w.sigs:
			w.log.Info(w.name+" reload requested by signal", slog.String("file", w.path))
			_ = w.reload(true)
		}
	}
}

// concerns reports whether ev may have changed the configuration: any
// event in a watched directory; for a file, an event of the file itself
// or of the file its symlinks resolve to, or any event after which the
// file resolves to another path (a ConfigMap volume swaps a symlink in
// the directory: "..data").
func (w *Watcher) concerns(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if w.dir || name == w.path || w.real != "" && name == w.real {
		return true
	}
	real, _ := filepath.EvalSymlinks(w.path)
	if real == w.real {
		return false
	}
	w.real = real
	w.watchTarget()
	return true
}

// watchTarget watches, besides the file's directory, the directory of
// the file its symlinks resolve to (a policy file linked from a
// repository checked out elsewhere), in place of the one watched before,
// so that an edit of the target is seen.
func (w *Watcher) watchTarget() {
	dir := ""
	if !w.dir && w.real != "" {
		dir = filepath.Dir(w.real)
	}
	if dir == filepath.Dir(w.path) {
		dir = ""
	}
	if dir == w.target {
		return
	}
	if w.target != "" {
		_ = w.fsw.Remove(w.target) // gone with its directory, perhaps
		w.target = ""
	}
	if dir == "" {
		return
	}
	if err := w.fsw.Add(dir); err != nil {
		w.log.Warn(w.name+" watch error: its symlink's target is not followed", slog.String("file", w.path), slog.String("target", w.real), slog.String("error", err.Error()))
		return
	}
	w.target = dir
}

// read returns the version of the configuration on disk: the hash of the
// file, or of the names and contents of the directory's files (its
// subdirectories and entries gone while it is read left out; a file
// larger than config.MaxFileSize stands by its size and modification
// time, unread: see hashFile).
func (w *Watcher) read() (version, error) {
	var v version
	files := []string{w.path}
	if w.dir {
		files = files[:0]
		entries, err := os.ReadDir(w.path)
		if err != nil {
			v.readErr = err.Error()
			return v, err
		}
		for _, e := range entries {
			name := filepath.Join(w.path, e.Name())
			if st, err := os.Stat(name); err == nil && st.Mode().IsRegular() {
				files = append(files, name)
			}
		}
	}
	h := sha256.New()
	for _, name := range files {
		if w.dir {
			if err := hashFile(h, name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				v.readErr = err.Error()
				return v, err
			}
			continue
		}
		data, err := config.ReadFile(name) // a policy file, bounded
		if err != nil {
			v.readErr = err.Error()
			return v, err
		}
		fmt.Fprintf(h, "%d:%s:%d:", len(name), name, len(data))
		h.Write(data)
		w.data = data
	}
	h.Sum(v.sum[:0])
	return v, nil
}

// hashFile writes to h the name of a watched directory's file and the
// hash of its content, read a buffer at a time and at most
// config.MaxFileSize bytes; for a file larger than that (no configuration
// file: a log, a dump written next to them), its size and modification
// time instead, without reading it.
func hashFile(h io.Writer, name string) error {
	fh, err := os.Open(name)
	if err != nil {
		return err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return err
	}
	if st.Size() > config.MaxFileSize {
		_, err = fmt.Fprintf(h, "%d:%s:large:%d:%d;", len(name), name, st.Size(), st.ModTime().UnixNano())
		return err
	}
	sum := sha256.New()
	n, err := io.Copy(sum, io.LimitReader(fh, config.MaxFileSize+1))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(h, "%d:%s:%d:%x;", len(name), name, n, sum.Sum(nil))
	return err
}

// reload reads and applies the configuration; force tries it even when it
// is the version the last reload read.
func (w *Watcher) reload(force bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, err := w.read()
	if !force && v == w.tried {
		return nil
	}
	w.tried = v
	n := 0
	if err == nil {
		n, err = w.load(w.path)
	}
	var partial *PartialError
	if err != nil && !errors.As(err, &partial) {
		return w.refuse(err)
	}
	w.policies = n
	w.onReload(Event{Source: w.path, Policies: n, Err: err})
	if partial != nil {
		w.log.Warn(w.name+" applied without a part", slog.String("file", w.path), slog.Int("policies", n), slog.String("warning", err.Error()))
	} else {
		w.log.Info(w.name+" applied", slog.String("file", w.path), slog.Int("policies", n))
	}
	w.applied.Add(1) // last: once Stats counts a reload, it was reported
	return nil
}

func (w *Watcher) refuse(err error) error {
	defer w.refused.Add(1) // last, as for an applied configuration
	w.onReload(Event{Source: w.path, Err: err, Policies: w.policies})
	n := 0
	var es config.Errors
	if errors.As(err, &es) {
		n = len(es)
	}
	w.log.Error(w.name+" refused; the previous configuration stays in force",
		slog.String("file", w.path), slog.Int("problems", n), slog.String("error", err.Error()))
	return err
}
