-- Key creation notifies too: NOTIFY payorch_api_keys with 'new:' and the
-- new key's id after an INSERT, and after an id change with the old id (as
-- before) and 'new:' and the new one. Instances remember key ids that
-- authenticated nobody (orchestrator/keycache.go: unknownKeys), so that
-- repeated requests with a made-up key cost no database read; a key created
-- on one instance must not be refused by another that remembers its id. The
-- prefix tells them apart from changes: a new id can make no cached key
-- stale, so it need not disturb the key cache. Sent at commit, only if the
-- transaction commits.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION api_keys_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('payorch_api_keys', '');
    ELSIF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('payorch_api_keys', 'new:' || NEW.id);
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('payorch_api_keys', OLD.id);
    ELSIF OLD.revoked_at IS DISTINCT FROM NEW.revoked_at
       OR OLD.secret_hash IS DISTINCT FROM NEW.secret_hash
       OR OLD.role IS DISTINCT FROM NEW.role
       OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
       OR OLD.id IS DISTINCT FROM NEW.id THEN
        PERFORM pg_notify('payorch_api_keys', OLD.id);
        IF OLD.id IS DISTINCT FROM NEW.id THEN
            PERFORM pg_notify('payorch_api_keys', 'new:' || NEW.id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER api_keys_notify_insert
    AFTER INSERT ON api_keys
    FOR EACH ROW EXECUTE FUNCTION api_keys_notify();

-- +goose Down
DROP TRIGGER api_keys_notify_insert ON api_keys;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION api_keys_notify() RETURNS trigger LANGUAGE plpgsql AS $$
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
