package pgdir

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// SetOverride gives a tenant its own limits for one policy; a zero
// Override removes them. An override the gateways would refuse is
// refused (ErrInvalid).
func SetOverride(ctx context.Context, db Execer, tenant, policy string, o limits.Override) error {
	if o == (limits.Override{}) {
		_, err := db.Exec(ctx, "DELETE FROM sluice_tenant_overrides WHERE tenant = $1 AND policy = $2", tenant, policy)
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
	h := config.HashKey(key)
	if keyID == "" {
		keyID = h.ID()
	}
	if err := PutKey(ctx, db, h, config.Key{Tenant: tenant, KeyID: keyID, User: user}); err != nil {
		return "", "", err
	}
	return key, keyID, nil
}

// PutKey stores a key's hash for its tenant (an import).
func PutKey(ctx context.Context, db Execer, h config.KeyHash, k config.Key) error {
	if !config.ValidKeyID(k.KeyID) {
		return fmt.Errorf("%q is not a valid key id", k.KeyID)
	}
	if !config.ValidUser(k.User) {
		return errors.New("the user must be at most 128 printable characters")
	}
	_, err := db.Exec(ctx, `INSERT INTO sluice_keys (hash, key_id, tenant, end_user) VALUES ($1, $2, $3, $4)
		ON CONFLICT (hash) DO UPDATE SET key_id = EXCLUDED.key_id, tenant = EXCLUDED.tenant, end_user = EXCLUDED.end_user`,
		h.String(), k.KeyID, k.Tenant, k.User)
	return notFound(err, "tenant", k.Tenant)
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
// removed.
func Import(ctx context.Context, conn *pgx.Conn, d *directory.Data) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for plan, os := range d.Plans.Plans {
			if err := SetPlan(ctx, tx, plan, os, plan == d.Plans.Default); err != nil {
				return fmt.Errorf("plan %q: %w", plan, err)
			}
		}
		for tenant, tp := range d.Plans.Tenants {
			if err := AddTenant(ctx, tx, tenant, tp.Plan); err != nil {
				return fmt.Errorf("tenant %q: %w", tenant, err)
			}
			for pol, o := range tp.Overrides {
				if err := SetOverride(ctx, tx, tenant, pol, o); err != nil {
					return fmt.Errorf("tenant %q: %w", tenant, err)
				}
			}
		}
		for h, k := range d.Keys {
			if _, ok := d.Plans.Tenants[k.Tenant]; !ok {
				if err := AddTenant(ctx, tx, k.Tenant, ""); err != nil {
					return fmt.Errorf("tenant %q: %w", k.Tenant, err)
				}
			}
			if err := PutKey(ctx, tx, h, k); err != nil {
				return fmt.Errorf("key %s: %w", k.KeyID, err)
			}
		}
		return nil
	})
}
