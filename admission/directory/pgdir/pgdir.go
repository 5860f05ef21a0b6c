// Package pgdir keeps a tenant directory in PostgreSQL: plans with their
// per-policy limits, tenants with their plan and own overrides, and API
// keys stored only as SHA-256 hashes. The schema ships as versioned SQL
// migrations (Migrate, `admitctl db migrate`), with triggers that announce
// every change on the channel sluice_directory. The writes (SetPlan,
// AddTenant, SetOverride...) refuse, before writing anything, an entry
// the gateways would refuse when reading it (config.CheckEntries, the
// check they apply), and the schema refuses plan and policy names the
// gateways would.
//
// A running program never queries the database on a request's path: Open
// loads the whole directory into a directory.Directory, and Follow keeps
// it current from the change notifications (one tenant or key re-read and
// swapped at a time, its partitions kept) and a periodic full refresh. A
// snapshot file holds the last good directory for a start-up while the
// database is down; at run time an outage keeps the last directory
// serving, is counted and logged, and ends by itself.
//
// The driver is github.com/jackc/pgx/v5.
//
// Operating it (the admitctl db commands, start-up without the database)
// is in docs/postgres.md in the repository, the figures measured in
// docs/benchmarks.md.
//
// Optional collaborators are options: WithLogger, WithMeterProvider,
// WithQueryTracer; see docs/concepts.md#constructors.
package pgdir

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/limits"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Channel is the notification channel of directory changes. Each
// statement announces the entries it changed, "tenant:<name>",
// "key:<hash>" or "plan:<name>" (a plan's change is re-read as a whole
// directory), or, when it changed more than 100 entries or ran in an
// import's transaction, the one payload "plan:*": the whole directory.
const Channel = "sluice_directory"

// MaxEntries bounds the rows read from each table: a directory larger than
// this is refused rather than exhausting memory.
const MaxEntries = 10_000_000

// A Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the schema's migrations in version order.
func Migrations() []Migration {
	names, _ := fs.Glob(migrations, "migrations/*.sql")
	sort.Strings(names)
	out := make([]Migration, 0, len(names))
	for _, n := range names {
		base := strings.TrimPrefix(n, "migrations/")
		v, _ := strconv.Atoi(base[:strings.IndexByte(base, '_')])
		sql, _ := migrations.ReadFile(n)
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(base, ".sql"), SQL: string(sql)})
	}
	return out
}

