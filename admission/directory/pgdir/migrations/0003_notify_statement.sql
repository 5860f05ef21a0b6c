-- Changes are announced once per statement instead of once per row, so
-- that a bulk write does not flood the channel (an import of 100,000
-- tenants, each with a key, sent some 300,000 notifications, and each
-- listener reloaded the whole directory once per thousand of them).
--
-- A statement that changes at most 100 entries names each of them, as
-- before: "tenant:<name>", "key:<hash>", "plan:<name>". One that changes
-- more sends "plan:*": listeners reload the whole directory, as for a
-- plan ('*' is no plan's name). So does every statement of a transaction
-- that sets sluice.notify to 'all' (SET LOCAL, or set_config with
-- is_local true), as admitctl db import does; PostgreSQL delivers one
-- payload once per transaction, so such a transaction sends exactly one
-- notification, at its commit.

DROP TRIGGER sluice_plans_notify ON sluice_plans;
DROP TRIGGER sluice_plan_limits_notify ON sluice_plan_limits;
DROP TRIGGER sluice_tenants_notify ON sluice_tenants;
DROP TRIGGER sluice_tenant_overrides_notify ON sluice_tenant_overrides;
DROP TRIGGER sluice_keys_notify ON sluice_keys;
DROP FUNCTION sluice_notify();

-- TG_ARGV[0] is the kind of entry ("plan", "tenant", "key"), TG_ARGV[1]
-- the column naming it. The transition tables are new_rows and old_rows.
CREATE FUNCTION sluice_notify_statement() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed text;
    names text[];
    name text;
BEGIN
    IF current_setting('sluice.notify', true) = 'all' THEN
        PERFORM pg_notify('sluice_directory', 'plan:*');
        RETURN NULL;
    END IF;
    changed := CASE TG_OP
        WHEN 'INSERT' THEN format('SELECT %I AS n FROM new_rows', TG_ARGV[1])
        WHEN 'DELETE' THEN format('SELECT %I AS n FROM old_rows', TG_ARGV[1])
        -- A rename changes two entries: the old name and the new.
        ELSE format('SELECT %1$I AS n FROM new_rows UNION SELECT %1$I FROM old_rows', TG_ARGV[1])
    END;
    EXECUTE format('SELECT array_agg(n) FROM (SELECT DISTINCT n FROM (%s) c LIMIT 101) d', changed) INTO names;
    IF cardinality(names) > 100 THEN
        PERFORM pg_notify('sluice_directory', 'plan:*');
        RETURN NULL;
    END IF;
    FOREACH name IN ARRAY COALESCE(names, '{}') LOOP
        PERFORM pg_notify('sluice_directory', TG_ARGV[0] || ':' || name);
    END LOOP;
    RETURN NULL;
END;
$$;

-- A trigger with transition tables has one event: three per table.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        ('sluice_plans', 'plan', 'name'),
        ('sluice_plan_limits', 'plan', 'plan'),
        ('sluice_tenants', 'tenant', 'name'),
        ('sluice_tenant_overrides', 'tenant', 'tenant'),
        ('sluice_keys', 'key', 'hash')) AS v (tbl, kind, col)
    LOOP
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %I REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_statement(%L, %L)', t.tbl || '_notify_insert', t.tbl, t.kind, t.col);
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %I REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_statement(%L, %L)', t.tbl || '_notify_update', t.tbl, t.kind, t.col);
        EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %I REFERENCING OLD TABLE AS old_rows
            FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_statement(%L, %L)', t.tbl || '_notify_delete', t.tbl, t.kind, t.col);
    END LOOP;
END;
$$;
