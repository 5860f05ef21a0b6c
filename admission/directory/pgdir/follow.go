package pgdir

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/limits"
	"go.opentelemetry.io/otel/metric"
)

// Options configure Open.
type Options struct {
	// Refresh is the period of the full reload behind the notifications;
	// zero means config.DefaultRefresh (60s).
	Refresh time.Duration
	// Heartbeat is how often the listening connection is checked while
	// no change arrives; zero means 5s. The directory's age stays under
	// it while the database answers.
	Heartbeat time.Duration
	// Snapshot is the file the last good directory is written to after
	// a full load or changes that altered it (an unchanged directory is
	// not written again), and read at start-up when the database cannot
	// be reached; empty means none.
	Snapshot string
	// Timeout bounds each database call (connect, load, re-read); zero
	// means 10s.
	Timeout time.Duration
	// Logger logs outages, recoveries and refused entries; nil means
	// slog.Default().
	Logger *slog.Logger
	// Meter creates the directory's instruments (age, outages, refused
	// entries, changes); nil means none.
	Meter metric.Meter
	// Tracer, when set, sees every statement the directory sends.
	Tracer pgx.QueryTracer
}

// A Follower keeps a directory.Directory current from PostgreSQL until
// Close.
type Follower struct {
	pool *pgxpool.Pool
	dir  *directory.Directory
	opts Options
	log  *slog.Logger

	synced  atomic.Int64 // unix nanoseconds when the directory was last known current
	outages atomic.Int64
	refused atomic.Int64 // entries refused at the last full load
	changes atomic.Int64
	down    atomic.Bool
	dirty   bool              // changes applied since the last snapshot; run's goroutine only
	written [sha256.Size]byte // digest of the directory the snapshot holds; run's goroutine only

	stop context.CancelFunc
	done chan struct{}
	reg  metric.Registration
}

