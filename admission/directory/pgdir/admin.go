package pgdir

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/limits"
)

// An Execer runs statements: a *pgx.Conn, a pgx.Tx, a *pgxpool.Pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ErrNotFound is returned when the tenant, plan or key named does not
// exist.
var ErrNotFound = errors.New("not found")

// ErrInvalid is matched by the errors of the writes refused before
// anything is written: an entry the gateways would refuse when reading it
// (config.CheckEntries, the same check, whose problems the error holds
// with their paths), or a period finer than the database keeps.
var ErrInvalid = errors.New("refused, nothing written")

// check refuses the entries of pl that the gateways would refuse, or that
// the database cannot hold as given.
func check(pl limits.Plans) error {
	es := config.CheckEntries("postgres", &pl)
	fine := func(path string, os map[string]limits.Override) {
		for pol, o := range os {
			if o.Per%time.Microsecond != 0 {
				es = append(es, &config.Error{File: "postgres", Path: path + pol + ".per", Msg: fmt.Sprintf("%v is finer than the database keeps (whole microseconds)", o.Per)})
			}
		}
	}
	for plan, os := range pl.Plans {
		fine("plans."+plan+".", os)
	}
	for tenant, tp := range pl.Tenants {
		fine("tenants."+tenant+".overrides.", tp.Overrides)
	}
	if len(es) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", ErrInvalid, es)
}

// perArg is an Override's period as an interval argument (nil: none).
func perArg(d time.Duration) any {
	if d == 0 {
		return nil
	}
	return fmt.Sprintf("%d microseconds", d.Microseconds())
}

// nullable is an amount as an argument (nil: none).
func nullable(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

// AddTenant adds a tenant on plan (empty: the default plan), or moves an
// existing one to it.
func AddTenant(ctx context.Context, db Execer, tenant, plan string) error {
	if err := check(limits.Plans{Tenants: map[string]limits.TenantPlan{tenant: {Plan: plan}}}); err != nil {
		return err
	}
	var p any
	if plan != "" {
		p = plan
	}
	_, err := db.Exec(ctx, `INSERT INTO sluice_tenants (name, plan) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET plan = EXCLUDED.plan, updated_at = now()`, tenant, p)
	return notFound(err, "plan", plan)
}

// notFound returns err, or ErrNotFound naming what when err says a row
// refers to a missing one (a foreign key violation).
func notFound(err error, kind, name string) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" {
		return fmt.Errorf("%s %q: %w", kind, name, ErrNotFound)
	}
	return err
}

// SetTenantPlan moves an existing tenant to plan (empty: the default).
func SetTenantPlan(ctx context.Context, db Execer, tenant, plan string) error {
	if err := check(limits.Plans{Tenants: map[string]limits.TenantPlan{tenant: {Plan: plan}}}); err != nil {
		return err
	}
	var p any
	if plan != "" {
		p = plan
	}
	tag, err := db.Exec(ctx, "UPDATE sluice_tenants SET plan = $2, updated_at = now() WHERE name = $1", tenant, p)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("tenant %q: %w", tenant, ErrNotFound)
	}
	return notFound(err, "plan", plan)
}

// SetPlan creates a plan or changes its limits: each override replaces
// the plan's for its policy. dflt makes it the default plan. A plan or an
// override the gateways would refuse is refused (ErrInvalid).
func SetPlan(ctx context.Context, db Execer, plan string, overrides map[string]limits.Override, dflt bool) error {
	if err := check(limits.Plans{Plans: map[string]map[string]limits.Override{plan: overrides}}); err != nil {
		return err
	}
	if dflt {
		if _, err := db.Exec(ctx, "UPDATE sluice_plans SET is_default = false WHERE is_default AND name <> $1", plan); err != nil {
			return err
		}
	}
	_, err := db.Exec(ctx, `INSERT INTO sluice_plans (name, is_default) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET is_default = sluice_plans.is_default OR EXCLUDED.is_default, updated_at = now()`, plan, dflt)
	if err != nil {
		return err
	}
	for pol, o := range overrides {
		_, err := db.Exec(ctx, `INSERT INTO sluice_plan_limits (plan, policy, "limit", burst, per) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (plan, policy) DO UPDATE SET "limit" = EXCLUDED."limit", burst = EXCLUDED.burst, per = EXCLUDED.per`,
			plan, pol, nullable(o.Limit), nullable(o.Burst), perArg(o.Per))
		if err != nil {
			return err
		}
	}
	return nil
}

