-- The tenant directory: plans with their per-policy limits, tenants with
-- their plan and own overrides, API keys by hash. Limits are typed columns;
-- NULL keeps the policy's own figure. The loader validates every row
-- against the policy file and refuses bad rows one by one.

CREATE TABLE sluice_plans (
    name       text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64),
    is_default boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- At most one default plan.
CREATE UNIQUE INDEX sluice_plans_one_default ON sluice_plans (is_default) WHERE is_default;

CREATE TABLE sluice_plan_limits (
    plan   text NOT NULL REFERENCES sluice_plans (name) ON DELETE CASCADE ON UPDATE CASCADE,
    policy text NOT NULL CHECK (length(policy) BETWEEN 1 AND 64),
    "limit" bigint,
    burst   bigint,
    per     interval,
    PRIMARY KEY (plan, policy)
);

CREATE TABLE sluice_tenants (
    name       text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 128),
    plan       text REFERENCES sluice_plans (name) ON UPDATE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sluice_tenant_overrides (
    tenant text NOT NULL REFERENCES sluice_tenants (name) ON DELETE CASCADE ON UPDATE CASCADE,
    policy text NOT NULL CHECK (length(policy) BETWEEN 1 AND 64),
    "limit" bigint,
    burst   bigint,
    per     interval,
    PRIMARY KEY (tenant, policy)
);

-- Keys are stored only as their SHA-256 hash ("sha256:" and 64 hex digits).
CREATE TABLE sluice_keys (
    hash       text PRIMARY KEY CHECK (hash ~ '^sha256:[0-9a-f]{64}$'),
    key_id     text NOT NULL UNIQUE CHECK (length(key_id) BETWEEN 1 AND 64),
    tenant     text NOT NULL REFERENCES sluice_tenants (name) ON DELETE CASCADE ON UPDATE CASCADE,
    end_user   text NOT NULL DEFAULT '' CHECK (length(end_user) <= 128),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX sluice_keys_tenant ON sluice_keys (tenant);

-- Every change is announced on the channel sluice_directory, naming what
-- changed: "tenant:<name>", "key:<hash>" or "plan:<name>". Listeners re-read
-- that entry (a plan: the whole directory).
CREATE FUNCTION sluice_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    CASE TG_TABLE_NAME
    WHEN 'sluice_plans' THEN
        PERFORM pg_notify('sluice_directory', 'plan:' || r.name);
    WHEN 'sluice_plan_limits' THEN
        PERFORM pg_notify('sluice_directory', 'plan:' || r.plan);
    WHEN 'sluice_tenants' THEN
        PERFORM pg_notify('sluice_directory', 'tenant:' || r.name);
        IF TG_OP = 'UPDATE' AND OLD.name <> NEW.name THEN
            PERFORM pg_notify('sluice_directory', 'tenant:' || OLD.name);
        END IF;
    WHEN 'sluice_tenant_overrides' THEN
        PERFORM pg_notify('sluice_directory', 'tenant:' || r.tenant);
    WHEN 'sluice_keys' THEN
        PERFORM pg_notify('sluice_directory', 'key:' || r.hash);
        IF TG_OP = 'UPDATE' AND OLD.hash <> NEW.hash THEN
            PERFORM pg_notify('sluice_directory', 'key:' || OLD.hash);
        END IF;
    END CASE;
    RETURN NULL;
END;
$$;

CREATE TRIGGER sluice_plans_notify AFTER INSERT OR UPDATE OR DELETE ON sluice_plans
    FOR EACH ROW EXECUTE FUNCTION sluice_notify();
CREATE TRIGGER sluice_plan_limits_notify AFTER INSERT OR UPDATE OR DELETE ON sluice_plan_limits
    FOR EACH ROW EXECUTE FUNCTION sluice_notify();
CREATE TRIGGER sluice_tenants_notify AFTER INSERT OR UPDATE OR DELETE ON sluice_tenants
    FOR EACH ROW EXECUTE FUNCTION sluice_notify();
CREATE TRIGGER sluice_tenant_overrides_notify AFTER INSERT OR UPDATE OR DELETE ON sluice_tenant_overrides
    FOR EACH ROW EXECUTE FUNCTION sluice_notify();
CREATE TRIGGER sluice_keys_notify AFTER INSERT OR UPDATE OR DELETE ON sluice_keys
    FOR EACH ROW EXECUTE FUNCTION sluice_notify();
