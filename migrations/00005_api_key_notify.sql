-- Tell running instances when an API key stops authenticating as it did, so
-- their in-process key caches can drop it: NOTIFY payorch_api_keys with the
-- key's id after a change to what authentication reads (revoked_at,
-- secret_hash, role, tenant_id) and after a delete. last_used_at, written once
-- a minute per key in use, notifies nobody. A TRUNCATE notifies with an empty
-- payload: drop every key. Notifications are sent at commit, only if the
-- transaction commits.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION api_keys_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('payorch_api_keys', '');
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('payorch_api_keys', OLD.id);
    ELSIF OLD.revoked_at IS DISTINCT FROM NEW.revoked_at
       OR OLD.secret_hash IS DISTINCT FROM NEW.secret_hash
       OR OLD.role IS DISTINCT FROM NEW.role
       OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
       OR OLD.id IS DISTINCT FROM NEW.id THEN
        PERFORM pg_notify('payorch_api_keys', OLD.id);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER api_keys_notify
    AFTER UPDATE OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION api_keys_notify();

CREATE TRIGGER api_keys_notify_truncate
    AFTER TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION api_keys_notify();

-- +goose Down
DROP TRIGGER api_keys_notify_truncate ON api_keys;
DROP TRIGGER api_keys_notify ON api_keys;
DROP FUNCTION api_keys_notify();