// Open connects to the database at dsn, loads the whole directory into
// dir (after dir.Apply of the policy file) and follows its changes until
// Close. When the database cannot be reached it starts from the snapshot
// file if one is configured and readable, and keeps trying; without one it
// fails with a message saying so.
func Open(ctx context.Context, dsn string, dir *directory.Directory, opts Options) (*Follower, error) {
	if opts.Refresh <= 0 {
		opts.Refresh = config.DefaultRefresh
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgdir: the directory's connection string: %w", err)
	}
	pc.MaxConns = 4
	pc.ConnConfig.Tracer = opts.Tracer
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > opts.Timeout {
		pc.ConnConfig.ConnectTimeout = opts.Timeout
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("pgdir: %w", err)
	}
	f := &Follower{pool: pool, dir: dir, opts: opts, log: opts.Logger, done: make(chan struct{})}
	if f.log == nil {
		f.log = slog.Default()
	}
	conn, err := f.connect(ctx)
	if err != nil {
		snap, serr := readSnapshot(opts.Snapshot)
		if serr != nil {
			pool.Close()
			if opts.Snapshot == "" {
				return nil, fmt.Errorf("pgdir: the tenant directory cannot be loaded from PostgreSQL (%v), and no snapshot is configured (directory.snapshot): start the database, or configure a snapshot to start from the last good directory", err)
			}
			return nil, fmt.Errorf("pgdir: the tenant directory cannot be loaded from PostgreSQL (%v), nor from the snapshot: %v", err, serr)
		}
		f.outage(err)
		if ierr := dir.Install(snap.Data); ierr != nil && !errors.Is(ierr, directory.ErrRefused) {
			pool.Close()
			return nil, fmt.Errorf("pgdir: snapshot %s: %w", opts.Snapshot, ierr)
		}
		f.synced.Store(snap.Written.UnixNano())
		f.log.Warn("tenant directory started from its snapshot: PostgreSQL cannot be reached", "snapshot", opts.Snapshot, "written", snap.Written, "error", err)
	}
	if opts.Meter != nil {
		if err := f.instruments(opts.Meter); err != nil {
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

// Refused returns the entries refused at the last full load.
func (f *Follower) Refused() int64 { return f.refused.Load() }

// fullLoad reads the whole directory and installs it.
func (f *Follower) fullLoad(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	data, problems, err := Load(ctx, f.pool)
	if err != nil {
		return err
	}
	err = f.dir.Install(data)
	var refused config.Errors
	if err != nil {
		if !errors.Is(err, directory.ErrRefused) {
			return err
		}
		errors.As(err, &refused)
	}
	refused = append(refused, problems...)
	f.refused.Store(int64(len(refused)))
	f.refusedEntries(refused)
	f.synced.Store(time.Now().UnixNano())
	f.snapshot()
	return nil
}

// snapshot writes the directory to the snapshot file, if one is
// configured.
func (f *Follower) snapshot() {
	f.dirty = false
	if f.opts.Snapshot == "" {
		return
	}
	if err := writeSnapshot(f.opts.Snapshot, f.dir.Data(), &f.written); err != nil {
		f.log.Error("directory snapshot not written", "snapshot", f.opts.Snapshot, "error", err)
	}
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

func (f *Follower) recovered() {
	if f.down.CompareAndSwap(true, false) {
		f.log.Info("tenant directory database reachable again", "age", f.Age().Round(time.Millisecond))
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
		if conn == nil {
			conn, err = f.connect(ctx)
		}
		if conn != nil {
			f.recovered()
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
	actx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
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
	next := time.Now().Add(f.opts.Refresh)
	for {
		wait := min(f.opts.Heartbeat, time.Until(next))
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
				next = time.Now().Add(f.opts.Refresh)
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
			f.synced.Store(time.Now().UnixNano())
			if f.dirty {
				// Changes reach the snapshot within a heartbeat: a replica
				// started from it during an outage does not take back a
				// revoked key.
				f.snapshot()
			}
		default:
			return err
		}
	}
}

// batch applies the first notification's change and those already
// queued behind it.
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
	for _, p := range order {
		if err := f.apply(ctx, p); err != nil {
			return err
		}
		f.changes.Add(1)
	}
	f.dirty = true
	f.synced.Store(time.Now().UnixNano())
	return nil
}

// apply re-reads the entry a notification names and installs it. An
// entry that does not validate is logged and the old one kept; only a
// database error is returned.
func (f *Follower) apply(ctx context.Context, payload string) error {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	kind, name, _ := strings.Cut(payload, ":")
	switch kind {
	case "tenant":
		tp, err := loadTenant(ctx, f.pool, name)
		if err != nil {
			return err
		}
		f.refusedEntries(f.dir.SetTenant(name, tp))
	case "key":
		h, err := config.ParseKeyHash(name)
		if err != nil {
			f.log.Warn("directory notification ignored", "problem", "malformed key hash")
			return nil
		}
		k, err := loadKey(ctx, f.pool, name)
		if errors.Is(err, errBadKey) {
			f.log.Warn("directory entry refused", "problem", err.Error())
			k, err = nil, nil
		}
		if err != nil {
			return err
		}
		f.refusedEntries(f.dir.SetKey(h, k))
	default:
		f.log.Warn("directory notification ignored", "problem", "unknown kind")
	}
	return nil
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
}

type snapshotKey struct {
	Hash   string `json:"hash"`
	KeyID  string `json:"id"`
	Tenant string `json:"tenant"`
	User   string `json:"user,omitempty"`
}

// maxSnapshot bounds the snapshot file read at start-up.
const maxSnapshot = 1 << 30

// writeSnapshot writes d to path atomically (a temporary file renamed),
// unless last holds the digest of the same directory, written before: a
// full refresh that changed nothing does not rewrite the file (its
// "written" time then says when this directory was first written). last,
// when not nil, is updated to the digest of what path now holds.
func writeSnapshot(path string, d *directory.Data, last *[sha256.Size]byte) error {
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
		return err
	}
	sum := sha256.Sum256(body)
	if last != nil && *last == sum {
		return nil
	}
	s.Written = time.Now().UTC()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".directory-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := json.NewEncoder(tmp).Encode(&s); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if last != nil {
		*last = sum
	}
	return nil
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
	s.Data = &directory.Data{Plans: limits.Plans{Default: s.Default, Plans: s.Plans, Tenants: s.Tenants}, Keys: make(map[config.KeyHash]config.Key, len(s.Keys))}
	for _, k := range s.Keys {
		h, err := config.ParseKeyHash(k.Hash)
		if err != nil || !config.ValidKeyID(k.KeyID) || !config.ValidUser(k.User) {
			return nil, fmt.Errorf("snapshot %s: key %q is malformed", path, k.KeyID)
		}
		s.Data.Keys[h] = config.Key{Tenant: k.Tenant, KeyID: k.KeyID, User: k.User}
	}
	return &s, nil
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
		metric.WithDescription("Directory entries refused at the last full load (see the log for which)."))
	changes, err4 := m.Int64ObservableCounter("sluice.directory.changes", metric.WithUnit("{change}"),
		metric.WithDescription("Directory changes received from the database's notifications."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveFloat64(age, f.Age().Seconds())
		o.ObserveInt64(outages, f.outages.Load())
		o.ObserveInt64(refused, f.refused.Load())
		o.ObserveInt64(changes, f.changes.Load())
		return nil
	}, age, outages, refused, changes)
	f.reg = reg
	return err
}
