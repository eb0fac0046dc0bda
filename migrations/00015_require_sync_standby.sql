-- +goose Up
-- An answer is stored with its key (idempotency_keys.status 'completed')
-- in the transaction that settles it, and sent only once that commits.
-- With synchronous replication the commit returns only when a standby has
-- it, so a failover cannot lose an answer a client saw. A primary that
-- runs without a synchronous standby (synchronous_standby_names empty)
-- acknowledges commits only it has, and a failover to a standby then
-- loses them: pg_auto_failover 2.0 moves a primary there by itself when
-- its standbys are gone (wait_primary), and also, in a race of its monitor
-- during a failover (upstream issue #774, fixed after 2.2), while the
-- standby is being promoted.
--
-- With payorch.require_sync_standby = on for the session (payorch serve
-- sets it when PAYORCH_REQUIRE_SYNC_STANDBY is true; ALTER ROLE or ALTER
-- DATABASE … SET sets it too), storing an answer on a primary without a
-- synchronous standby, or in a transaction whose commit does not wait for
-- one (synchronous_commit off or local), fails with SQLSTATE PO001 and the
-- settling transaction rolls back: payorch answers 503 and the client
-- retries, instead of getting an answer the next failover may take back.
-- The check is the trigger's WHEN clause, so that without the setting it
-- costs no function call.
-- +goose StatementBegin
CREATE FUNCTION idempotency_keys_require_sync_standby() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'no synchronous standby: an answer is not stored where a failover could lose it'
        USING ERRCODE = 'PO001',
            DETAIL = format('synchronous_standby_names = %L, synchronous_commit = %s',
                current_setting('synchronous_standby_names'), current_setting('synchronous_commit'));
END
$$;
-- +goose StatementEnd

CREATE TRIGGER idempotency_keys_require_sync_standby
    BEFORE INSERT OR UPDATE ON idempotency_keys
    FOR EACH ROW WHEN (NEW.status = 'completed'
        AND current_setting('payorch.require_sync_standby', true) = 'on'
        AND (current_setting('synchronous_standby_names') = ''
            OR current_setting('synchronous_commit') NOT IN ('on', 'remote_write', 'remote_apply')))
    EXECUTE FUNCTION idempotency_keys_require_sync_standby();

-- +goose Down
DROP TRIGGER idempotency_keys_require_sync_standby ON idempotency_keys;
DROP FUNCTION idempotency_keys_require_sync_standby();
