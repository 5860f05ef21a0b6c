package pgdir_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/directory/pgdir"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/syncbuf"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/shadow/status"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const policyFile = `policies:
  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: 5, per: 1m}
  - {name: inflight, key: [tenant], algorithm: concurrency, limit: 8}
identity: {anonymous: deny}
directory: {source: postgres}
`

func parse(t testing.TB) *config.File {
	t.Helper()
	f, err := config.Parse("policies.yaml", []byte(policyFile))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// migrated returns a new database with the schema.
func migrated(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn := pgtest.Conn(t, dsn)
	if _, err := pgdir.Migrate(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	return conn
}

// replica is one program serving from the directory: a controller, the
// HTTP middleware and the directory following the database.
type replica struct {
	ctl *admission.Controller
	dir *directory.Directory
	fol *pgdir.Follower
	h   http.Handler
}

func newReplica(t testing.TB, dsn string, cfg pgdir.Config, log *slog.Logger, opts ...pgdir.Option) *replica {
	t.Helper()
	f := parse(t)
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmitfile.Options(f)...)
	if err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := directory.New(httpadmitfile.Middleware{Middleware: mw}, directory.Config{Source: "postgres"}, directory.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Apply(f); err != nil {
		t.Fatal(err)
	}
	fol, err := pgdir.Open(context.Background(), dsn, dir, cfg, append([]pgdir.Option{pgdir.WithLogger(log)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fol.Close)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	return &replica{ctl: ctl, dir: dir, fol: fol, h: mw.Handler(ok)}
}

var quota = regexp.MustCompile(`"rpm";q=(\d+)`)

// call sends one request with key and returns its status and the rpm
// limit its RateLimit-Policy header announces (0 without one).
func (r *replica) call(key string) (int, int64) {
	req := httptest.NewRequest(http.MethodGet, "/v1/x", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	r.h.ServeHTTP(w, req)
	var q int64
	if m := quota.FindStringSubmatch(w.Header().Get("RateLimit-Policy")); m != nil {
		q, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return w.Code, q
}

// waitFor waits until cond holds, with no deadline (package poll),
// logging every d that it still waits, and returns how long it took.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return poll.Until(t, d, what, cond)
}

// TestMigrateTwice migrates from two connections at once, then again:
// every migration is applied once, by one of the two.
func TestMigrateTwice(t *testing.T) {
	dsn := pgtest.DB(t)
	conn, other := pgtest.Conn(t, dsn), pgtest.Conn(t, dsn)
	ctx := context.Background()
	results := make(chan []int, 1)
	go func() {
		applied, err := pgdir.Migrate(ctx, other)
		if err != nil {
			t.Error(err)
		}
		results <- applied
	}()
	first, err := pgdir.Migrate(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	first = append(first, <-results...)
	if len(first) != len(pgdir.Migrations()) || first[0] != 1 {
		t.Errorf("two concurrent Migrate applied %v; want every version once, from 1", first)
	}
	again, err := pgdir.Migrate(ctx, conn)
	if err != nil || len(again) != 0 {
		t.Errorf("second Migrate = %v, %v; want nothing applied", again, err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM sluice_schema_migrations").Scan(&n); err != nil || n != len(first) {
		t.Errorf("recorded migrations = %d, %v; want %d", n, err, len(first))
	}
}

// seed makes plans basic (default, 10/min) and pro (100/min), tenant acme
// on basic with a key, and returns the key.
func seed(t testing.TB, conn *pgx.Conn) string {
	t.Helper()
	ctx := context.Background()
	if err := pgdir.SetPlan(ctx, conn, "basic", map[string]limits.Override{"rpm": {Limit: 10}}, true); err != nil {
		t.Fatal(err)
	}
	if err := pgdir.SetPlan(ctx, conn, "pro", map[string]limits.Override{"rpm": {Limit: 100}}, false); err != nil {
		t.Fatal(err)
	}
	if err := pgdir.AddTenant(ctx, conn, "acme", "basic"); err != nil {
		t.Fatal(err)
	}
	key, _, err := pgdir.CreateKey(ctx, conn, "acme", "acme-1", "")
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestLoadAndUpgrade loads a directory, then upgrades the tenant's plan
// with one statement: the next request has the new limit and the
// partition keeps its count.
func TestLoadAndUpgrade(t *testing.T) {
	dsn := pgtest.DB(t)
	conn := migrated(t, dsn)
	key := seed(t, conn)
	r := newReplica(t, dsn, pgdir.Config{}, nil)
	for i := range 3 {
		if code, q := r.call(key); code != http.StatusOK || q != 10 {
			t.Fatalf("request %d: status %d, rpm quota %d; want 200, 10", i, code, q)
		}
	}
	if code, _ := r.call("sk-unknown"); code != http.StatusUnauthorized {
		t.Errorf("unknown key: status %d; want 401", code)
	}
	if err := pgdir.SetTenantPlan(context.Background(), conn, "acme", "pro"); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, 2*time.Second, "upgrade seen", func() bool { return limitOf(r, "acme") == 100 })
	t.Logf("plan upgrade applied after %v", took)
	// The partition kept the 3 requests above and the probe that saw the
	// new limit: a fresh one would have 99 left after this request.
	code, q := r.call(key)
	tk, err := r.ctl.TryAdmit(context.Background(), admission.Request{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	st := tk.Statuses(nil)[0]
	tk.Done()
	if code != http.StatusOK || q != 100 || st.Limit != 100 || st.Remaining > 100-6 {
		t.Errorf("after the upgrade: status %d, quota %d, limit %d, remaining %d; want 200, 100, 100, at most 94", code, q, st.Limit, st.Remaining)
	}
}

// limitOf admits one request of tenant directly and returns the rpm
// limit it was decided by, admitted or refused.
func limitOf(r *replica, tenant string) int64 {
	tk, err := r.ctl.TryAdmit(context.Background(), admission.Request{Tenant: tenant})
	var rej *admission.Rejection
	if errors.As(err, &rej) {
		return rej.Status.Limit
	}
	if err != nil {
		return 0
	}
	defer tk.Done()
	return tk.Statuses(nil)[0].Limit
}

// TestRevocationOnTwoReplicas revokes a key with one statement while two
// replicas listen: both refuse it within a second (measured), and both see
// a plan's new limits.
func TestRevocationOnTwoReplicas(t *testing.T) {
	dsn := pgtest.DB(t)
	conn := migrated(t, dsn)
	key := seed(t, conn)
	a, b := newReplica(t, dsn, pgdir.Config{}, nil), newReplica(t, dsn, pgdir.Config{}, nil)
	for _, r := range []*replica{a, b} {
		if code, _ := r.call(key); code != http.StatusOK {
			t.Fatalf("before revocation: status %d; want 200", code)
		}
	}
	start := time.Now()
	if err := pgdir.RevokeKey(context.Background(), conn, "acme-1"); err != nil {
		t.Fatal(err)
	}
	for i, r := range []*replica{a, b} {
		waitFor(t, time.Second, "revocation", func() bool { code, _ := r.call(key); return code == http.StatusUnauthorized })
		t.Logf("replica %d refuses the revoked key %v after the revocation", i, time.Since(start))
	}
	if err := pgdir.RevokeKey(context.Background(), conn, "acme-1"); !errors.Is(err, pgdir.ErrNotFound) {
		t.Errorf("revoking twice = %v; want ErrNotFound", err)
	}
	// A plan's limits change: a full reload on both.
	if err := pgdir.SetPlan(context.Background(), conn, "basic", map[string]limits.Override{"rpm": {Limit: 42}}, false); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*replica{a, b} {
		waitFor(t, 2*time.Second, "plan change", func() bool { return limitOf(r, "acme") == 42 })
		waitFor(t, 2*time.Second, "default plan change", func() bool { return limitOf(r, "someone-unlisted") == 42 })
	}
}

// TestBadRows refuses the rows that do not validate against the policy
// file, each reported by its key, and loads the rest.
func TestBadRows(t *testing.T) {
	dsn := pgtest.DB(t)
	conn := migrated(t, dsn)
	key := seed(t, conn)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO sluice_plan_limits (plan, policy, "limit") VALUES ('pro', 'nope', 5)`,
		`INSERT INTO sluice_plan_limits (plan, policy, burst) VALUES ('basic', 'inflight', 3)`,
		`INSERT INTO sluice_tenants (name, plan) VALUES ('neg', 'pro')`,
		`INSERT INTO sluice_tenant_overrides (tenant, policy, "limit") VALUES ('neg', 'rpm', -4)`,
		`INSERT INTO sluice_tenants (name) VALUES ('anonymous')`,
		`INSERT INTO sluice_keys (hash, key_id, tenant) VALUES ('sha256:` + zeros + `', 'bad id!', 'acme')`,
		"INSERT INTO sluice_tenants (name) VALUES (E'evil\\n')",
		"INSERT INTO sluice_keys (hash, key_id, tenant) VALUES ('sha256:" + strings.Repeat("1", 64) + "', 'evil-1', E'evil\\n')",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var log syncbuf.Buffer
	r := newReplica(t, dsn, pgdir.Config{}, slog.New(slog.NewTextHandler(&log, nil)))
	if code, q := r.call(key); code != http.StatusOK || q != 10 {
		t.Errorf("the good rows: status %d, quota %d; want 200, 10", code, q)
	}
	if got := limitOf(r, "neg"); got != 100 {
		t.Errorf("tenant neg: limit %d; want 100 (its plan; its bad override refused)", got)
	}
	if got := r.fol.Refused(); got != 7 {
		t.Errorf("Refused() = %d; want 7", got)
	}
	for _, want := range []string{
		`entry=plans.pro.nope problem="no such policy \"nope\""`,
		`entry=plans.basic.inflight.burst problem="only a token_bucket has a burst"`,
		`entry=tenants.neg.overrides.rpm.limit problem="must be > 0, got -4"`,
		`entry=tenants.anonymous problem="\"anonymous\" is the anonymous tenant`,
		`entry=keys.key_000000000000 problem="\"bad id!\" is not a valid key id"`,
		`entry="tenants.evil\n" problem="\"evil\\n\" is not a valid tenant name`,
		`entry=keys.evil-1 problem="the tenant's name is not 1 to 128 printable characters"`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, log.String())
		}
	}
	// A bad change is refused too, and the tenant keeps what it had.
	if err := pgdir.SetOverride(ctx, conn, "acme", "inflight", limits.Override{Burst: 2}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Log(log.String())
		}
	}()
	waitFor(t, 2*time.Second, "refusal logged", func() bool {
		return strings.Contains(log.String(), `entry=tenants.acme.overrides.inflight.burst problem="only a token_bucket has a burst"`)
	})
	if got := limitOf(r, "acme"); got != 10 {
		t.Errorf("after a refused change: limit %d; want 10", got)
	}
}