// SetDefaultPlan makes plan the default plan. A plan the database does
// not hold is refused (ErrNotFound) rather than created empty, which
// would move every tenant without a plan to the policies' own figures.
func SetDefaultPlan(ctx context.Context, db Execer, plan string) error {
	if err := check(limits.Plans{Plans: map[string]map[string]limits.Override{plan: nil}}); err != nil {
		return err
	}
	rows, err := db.Query(ctx, "SELECT name FROM sluice_plans WHERE name = $1", plan)
	if err != nil {
		return err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return fmt.Errorf("plan %q: %w", plan, ErrNotFound)
	}
	return SetPlan(ctx, db, plan, nil, true)
}

// SetOverride gives a tenant its own limits for one policy; a zero
// Override removes them (ErrNotFound when the tenant has none for that
// policy). An override the gateways would refuse is refused (ErrInvalid).
func SetOverride(ctx context.Context, db Execer, tenant, policy string, o limits.Override) error {
	if o == (limits.Override{}) {
		tag, err := db.Exec(ctx, "DELETE FROM sluice_tenant_overrides WHERE tenant = $1 AND policy = $2", tenant, policy)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("override of tenant %q for policy %q: %w", tenant, policy, ErrNotFound)
		}
		return err
	}
	if err := check(limits.Plans{Tenants: map[string]limits.TenantPlan{tenant: {Overrides: map[string]limits.Override{policy: o}}}}); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `INSERT INTO sluice_tenant_overrides (tenant, policy, "limit", burst, per) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (tenant, policy) DO UPDATE SET "limit" = EXCLUDED."limit", burst = EXCLUDED.burst, per = EXCLUDED.per`,
		tenant, policy, nullable(o.Limit), nullable(o.Burst), perArg(o.Per))
	return notFound(err, "tenant", tenant)
}

// CreateKey makes a new API key for tenant and stores its hash only; the
// key itself is returned, to be shown once. An empty keyID means the
// hash-derived id (KeyHash.ID).
func CreateKey(ctx context.Context, db Execer, tenant, keyID, user string) (key string, id string, err error) {
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", err
	}
	key = "sk-sluice-" + base64.RawURLEncoding.EncodeToString(raw[:])
	h := apikey.Sum(key)
	if keyID == "" {
		keyID = h.ID()
	}
	if err := PutKey(ctx, db, h, apikey.Identity{Tenant: tenant, KeyID: keyID, User: user}); err != nil {
		return "", "", err
	}
	return key, keyID, nil
}

// PutKey stores a key's hash for its tenant (an import).
func PutKey(ctx context.Context, db Execer, h apikey.Hash, k apikey.Identity) error {
	if err := keyError(k); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `INSERT INTO sluice_keys (hash, key_id, tenant, end_user) VALUES ($1, $2, $3, $4)
		ON CONFLICT (hash) DO UPDATE SET key_id = EXCLUDED.key_id, tenant = EXCLUDED.tenant, end_user = EXCLUDED.end_user`,
		h.String(), k.KeyID, k.Tenant, k.User)
	return notFound(err, "tenant", k.Tenant)
}

// keyError says why k's id or user cannot be stored (nil: they can).
func keyError(k apikey.Identity) error {
	if !config.ValidKeyID(k.KeyID) {
		return fmt.Errorf("%q is not a valid key id", k.KeyID)
	}
	if !config.ValidUser(k.User) {
		return errors.New("the user must be at most 128 printable characters")
	}
	return nil
}

// RevokeKey revokes a key by its id: every replica listening refuses it
// within a second.
func RevokeKey(ctx context.Context, db Execer, keyID string) error {
	tag, err := db.Exec(ctx, "UPDATE sluice_keys SET revoked_at = now() WHERE key_id = $1 AND revoked_at IS NULL", keyID)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("live key %q: %w", keyID, ErrNotFound)
	}
	return err
}

// A TenantRow is one tenant as List shows it.
type TenantRow struct {
	Name      string
	Plan      string // empty: the default plan
	Overrides int    // policies with the tenant's own limits
	Keys      int    // live keys
}

