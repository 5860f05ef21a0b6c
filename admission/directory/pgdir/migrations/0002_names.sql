-- Plan and policy names as the gateways read them (1 to 64 letters, digits,
-- '-', '_' and '.', starting with a letter or digit: they appear unescaped
-- in response headers and metric labels). A name the gateways would refuse
-- is refused on write, whatever writes it. NOT VALID: rows written before
-- are not checked here (the loader refuses them one by one, as before), so
-- this applies to any database the first migration made.

ALTER TABLE sluice_plans ADD CONSTRAINT sluice_plans_name_valid
    CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$') NOT VALID;
ALTER TABLE sluice_plan_limits ADD CONSTRAINT sluice_plan_limits_policy_valid
    CHECK (policy ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$') NOT VALID;
ALTER TABLE sluice_tenant_overrides ADD CONSTRAINT sluice_tenant_overrides_policy_valid
    CHECK (policy ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$') NOT VALID;