var zeros = strings.Repeat("0", 64)

// countingTracer counts the statements sent.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestNoQueryOnRequestPath counts the statements the directory sends
// during a burst of requests from many tenants and keys: none.
func TestNoQueryOnRequestPath(t *testing.T) {
	dsn := pgtest.DB(t)
	conn := migrated(t, dsn)
	seed(t, conn)
	ctx := context.Background()
	keys := make([]string, 50)
	for i := range keys {
		tenant := fmt.Sprintf("t%02d", i)
		if err := pgdir.AddTenant(ctx, conn, tenant, "pro"); err != nil {
			t.Fatal(err)
		}
		k, _, err := pgdir.CreateKey(ctx, conn, tenant, "", "")
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k
	}
	var tr countingTracer
	r := newReplica(t, dsn, pgdir.Config{Heartbeat: time.Minute}, nil, pgdir.WithQueryTracer(&tr))
	before := tr.n.Load()
	if before == 0 {
		t.Fatal("the tracer saw no statement at all: it does not count")
	}
	var wg sync.WaitGroup
	var ok atomic.Int64
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				if code, _ := r.call(keys[(i+g)%len(keys)]); code == http.StatusOK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 2000 {
		t.Errorf("admitted %d of 2000", ok.Load())
	}
	if n := tr.n.Load() - before; n != 0 {
		t.Errorf("statements during the burst = %d; want 0", n)
	}
}

