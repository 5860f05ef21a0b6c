package pgdir

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/limits"
	"go.opentelemetry.io/otel/metric"
)

// Config configures Open.
type Config struct {
	// Refresh is the period of the full reload behind the notifications;
	// zero means config.DefaultRefresh (60s).
	Refresh time.Duration
	// Heartbeat is how often the listening connection is checked while
	// no change arrives; zero means 5s. The directory's age stays under
	// it while the database answers.
	Heartbeat time.Duration
	// Snapshot is the file the last good directory is written to, and
	// read at start-up when the database cannot be reached; empty means
	// none; each replica needs its own. It is written whole at a full
	// load that changed the directory (flushed to disk and renamed into
	// place), and each batch of changes is appended to its journal, the
	// file named Snapshot plus ".changes", and flushed to disk before the
	// running directory applies it: a replica started from the two never
	// accepts a key revoked before a running replica refused it. Open
	// removes the partial files a crash while writing them left next to
	// them.
	Snapshot string
	// Timeout bounds each database call (connect, load, re-read); zero
	// means 10s.
	Timeout time.Duration
}

// An Option sets an optional collaborator of Open.
type Option func(*options)

// options are the collaborators of a Follower.
type options struct {
	log    *slog.Logger
	mp     metric.MeterProvider
	tracer pgx.QueryTracer
}

// scope is the instrumentation scope of the directory's instruments.
const scope = "github.com/sluicehq/sluice/admission/directory/pgdir"

// WithLogger sets the logger of outages, recoveries and refused entries;
// nil means slog.Default(), the default.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithMeterProvider creates the directory's instruments (age, outages,
// refused entries, changes) on mp; nil, the default, creates none.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.mp = mp } }

// WithQueryTracer shows t every statement the directory sends; nil, the
// default, traces none.
func WithQueryTracer(t pgx.QueryTracer) Option { return func(o *options) { o.tracer = t } }

// A Follower keeps a directory.Directory current from PostgreSQL until
// Close.
type Follower struct {
	pool *pgxpool.Pool
	dir  *directory.Directory
	cfg  Config
	log  *slog.Logger

	synced  atomic.Int64 // unix nanoseconds when the directory was last known current
	outages atomic.Int64
	unread  atomic.Int64 // the problems of the rows that cannot be read now (the sum of bad)
	changes atomic.Int64
	down    atomic.Bool

	// Run's goroutine only (and Open's, before it starts):
	bad       map[string]int64  // problems of the rows that cannot be read, by entry ("keys.<id>", "key:<hash>")
	written   [sha256.Size]byte // digest of the directory the snapshot holds
	base      time.Time         // the snapshot's written time, which its journal follows
	journal   *os.File          // the snapshot's journal, open for appending; nil without one
	journaled int               // the changes in the journal

	stop context.CancelFunc
	done chan struct{}
	reg  metric.Registration
}

// Open connects to the database at dsn, loads the whole directory into
// dir (after dir.Apply of the policy file) and follows its changes until
// Close. When the database cannot be reached it starts from the snapshot
// file if one is configured and readable, and keeps trying; without one it
// fails with a message saying so.
func Open(ctx context.Context, dsn string, dir *directory.Directory, cfg Config, opts ...Option) (*Follower, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = config.DefaultRefresh
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 5 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgdir: the directory's connection string: %w", err)
	}
	pc.MaxConns = 4
	pc.ConnConfig.Tracer = o.tracer
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > cfg.Timeout {
		pc.ConnConfig.ConnectTimeout = cfg.Timeout
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("pgdir: %w", err)
	}
	f := &Follower{pool: pool, dir: dir, cfg: cfg, log: o.log, done: make(chan struct{}), bad: map[string]int64{}}
	if f.log == nil {
		f.log = slog.Default()
	}
	if cfg.Snapshot != "" {
		if err := removeLeftovers(cfg.Snapshot); err != nil {
			f.log.Warn("directory snapshot: the partial files of an earlier crash are not all removed", "snapshot", cfg.Snapshot, "error", err)
		}
	}
	conn, err := f.connect(ctx)
	if err != nil {
		snap, serr := readSnapshot(cfg.Snapshot)
		if serr != nil {
			pool.Close()
			if cfg.Snapshot == "" {
				return nil, fmt.Errorf("pgdir: the tenant directory cannot be loaded from PostgreSQL (%v), and no snapshot is configured (directory.snapshot): start the database, or configure a snapshot to start from the last good directory", err)
			}
			return nil, fmt.Errorf("pgdir: the tenant directory cannot be loaded from PostgreSQL (%v), nor from the snapshot: %v", err, serr)
		}
		f.outage(err)
		if ierr := f.install(snap.Data, nil); ierr != nil {
			pool.Close()
			return nil, fmt.Errorf("pgdir: snapshot %s: %w", cfg.Snapshot, ierr)
		}
		f.synced.Store(snap.Current.UnixNano())
		f.log.Warn("tenant directory started from its snapshot: PostgreSQL cannot be reached", "snapshot", cfg.Snapshot, "written", snap.Written, "current", snap.Current, "error", err)
	}
	if o.mp != nil {
		if err := f.instruments(o.mp.Meter(scope)); err != nil {
			f.closeJournal()
			pool.Close()
			return nil, err
		}
	}
	lctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	go f.run(lctx, conn)
	return f, nil
}