// ListTenants returns the tenants by name, at most limit (0: all).
func ListTenants(ctx context.Context, db Execer, limit int) ([]TenantRow, error) {
	var lim any
	if limit > 0 {
		lim = limit
	}
	rows, err := db.Query(ctx, `SELECT t.name, COALESCE(t.plan, ''),
		(SELECT count(*) FROM sluice_tenant_overrides o WHERE o.tenant = t.name),
		(SELECT count(*) FROM sluice_keys k WHERE k.tenant = t.name AND k.revoked_at IS NULL)
		FROM sluice_tenants t ORDER BY t.name LIMIT $1`, lim)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TenantRow, error) {
		var t TenantRow
		err := r.Scan(&t.Name, &t.Plan, &t.Overrides, &t.Keys)
		return t, err
	})
}

// Import writes a whole directory (a policy file's plans, tenants and
// keys) in one transaction: entries already present are updated, none is
// removed. Every entry is checked first, with the checks of the single
// writes (ErrInvalid holding every problem; a key's id and user as
// PutKey checks them), and nothing is written unless all pass. A tenant's
// zero Override removes its own limits for that policy, as SetOverride
// does; a key's tenant missing from the tenants is added on the default
// plan, as AddTenant does. Tenants, overrides and keys are written with
// one statement per table, so that a directory of 100,000 tenants
// imports in seconds, and the import is announced with one notification
// ("plan:*", sent at the commit), which has each listening replica
// reload the whole directory once.
func Import(ctx context.Context, conn *pgx.Conn, d *directory.Data) error {
	r, err := importRows(d)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// The triggers (migration 0003) then announce every statement of
		// the transaction with the same payload, which PostgreSQL sends once.
		if _, err := tx.Exec(ctx, "SELECT set_config('sluice.notify', 'all', true)"); err != nil {
			return err
		}
		for plan, os := range d.Plans.Plans {
			if err := SetPlan(ctx, tx, plan, os, plan == d.Plans.Default); err != nil {
				return fmt.Errorf("plan %q: %w", plan, err)
			}
		}
		if err := r.plansExist(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO sluice_tenants (name, plan) SELECT * FROM unnest($1::text[], $2::text[])
			ON CONFLICT (name) DO UPDATE SET plan = EXCLUDED.plan, updated_at = now()`, r.tenants, r.plans); err != nil {
			return detailed("tenants", err)
		}
		if len(r.cleared.tenants) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM sluice_tenant_overrides o USING unnest($1::text[], $2::text[]) AS c (tenant, policy)
				WHERE o.tenant = c.tenant AND o.policy = c.policy`, r.cleared.tenants, r.cleared.policies); err != nil {
				return detailed("tenant overrides", err)
			}
		}
		if len(r.set.tenants) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO sluice_tenant_overrides (tenant, policy, "limit", burst, per)
				SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::interval[])
				ON CONFLICT (tenant, policy) DO UPDATE SET "limit" = EXCLUDED."limit", burst = EXCLUDED.burst, per = EXCLUDED.per`,
				r.set.tenants, r.set.policies, r.set.limits, r.set.bursts, r.set.pers); err != nil {
				return detailed("tenant overrides", err)
			}
		}
		if len(r.keys.hashes) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO sluice_keys (hash, key_id, tenant, end_user)
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
				ON CONFLICT (hash) DO UPDATE SET key_id = EXCLUDED.key_id, tenant = EXCLUDED.tenant, end_user = EXCLUDED.end_user`,
				r.keys.hashes, r.keys.ids, r.keys.tenants, r.keys.users); err != nil {
				return detailed("keys", err)
			}
		}
		return nil
	})
}

