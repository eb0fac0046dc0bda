-- Publishable keys and the browser origins they may be used from.
--
-- A publishable key (role 'publishable', printed ppk_…) belongs to one
-- tenant like a merchant key, and is meant to be public: it sits in a
-- shopper's browser and may only create payment methods. A browser sends
-- it cross-origin only from the pages of the tenant's browser_origins
-- (CORS): exact origins, scheme://host[:port], lower case, without a
-- default port, at most 20 (validated by orchestrator.ValidateBrowserOrigins;
-- the check here only bounds the list).

-- +goose Up
ALTER TABLE api_keys
    DROP CONSTRAINT api_keys_role_check,
    ADD CONSTRAINT api_keys_role_check CHECK (role IN ('merchant', 'support', 'finance', 'admin', 'publishable')),
    DROP CONSTRAINT api_keys_merchant_tenant_check,
    ADD CONSTRAINT api_keys_merchant_tenant_check CHECK ((role IN ('merchant', 'publishable')) = (tenant_id IS NOT NULL));

ALTER TABLE tenants
    ADD COLUMN browser_origins text[] NOT NULL DEFAULT '{}',
    ADD CONSTRAINT tenants_browser_origins_check CHECK (cardinality(browser_origins) <= 20);

-- +goose Down
-- The older schema has no publishable role: its keys go (they could do
-- nothing there but be refused).
DELETE FROM api_keys WHERE role = 'publishable';
ALTER TABLE tenants
    DROP CONSTRAINT tenants_browser_origins_check,
    DROP COLUMN browser_origins;
ALTER TABLE api_keys
    DROP CONSTRAINT api_keys_merchant_tenant_check,
    ADD CONSTRAINT api_keys_merchant_tenant_check CHECK ((role = 'merchant') = (tenant_id IS NOT NULL)),
    DROP CONSTRAINT api_keys_role_check,
    ADD CONSTRAINT api_keys_role_check CHECK (role IN ('merchant', 'support', 'finance', 'admin'));