// Close stops following and closes the connections; the directory keeps
// what it has.
func (f *Follower) Close() {
	f.stop()
	<-f.done
	f.closeJournal()
	if f.reg != nil {
		_ = f.reg.Unregister()
	}
	f.pool.Close()
}

// Age returns how long ago the directory was last known current: under
// the heartbeat while the database answers, growing during an outage.
func (f *Follower) Age() time.Duration { return time.Since(time.Unix(0, f.synced.Load())) }

// Outages returns the number of times the database became unreachable.
func (f *Follower) Outages() int64 { return f.outages.Load() }

// Refused returns the problems of the directory entries refused and not
// installed: the rows of the last full load that cannot be read or that
// the policy file refuses (directory.Directory.Refused, which a reload
// of the file updates too), and those of the changes refused since. A
// change of an entry that installs it clears its problems (a key row
// unreadable at a full load under its id stays counted until the next
// full load if it is then revoked).
func (f *Follower) Refused() int64 { return f.dir.Refused() + f.unread.Load() }

// fullLoad reads the whole directory, writes the snapshot and installs
// it.
func (f *Follower) fullLoad(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	data, problems, err := Load(ctx, f.pool)
	if err != nil {
		return err
	}
	// The snapshot holds the directory as the database does: a start from
	// it refuses what this Install refuses.
	f.snapshot(data)
	if err := f.install(data, problems); err != nil {
		return err
	}
	f.synced.Store(time.Now().UnixNano())
	return nil
}

// install installs a whole directory, and counts and logs the entries
// refused (the directory counts those it refuses), with problems (the
// rows that could not be read).
func (f *Follower) install(data *directory.Data, problems config.Errors) error {
	err := f.dir.Install(data)
	var refused config.Errors
	if err != nil {
		if !errors.Is(err, directory.ErrRefused) {
			return err
		}
		errors.As(err, &refused)
	}
	f.bad = map[string]int64{}
	for _, e := range problems {
		f.bad[e.Path]++
	}
	f.unread.Store(int64(len(problems)))
	f.refusedEntries(append(refused, problems...))
	return nil
}

// refusedEntries logs the entries err refuses, the first 20 one by one.
func (f *Follower) refusedEntries(err error) {
	var es config.Errors
	if !errors.As(err, &es) {
		if err != nil {
			f.log.Warn("directory change refused", "problem", err.Error())
		}
		return
	}
	for i, e := range es {
		if i == 20 {
			f.log.Warn("more directory entries refused", "count", len(es)-i)
			break
		}
		f.log.Warn("directory entry refused", "entry", e.Path, "problem", e.Msg)
	}
}

// outage records that the database cannot be reached.
func (f *Follower) outage(err error) {
	if f.down.CompareAndSwap(false, true) {
		f.outages.Add(1)
		f.log.Error("tenant directory database unreachable: serving the last directory", "error", err)
	}
}