// detailed wraps the error of the statement writing what, with the
// database's detail (the row refused) when it gives one.
func detailed(what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Detail != "" {
		return fmt.Errorf("%s: %w: %s", what, err, pe.Detail)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// An importSet holds a directory's tenants, overrides and keys as the columns
// Import writes, one slice per column.
type importSet struct {
	tenants []string
	plans   []pgtype.Text // invalid: the default plan
	// byPlan names, for each plan the tenants are on, the first tenant
	// on it (by name).
	byPlan  map[string]string
	set     overrideRows
	cleared overrideRows // the zero overrides: limits removed
	keys    struct{ hashes, ids, tenants, users []string }
}

// overrideRows are tenant overrides as columns.
type overrideRows struct {
	tenants, policies []string
	limits, bursts    []pgtype.Int8
	pers              []pgtype.Interval
}

// importRows checks d's entries as Import's doc says and returns them as
// rows.
func importRows(d *directory.Data) (*importSet, error) {
	pl := limits.Plans{Plans: d.Plans.Plans, Tenants: make(map[string]limits.TenantPlan, len(d.Plans.Tenants))}
	r := &importSet{byPlan: map[string]string{}}
	for tenant, tp := range d.Plans.Tenants {
		os := tp.Overrides
		for pol, o := range tp.Overrides {
			if o != (limits.Override{}) {
				continue
			}
			if len(os) == len(tp.Overrides) {
				os = maps.Clone(tp.Overrides)
			}
			delete(os, pol)
			r.cleared.tenants = append(r.cleared.tenants, tenant)
			r.cleared.policies = append(r.cleared.policies, pol)
		}
		pl.Tenants[tenant] = limits.TenantPlan{Plan: tp.Plan, Overrides: os}
	}
	var badKey error
	var badID string
	for _, k := range d.Keys {
		if _, ok := pl.Tenants[k.Tenant]; !ok {
			pl.Tenants[k.Tenant] = limits.TenantPlan{}
		}
		err := keyError(k)
		if err != nil && (badKey == nil || k.KeyID < badID) {
			badKey, badID = fmt.Errorf("key %s: %w", k.KeyID, err), k.KeyID
		}
	}
	if err := check(pl); err != nil {
		return nil, err
	}
	if badKey != nil {
		return nil, badKey
	}
	r.tenants = make([]string, 0, len(pl.Tenants))
	r.plans = make([]pgtype.Text, 0, len(pl.Tenants))
	// Rows in the order of their primary key fill the indexes page
	// after page: half the time of a random order.
	for _, tenant := range slices.Sorted(maps.Keys(pl.Tenants)) {
		tp := pl.Tenants[tenant]
		r.tenants = append(r.tenants, tenant)
		r.plans = append(r.plans, pgtype.Text{String: tp.Plan, Valid: tp.Plan != ""})
		if _, ok := r.byPlan[tp.Plan]; tp.Plan != "" && !ok {
			r.byPlan[tp.Plan] = tenant
		}
		for pol, o := range tp.Overrides {
			s := &r.set
			s.tenants = append(s.tenants, tenant)
			s.policies = append(s.policies, pol)
			s.limits = append(s.limits, pgtype.Int8{Int64: o.Limit, Valid: o.Limit != 0})
			s.bursts = append(s.bursts, pgtype.Int8{Int64: o.Burst, Valid: o.Burst != 0})
			s.pers = append(s.pers, pgtype.Interval{Microseconds: o.Per.Microseconds(), Valid: o.Per != 0})
		}
	}
	hashes := slices.SortedFunc(maps.Keys(d.Keys), func(a, b apikey.Hash) int { return bytes.Compare(a[:], b[:]) })
	for _, h := range hashes {
		k := d.Keys[h]
		r.keys.hashes = append(r.keys.hashes, h.String())
		r.keys.ids = append(r.keys.ids, k.KeyID)
		r.keys.tenants = append(r.keys.tenants, k.Tenant)
		r.keys.users = append(r.keys.users, k.User)
	}
	return r, nil
}

// plansExist refuses tenants on a plan the database does not hold,
// naming the first tenant (by name) on the first missing plan.
func (r *importSet) plansExist(ctx context.Context, db Execer) error {
	if len(r.byPlan) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(r.byPlan))
	found, err := db.Query(ctx, "SELECT name FROM sluice_plans WHERE name = ANY($1)", names)
	if err != nil {
		return err
	}
	have, err := pgx.CollectRows(found, pgx.RowTo[string])
	if err != nil {
		return err
	}
	held := make(map[string]bool, len(have))
	for _, plan := range have {
		held[plan] = true
	}
	for _, plan := range names {
		if !held[plan] {
			return fmt.Errorf("tenant %q: plan %q: %w", r.byPlan[plan], plan, ErrNotFound)
		}
	}
	return nil
}