// Migrate applies the migrations the database lacks, each in one
// transaction with its record in sluice_schema_migrations, under a
// session advisory lock so that two replicas starting at once apply each
// once. It
// returns the versions it applied: none when the schema is current.
func Migrate(ctx context.Context, conn *pgx.Conn) ([]int, error) {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLock); err != nil {
		return nil, fmt.Errorf("pgdir: migrate: %w", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrationLock) //nolint:errcheck // the session's end releases it too
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS sluice_schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("pgdir: migrate: %w", err)
	}
	var applied []int
	for _, m := range Migrations() {
		done, err := migrateOne(ctx, conn, m)
		if err != nil {
			return applied, fmt.Errorf("pgdir: migration %s: %w", m.Name, err)
		}
		if done {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

// migrationLock is the advisory lock key of Migrate.
const migrationLock = 0x51_1ce_d1

func migrateOne(ctx context.Context, conn *pgx.Conn, m Migration) (bool, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM sluice_schema_migrations WHERE version = $1", m.Version).Scan(&n); err != nil {
		return false, err
	}
	if n > 0 {
		return false, nil
	}
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO sluice_schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// A Beginner starts transactions: a *pgx.Conn, a *pgxpool.Pool.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// A querier is a connection, a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// perMicros reads an interval as microseconds, clamped so that a huge
// interval reads as too long rather than failing the whole load.
const perMicros = `LEAST(GREATEST(COALESCE(EXTRACT(EPOCH FROM per) * 1000000, 0), -9e15), 9e15)::bigint`

// Load reads the whole directory in one consistent snapshot (a repeatable
// read transaction). Rows that cannot stand for an entry (a malformed
// hash, a key id or user out of bounds) are left out and returned as
// problems, each naming its row; the caller installs the rest. db is a
// *pgx.Conn or a *pgxpool.Pool.
func Load(ctx context.Context, db Beginner) (*directory.Data, config.Errors, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	return load(ctx, tx)
}

func load(ctx context.Context, q querier) (*directory.Data, config.Errors, error) {
	d := &directory.Data{
		Plans: limits.Plans{Plans: map[string]map[string]limits.Override{}, Tenants: map[string]limits.TenantPlan{}},
		Keys:  map[apikey.Hash]apikey.Identity{},
	}
	var problems config.Errors
	bad := func(path, format string, args ...any) {
		problems = append(problems, &config.Error{File: "postgres", Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	err := each(ctx, q, "SELECT name, is_default FROM sluice_plans", func(rows pgx.Rows) error {
		var name string
		var dflt bool
		if err := rows.Scan(&name, &dflt); err != nil {
			return err
		}
		d.Plans.Plans[name] = map[string]limits.Override{}
		if dflt {
			d.Plans.Default = name
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = each(ctx, q, `SELECT plan, policy, COALESCE("limit", 0), COALESCE(burst, 0), `+perMicros+` FROM sluice_plan_limits`, func(rows pgx.Rows) error {
		var plan, pol string
		var o limits.Override
		if err := scanOverride(rows, &plan, &pol, &o); err != nil {
			return err
		}
		if os, ok := d.Plans.Plans[plan]; ok {
			os[pol] = o
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = each(ctx, q, "SELECT name, COALESCE(plan, '') FROM sluice_tenants", func(rows pgx.Rows) error {
		var name, plan string
		if err := rows.Scan(&name, &plan); err != nil {
			return err
		}
		d.Plans.Tenants[name] = limits.TenantPlan{Plan: plan}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = each(ctx, q, `SELECT tenant, policy, COALESCE("limit", 0), COALESCE(burst, 0), `+perMicros+` FROM sluice_tenant_overrides`, func(rows pgx.Rows) error {
		var tenant, pol string
		var o limits.Override
		if err := scanOverride(rows, &tenant, &pol, &o); err != nil {
			return err
		}
		tp, ok := d.Plans.Tenants[tenant]
		if !ok {
			return nil
		}
		if tp.Overrides == nil {
			tp.Overrides = map[string]limits.Override{}
		}
		tp.Overrides[pol] = o
		d.Plans.Tenants[tenant] = tp
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = each(ctx, q, "SELECT hash, key_id, tenant, end_user FROM sluice_keys WHERE revoked_at IS NULL", func(rows pgx.Rows) error {
		h, k, msg, err := scanKey(rows)
		if err != nil {
			return err
		}
		if msg != "" {
			bad("keys."+k.KeyID, "%s", msg)
			return nil
		}
		d.Keys[h] = k
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return d, problems, nil
}

// each runs a query and calls fn for each row, at most MaxEntries.
func each(ctx context.Context, q querier, sql string, fn func(pgx.Rows) error) error {
	rows, err := q.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		if n++; n > MaxEntries {
			return fmt.Errorf("pgdir: more than %d rows in %q", MaxEntries, sql)
		}
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func scanOverride(rows pgx.Rows, owner, pol *string, o *limits.Override) error {
	var us int64
	if err := rows.Scan(owner, pol, &o.Limit, &o.Burst, &us); err != nil {
		return err
	}
	o.Per = time.Duration(us) * time.Microsecond
	return nil
}

// scanKey reads a key row; msg says why the row cannot be a key.
func scanKey(rows pgx.Rows) (apikey.Hash, apikey.Identity, string, error) {
	var hash string
	var k apikey.Identity
	if err := rows.Scan(&hash, &k.KeyID, &k.Tenant, &k.User); err != nil {
		return apikey.Hash{}, k, "", err
	}
	h, err := apikey.ParseHash(hash)
	switch {
	case !config.ValidKeyID(k.KeyID):
		id := k.KeyID
		k.KeyID = h.ID()
		return h, k, fmt.Sprintf("%q is not a valid key id", id), nil
	case err != nil:
		return h, k, "hash " + err.Error(), nil
	case !config.ValidUser(k.User):
		return h, k, "the user is not 0 to 128 printable characters", nil
	case !config.ValidTenant(k.Tenant):
		return h, k, "the tenant's name is not 1 to 128 printable characters", nil
	}
	return h, k, "", nil
}

// loadTenant reads one tenant: nil when it is gone.
func loadTenant(ctx context.Context, q querier, name string) (*limits.TenantPlan, error) {
	var tp *limits.TenantPlan
	rows, err := q.Query(ctx, "SELECT COALESCE(plan, '') FROM sluice_tenants WHERE name = $1", name)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		tp = &limits.TenantPlan{}
		if err := rows.Scan(&tp.Plan); err != nil {
			rows.Close()
			return nil, err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || tp == nil {
		return nil, err
	}
	rows, err = q.Query(ctx, `SELECT tenant, policy, COALESCE("limit", 0), COALESCE(burst, 0), `+perMicros+` FROM sluice_tenant_overrides WHERE tenant = $1`, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var tenant, pol string
		var o limits.Override
		if err := scanOverride(rows, &tenant, &pol, &o); err != nil {
			return nil, err
		}
		if tp.Overrides == nil {
			tp.Overrides = map[string]limits.Override{}
		}
		tp.Overrides[pol] = o
	}
	return tp, rows.Err()
}

// errBadKey is returned by loadKey for a row that cannot be a key.
var errBadKey = errors.New("pgdir: bad key row")

// loadKey reads one live key by its stored hash: nil when it is gone or
// revoked.
func loadKey(ctx context.Context, q querier, hash string) (*apikey.Identity, error) {
	rows, err := q.Query(ctx, "SELECT hash, key_id, tenant, end_user FROM sluice_keys WHERE hash = $1 AND revoked_at IS NULL", hash)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out *apikey.Identity
	for rows.Next() {
		_, k, msg, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		if msg != "" {
			return nil, fmt.Errorf("%w: keys.%s: %s", errBadKey, k.KeyID, msg)
		}
		out = &k
	}
	return out, rows.Err()
}