// recovered records that the database answers again; age is the
// directory's age when it did, before the load that brought it current.
func (f *Follower) recovered(age time.Duration) {
	if f.down.CompareAndSwap(true, false) {
		f.log.Info("tenant directory database reachable again", "age", age.Round(time.Millisecond).String())
	}
}

// run follows the changes on conn (nil: not connected), reconnecting
// after an outage with a backoff.
func (f *Follower) run(ctx context.Context, conn *pgxpool.Conn) {
	defer close(f.done)
	// A listening connection is not given back to the pool: it is closed.
	drop := func() {
		if conn != nil {
			_ = conn.Conn().Close(context.Background())
			conn.Release()
			conn = nil
		}
	}
	defer drop()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		var err error
		age := f.Age()
		if conn == nil {
			conn, err = f.connect(ctx)
		}
		if conn != nil {
			f.recovered(age)
			backoff = 100 * time.Millisecond
			err = f.follow(ctx, conn.Conn())
			drop()
		}
		if ctx.Err() != nil {
			return
		}
		f.outage(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// maxBatch is the most changes applied one by one: more at once (an
// import) are read with one full load.
const maxBatch = 1024

// connect takes a connection, listens on it, then loads the whole
// directory (changes may have been missed before it listened).
func (f *Follower) connect(ctx context.Context) (*pgxpool.Conn, error) {
	actx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	pc, err := f.pool.Acquire(actx)
	if err != nil {
		return nil, err
	}
	if _, err = pc.Exec(actx, "LISTEN "+Channel); err == nil {
		err = f.fullLoad(ctx)
	}
	if err != nil {
		_ = pc.Conn().Close(context.Background())
		pc.Release()
		return nil, err
	}
	return pc, nil
}

// follow applies notifications as they come on conn, with a full reload
// every Refresh and a ping every Heartbeat, until conn fails.
func (f *Follower) follow(ctx context.Context, conn *pgx.Conn) error {
	next := time.Now().Add(f.cfg.Refresh)
	for {
		wait := min(f.cfg.Heartbeat, time.Until(next))
		wctx, cancel := context.WithTimeout(ctx, max(wait, time.Millisecond))
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case err == nil:
			if err := f.batch(ctx, conn, n.Payload); err != nil {
				return err
			}
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			if !time.Now().Before(next) {
				if err := f.fullLoad(ctx); err != nil {
					return err
				}
				next = time.Now().Add(f.cfg.Refresh)
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
			f.synced.Store(time.Now().UnixNano())
		default:
			return err
		}
	}
}

// batch applies the first notification's change and those already
// queued behind it: the entries are re-read, written to the snapshot's
// journal, then installed.
func (f *Follower) batch(ctx context.Context, conn *pgx.Conn, first string) error {
	seen := map[string]bool{first: true}
	order := []string{first}
	for len(order) <= maxBatch {
		wctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed() {
				break
			}
			return err
		}
		if !seen[n.Payload] {
			seen[n.Payload] = true
			order = append(order, n.Payload)
		}
	}
	full := len(order) > maxBatch
	for _, p := range order {
		full = full || strings.HasPrefix(p, "plan:")
	}
	if full {
		f.changes.Add(int64(len(order)))
		return f.fullLoad(ctx)
	}
	changes := make([]change, 0, len(order))
	for _, p := range order {
		c, err := f.read(ctx, p)
		if err != nil {
			return err
		}
		if c != nil {
			changes = append(changes, *c)
		}
	}
	f.record(changes)
	for _, c := range changes {
		f.installChange(c)
	}
	f.changes.Add(int64(len(order)))
	f.unread.Store(sum(f.bad))
	f.synced.Store(time.Now().UnixNano())
	return nil
}

// A change is one entry as a notification's re-read found it.
type change struct {
	entry  string // as the notification names it: "tenant:<name>", "key:<hash>"
	tenant string
	tp     *limits.TenantPlan // nil: the tenant is gone
	hash   *apikey.Hash       // a key's change, else nil
	key    *apikey.Identity   // nil: the key is gone or revoked
	bad    error              // why a key's row cannot be a key (then key is nil)
	at     time.Time          // when it was re-read
}

// to applies c to d.
func (c *change) to(d *directory.Data) {
	if d.Keys == nil {
		d.Keys = map[apikey.Hash]apikey.Identity{}
	}
	if d.Plans.Tenants == nil {
		d.Plans.Tenants = map[string]limits.TenantPlan{}
	}
	switch {
	case c.hash != nil && c.key == nil:
		delete(d.Keys, *c.hash)
	case c.hash != nil:
		d.Keys[*c.hash] = *c.key
	case c.tp == nil:
		delete(d.Plans.Tenants, c.tenant)
	default:
		d.Plans.Tenants[c.tenant] = *c.tp
	}
}

// read re-reads the entry a notification names: nil for a notification
// that names none. Only a database error is returned.
func (f *Follower) read(ctx context.Context, payload string) (*change, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	kind, name, _ := strings.Cut(payload, ":")
	switch kind {
	case "tenant":
		tp, err := loadTenant(ctx, f.pool, name)
		if err != nil {
			return nil, err
		}
		return &change{entry: payload, tenant: name, tp: tp, at: time.Now().UTC()}, nil
	case "key":
		h, err := apikey.ParseHash(name)
		if err != nil {
			f.log.Warn("directory notification ignored", "problem", "malformed key hash")
			return nil, nil
		}
		c := &change{entry: payload, hash: &h, at: time.Now().UTC()}
		c.key, err = loadKey(ctx, f.pool, name)
		if errors.Is(err, errBadKey) {
			c.bad, err = err, nil
		}
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	f.log.Warn("directory notification ignored", "problem", "unknown kind")
	return nil, nil
}

// installChange installs a change read. An entry that does not validate is
// logged and counted (by the directory), and the old one kept (a key's
// bad row removes the key, and is counted here).
func (f *Follower) installChange(c change) {
	var err error
	if c.hash != nil {
		err = f.dir.SetKey(*c.hash, c.key)
		// The paths a full load reports this key's problems under.
		delete(f.bad, "keys."+c.hash.ID())
		if c.key != nil {
			delete(f.bad, "keys."+c.key.KeyID)
		}
		delete(f.bad, c.entry)
		if c.bad != nil {
			f.bad[c.entry] = 1
		}
		err = errors.Join(c.bad, err)
	} else {
		err = f.dir.SetTenant(c.tenant, c.tp)
	}
	f.refusedEntries(err)
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// snapshot is the file format of the snapshot.
type snapshot struct {
	Version int                                   `json:"version"`
	Written time.Time                             `json:"written"`
	Default string                                `json:"default_plan,omitempty"`
	Plans   map[string]map[string]limits.Override `json:"plans"`
	Tenants map[string]limits.TenantPlan          `json:"tenants"`
	Keys    []snapshotKey                         `json:"keys"`
	Data    *directory.Data                       `json:"-"`
	// Current is when the directory read was last known current with the
	// database: the latest of Written and the times of its journal.
	Current time.Time `json:"-"`
}

type snapshotKey struct {
	Hash   string `json:"hash"`
	KeyID  string `json:"id"`
	Tenant string `json:"tenant"`
	User   string `json:"user,omitempty"`
}

// maxSnapshot bounds the snapshot file read at start-up.
const maxSnapshot = 1 << 30

// writeSnapshot writes d to path atomically and durably (replaceFile),
// unless last holds the digest of the same directory, written before: a
// full refresh that changed nothing does not rewrite the file (its
// "written" time then says when this directory was first written). It
// returns the written time of the file written (zero when it was not).
// last, when not nil, is updated to the digest of what path now holds.
func writeSnapshot(path string, d *directory.Data, last *[sha256.Size]byte) (time.Time, error) {
	s := snapshot{Version: 1, Default: d.Plans.Default, Plans: d.Plans.Plans, Tenants: d.Plans.Tenants}
	s.Keys = make([]snapshotKey, 0, len(d.Keys))
	for h, k := range d.Keys {
		s.Keys = append(s.Keys, snapshotKey{Hash: h.String(), KeyID: k.KeyID, Tenant: k.Tenant, User: k.User})
	}
	// Keys in a fixed order (maps are encoded with sorted keys): the same
	// directory gives the same bytes.
	slices.SortFunc(s.Keys, func(a, b snapshotKey) int { return strings.Compare(a.Hash, b.Hash) })
	body, err := json.Marshal(&s)
	if err != nil {
		return time.Time{}, err
	}
	sum := sha256.Sum256(body)
	if last != nil && *last == sum {
		return time.Time{}, nil
	}
	s.Written = time.Now().UTC()
	if err := replaceFile(path, func(w io.Writer) error { return json.NewEncoder(w).Encode(&s) }); err != nil {
		return time.Time{}, err
	}
	if last != nil {
		*last = sum
	}
	return s.Written, nil
}

// replaceFile replaces the file at path with what write writes, atomically
// and durably: a temporary file flushed to disk, renamed over path, and the
// rename flushed, so that the caller acts on what the file says only once
// a crash cannot take it back.
func replaceFile(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), tmpPrefix(path)+"*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriter(tmp)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// tmpPrefix begins the names of the temporary files replaceFile writes
// path through.
func tmpPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

// removeLeftovers removes the temporary files of the snapshot at path and
// of its journal that a crash while writing them left behind (each as
// large as the directory).
func removeLeftovers(path string) error {
	entries, err := os.ReadDir(filepath.Dir(path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the snapshot's write says why
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, tmpPrefix(path)) || strings.HasPrefix(n, tmpPrefix(journalPath(path))) {
			errs = append(errs, os.Remove(filepath.Join(filepath.Dir(path), n)))
		}
	}
	return errors.Join(errs...)
}

// syncDir flushes a directory's entries (a rename in it) to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// readSnapshot reads the snapshot at path.
func readSnapshot(path string) (*snapshot, error) {
	if path == "" {
		return nil, errors.New("no snapshot configured")
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var s snapshot
	dec := json.NewDecoder(&limitedReader{r: fh, n: maxSnapshot})
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("snapshot %s: version %d (this build reads 1)", path, s.Version)
	}
	if s.Tenants == nil {
		s.Tenants = map[string]limits.TenantPlan{}
	}
	s.Data = &directory.Data{Plans: limits.Plans{Default: s.Default, Plans: s.Plans, Tenants: s.Tenants}, Keys: make(map[apikey.Hash]apikey.Identity, len(s.Keys))}
	for _, k := range s.Keys {
		if err := k.to(s.Data); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", path, err)
		}
	}
	s.Current = s.Written
	if err := replay(journalPath(path), &s); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return &s, nil
}

// to adds k to d.
func (k *snapshotKey) to(d *directory.Data) error {
	h, err := apikey.ParseHash(k.Hash)
	if err != nil || !config.ValidKeyID(k.KeyID) || !config.ValidUser(k.User) {
		return fmt.Errorf("key %q is malformed", k.KeyID)
	}
	d.Keys[h] = apikey.Identity{Tenant: k.Tenant, KeyID: k.KeyID, User: k.User}
	return nil
}

// limitedReader fails past n bytes instead of truncating silently.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("too large")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// instruments registers the directory's metrics.
func (f *Follower) instruments(m metric.Meter) error {
	age, err1 := m.Float64ObservableGauge("sluice.directory.age", metric.WithUnit("s"),
		metric.WithDescription("Seconds since the tenant directory was last known current with its database; grows during an outage."))
	outages, err2 := m.Int64ObservableCounter("sluice.directory.outages", metric.WithUnit("{outage}"),
		metric.WithDescription("Times the tenant directory's database became unreachable."))
	refused, err3 := m.Int64ObservableGauge("sluice.directory.refused", metric.WithUnit("{entry}"),
		metric.WithDescription("Problems of the directory entries refused and not installed, at the last full load or policy file reload and by the changes since (see the log for which)."))
	changes, err4 := m.Int64ObservableCounter("sluice.directory.changes", metric.WithUnit("{change}"),
		metric.WithDescription("Directory changes received from the database's notifications."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveFloat64(age, f.Age().Seconds())
		o.ObserveInt64(outages, f.outages.Load())
		o.ObserveInt64(refused, f.Refused())
		o.ObserveInt64(changes, f.changes.Load())
		return nil
	}, age, outages, refused, changes)
	f.reg = reg
	return err
}
