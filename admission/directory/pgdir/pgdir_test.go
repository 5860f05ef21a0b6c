package pgdir_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/directory/pgdir"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/pgtest"
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

func newReplica(t testing.TB, dsn string, opts pgdir.Options) *replica {
	t.Helper()
	f := parse(t)
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	keys := new(httpadmit.KeySet)
	mw, err := httpadmit.New(ctl, append(httpadmit.FileOptions(f), httpadmit.WithKeyLookup(keys))...)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	dir, err := directory.New(directory.Config{Next: mw, Controller: ctl, Keys: keys, Source: "postgres", Logger: opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Apply(f); err != nil {
		t.Fatal(err)
	}
	fol, err := pgdir.Open(context.Background(), dsn, dir, opts)
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

// waitFor polls cond every millisecond until it holds or d passes, and
// returns how long it took.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

func TestMigrateTwice(t *testing.T) {
	conn := pgtest.Conn(t, pgtest.DB(t))
	ctx := context.Background()
	first, err := pgdir.Migrate(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != len(pgdir.Migrations()) || first[0] != 1 {
		t.Errorf("first Migrate applied %v; want every version from 1", first)
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
	r := newReplica(t, dsn, pgdir.Options{})
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