// TestOutageAndSnapshot kills the database under a running replica: it
// keeps serving, counts the outage, exports a growing age and recovers by
// itself. While the database is down a new replica starts from the
// snapshot, and one without a snapshot fails saying so.
func TestOutageAndSnapshot(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDB(t)
	conn := migrated(t, dsn)
	key := seed(t, conn)
	snap := filepath.Join(t.TempDir(), "directory.json")
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := pgdir.Config{Snapshot: snap, Heartbeat: 50 * time.Millisecond, Timeout: time.Second}
	var log syncbuf.Buffer
	a := newReplica(t, dsn, pgdir.Config{Snapshot: snap, Heartbeat: 50 * time.Millisecond, Timeout: time.Second},
		slog.New(slog.NewJSONHandler(&log, nil)), pgdir.WithMeterProvider(prom.Provider))
	if _, err := os.Stat(snap); err != nil {
		t.Fatalf("snapshot after the load: %v", err)
	}
	srv.Kill()
	waitFor(t, 3*time.Second, "outage counted", func() bool { return a.fol.Outages() == 1 })
	if code, q := a.call(key); code != http.StatusOK || q != 10 {
		t.Errorf("during the outage: status %d, quota %d; want 200, 10", code, q)
	}
	waitFor(t, 3*time.Second, "age growing", func() bool { return a.fol.Age() > 300*time.Millisecond })
	if age := scrape(t, prom.Handler, "sluice_directory_age_seconds"); age < 0.3 {
		t.Errorf("sluice_directory_age_seconds = %v; want > 0.3 during the outage", age)
	}
	if n := scrape(t, prom.Handler, "sluice_directory_outages_total"); n != 1 {
		t.Errorf("sluice_directory_outages_total = %v; want 1", n)
	}

	b := newReplica(t, dsn, cfg, nil)
	if code, q := b.call(key); code != http.StatusOK || q != 10 {
		t.Errorf("replica started from the snapshot: status %d, quota %d; want 200, 10", code, q)
	}
	if code, _ := b.call("sk-unknown"); code != http.StatusUnauthorized {
		t.Errorf("replica started from the snapshot, unknown key: status %d; want 401", code)
	}
	f := parse(t)
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := directory.New(httpadmitfile.Middleware{Middleware: mw}, directory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Apply(f); err != nil {
		t.Fatal(err)
	}
	_, err = pgdir.Open(context.Background(), dsn, dir, pgdir.Config{Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "no snapshot is configured (directory.snapshot)") {
		t.Errorf("Open without database nor snapshot = %v; want the message naming directory.snapshot", err)
	}

	srv.Restart(t)
	for i, r := range []*replica{a, b} {
		waitFor(t, 10*time.Second, "recovery", func() bool { return r.fol.Age() < 200*time.Millisecond })
		t.Logf("replica %d recovered", i)
	}
	if err := pgdir.RevokeKey(context.Background(), pgtest.Conn(t, dsn), "acme-1"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*replica{a, b} {
		waitFor(t, time.Second, "revocation after recovery", func() bool { code, _ := r.call(key); return code == http.StatusUnauthorized })
	}
	if a.fol.Outages() != 1 {
		t.Errorf("Outages() = %d; want 1", a.fol.Outages())
	}
	// The recovery's line gives the directory's age when the database
	// answered again as a duration, at least the outage's 300ms.
	var line struct{ Age string }
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "reachable again") {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
		}
	}
	if age, err := time.ParseDuration(line.Age); err != nil || age < 300*time.Millisecond {
		t.Errorf("the recovery logs age %q (%v); want a duration of at least 300ms\n%s", line.Age, err, log.String())
	}
}

// scrape reads the value of one series from a Prometheus handler.
func scrape(t *testing.T, h http.Handler, name string) float64 {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no series %s in:\n%s", name, w.Body.String())
	return 0
}

// TestRefreshCatchesMissedChanges changes the database with the triggers
// off, as a notification lost would: the periodic full reload brings the
// change.
func TestRefreshCatchesMissedChanges(t *testing.T) {
	dsn := pgtest.DB(t)
	conn := migrated(t, dsn)
	seed(t, conn)
	r := newReplica(t, dsn, pgdir.Config{Refresh: 300 * time.Millisecond}, nil)
	ctx := context.Background()
	for _, q := range []string{
		"ALTER TABLE sluice_tenants DISABLE TRIGGER sluice_tenants_notify_update",
		"UPDATE sluice_tenants SET plan = 'pro' WHERE name = 'acme'",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	took := waitFor(t, 3*time.Second, "refresh", func() bool { return limitOf(r, "acme") == 100 })
	t.Logf("the missed change arrived with the full reload after %v", took)
}

// TestSnapshotFollowsChanges: a revocation reaches the snapshot's journal
// without a heartbeat, so a replica started from it during an outage
// refuses the key too; the next full load folds it into the snapshot and
// starts the journal afresh.
func TestSnapshotFollowsChanges(t *testing.T) {
	dsn := pgtest.DB(t)
	conn := migrated(t, dsn)
	key := seed(t, conn)
	snap := filepath.Join(t.TempDir(), "directory.json")
	newReplica(t, dsn, pgdir.Config{Snapshot: snap, Heartbeat: 50 * time.Millisecond, Refresh: time.Second}, nil)
	hash := apikey.Sum(key).String()
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if !strings.Contains(read(snap), hash) {
		t.Fatal("the live key is not in the snapshot")
	}
	if err := pgdir.RevokeKey(context.Background(), conn, "acme-1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "revocation in the journal", func() bool { return strings.Contains(read(snap+".changes"), `"gone_key":"`+hash+`"}`) })
	waitFor(t, 10*time.Second, "revocation in the snapshot", func() bool {
		return !strings.Contains(read(snap), hash) && strings.Count(read(snap+".changes"), "\n") == 1
	})
}

// TestRevocationSurvivesCrash revokes a key and kills the database (by
// its pid) as soon as a running replica refuses the key: a replica started
// from the snapshot's files as they were at that instant refuses it too.
// The revocation is on disk before the running replica acts on it,
// whatever the heartbeat.
func TestRevocationSurvivesCrash(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDB(t)
	conn := migrated(t, dsn)
	key := seed(t, conn)
	other, _, err := pgdir.CreateKey(context.Background(), conn, "acme", "acme-2", "")
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "directory.json")
	a := newReplica(t, dsn, pgdir.Config{Snapshot: snap, Heartbeat: time.Hour, Timeout: time.Second}, nil)
	if code, _ := a.call(key); code != http.StatusOK {
		t.Fatalf("before the revocation: status %d; want 200", code)
	}
	if err := pgdir.RevokeKey(context.Background(), conn, "acme-1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "revocation", func() bool { code, _ := a.call(key); return code == http.StatusUnauthorized })
	// The snapshot's files as a crash at this instant would leave them.
	crashed := filepath.Join(t.TempDir(), "directory.json")
	for _, suffix := range []string{"", ".changes"} {
		body, err := os.ReadFile(snap + suffix)
		if err == nil {
			err = os.WriteFile(crashed+suffix, body, 0o600)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	srv.Kill()
	b := newReplica(t, dsn, pgdir.Config{Snapshot: crashed, Timeout: time.Second}, nil)
	if code, _ := b.call(key); code != http.StatusUnauthorized {
		t.Errorf("replica started from the snapshot after the crash, revoked key: status %d; want 401", code)
	}
	if code, _ := b.call(other); code != http.StatusOK {
		t.Errorf("replica started from the snapshot after the crash, live key: status %d; want 200", code)
	}
}

// TestRefusedCountsChanges: an entry refused when its change arrives by
// notification is counted in sluice_directory_refused, and the count
// goes back down when a later change installs it.
func TestRefusedCountsChanges(t *testing.T) {
	dsn := pgtest.DB(t)
	conn := migrated(t, dsn)
	seed(t, conn)
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		t.Fatal(err)
	}
	r := newReplica(t, dsn, pgdir.Config{}, nil, pgdir.WithMeterProvider(prom.Provider))
	if n := scrape(t, prom.Handler, "sluice_directory_refused"); n != 0 {
		t.Fatalf("sluice_directory_refused = %v at the start; want 0", n)
	}
	ctx := context.Background()
	// inflight is a concurrency policy: it has no burst.
	if err := pgdir.SetOverride(ctx, conn, "acme", "inflight", limits.Override{Burst: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "refusal counted", func() bool { return r.fol.Refused() == 1 })
	if n := scrape(t, prom.Handler, "sluice_directory_refused"); n != 1 {
		t.Errorf("sluice_directory_refused = %v after a refused change; want 1", n)
	}
	if err := pgdir.SetOverride(ctx, conn, "acme", "inflight", limits.Override{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "refusal cleared", func() bool { return r.fol.Refused() == 0 })
	if n := scrape(t, prom.Handler, "sluice_directory_refused"); n != 0 {
		t.Errorf("sluice_directory_refused = %v after the entry was fixed; want 0", n)
	}
}

// TestReloadRefusalsReported reloads a policy file without a policy that
// entries of the database override: the reload is reported partial on
// the status page and in admission_reloads_total, and
// sluice_directory_refused counts the entries refused; the file
// restored installs them again and the count goes back to 0.
func TestReloadRefusalsReported(t *testing.T) {
	dsn := pgtest.DB(t)
	conn := migrated(t, dsn)
	seed(t, conn)
	ctx := context.Background()
	if err := pgdir.SetOverride(ctx, conn, "acme", "inflight", limits.Override{Limit: 4}); err != nil {
		t.Fatal(err)
	}
	if err := pgdir.SetPlan(ctx, conn, "pro", map[string]limits.Override{"inflight": {Limit: 6}}, false); err != nil {
		t.Fatal(err)
	}
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := metrics.New(metrics.WithMeterProvider(prom.Provider))
	if err != nil {
		t.Fatal(err)
	}
	page, err := status.NewPage(status.Config{Stats: func() []admission.PolicyStats { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	r := newReplica(t, dsn, pgdir.Config{}, nil, pgdir.WithMeterProvider(prom.Provider))
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(policyFile)
	w, err := reload.Watch(path, r.dir, reload.WithSignals(), reload.WithDebounce(time.Hour), reload.WithLogger(slog.New(slog.DiscardHandler)),
		reload.OnReload(func(rl reload.Event) {
			obs.CountReload(rl.Err)
			page.Reloaded(rl.Source, rl.Err)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if n := scrape(t, prom.Handler, "sluice_directory_refused"); n != 0 {
		t.Fatalf("sluice_directory_refused = %v at the start; want 0", n)
	}

	write(strings.Replace(policyFile, "  - {name: inflight, key: [tenant], algorithm: concurrency, limit: 8}\n", "", 1))
	if err := w.Reload(); err != nil {
		t.Fatalf("reload without inflight = %v; want it applied", err)
	}
	if n := scrape(t, prom.Handler, "sluice_directory_refused"); n != 2 {
		t.Errorf("sluice_directory_refused = %v after the reload; want 2 (acme's and pro's inflight)", n)
	}
	if n := reloads(t, prom.Handler, "partial"); n != 1 {
		t.Errorf(`admission_reloads_total{result="partial"} = %v; want 1`, n)
	}
	st := page.View().Reloads
	if len(st) == 0 || st[0].State != status.ReloadPartial || !st[0].OK ||
		st[0].Warning != `applied without the entries refused: 2 problems (postgres): plans.pro.inflight: no such policy "inflight"; tenants.acme.overrides.inflight: no such policy "inflight"` {
		t.Errorf("the status page's last reload: %+v; want partial, naming both entries", st)
	}

	write(policyFile)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := scrape(t, prom.Handler, "sluice_directory_refused"); n != 0 {
		t.Errorf("sluice_directory_refused = %v with the file restored; want 0", n)
	}
	if st := page.View().Reloads; st[0].State != status.ReloadApplied {
		t.Errorf("the status page's last reload: %+v; want applied", st[0])
	}
	if got := r.dir.Data().Plans.Tenants["acme"].Overrides["inflight"].Limit; got != 4 {
		t.Errorf("acme's inflight override with the file restored: %d; want 4", got)
	}
}

// reloads reads admission_reloads_total{result=result} from a Prometheus
// handler (0 when absent).
func reloads(t *testing.T, h http.Handler, result string) float64 {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if strings.HasPrefix(line, "admission_reloads_total{") && strings.Contains(line, `result="`+result+`"`) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}

// TestRevocationAcrossDroppedConnection revokes keys in the transaction
// that terminates every connection of the replica to the database (the
// listening one included), after gaps of several lengths: the reload
// after the reconnection brings each revocation, though its notification
// went to no listener.
func TestRevocationAcrossDroppedConnection(t *testing.T) {
	dsn := pgtest.DB(t)
	conn := migrated(t, dsn)
	seed(t, conn)
	r := newReplica(t, dsn, pgdir.Config{Heartbeat: time.Hour, Refresh: time.Hour, Timeout: 2 * time.Second}, nil)
	ctx := context.Background()
	live := func(key string) bool { _, ok := r.dir.Data().Keys[apikey.Sum(key)]; return ok }
	for i, gap := range []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond} {
		id := fmt.Sprintf("gap-%d", i)
		key, _, err := pgdir.CreateKey(ctx, conn, "acme", id, "")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Second, "key created", func() bool { return live(key) })
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"); err != nil {
				return err
			}
			time.Sleep(gap)
			return pgdir.RevokeKey(ctx, tx, id)
		})
		if err != nil {
			t.Fatal(err)
		}
		took := waitFor(t, time.Second, "revocation", func() bool { return !live(key) })
		t.Logf("gap %v: revoked key gone after %v", gap, took)
	}
	if n := r.fol.Outages(); n != 3 {
		t.Errorf("Outages() = %d; want 3", n)
	}
}
