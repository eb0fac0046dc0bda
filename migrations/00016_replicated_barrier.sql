-- +goose Up
-- An answer read back from idempotency_keys (a replay served by the
-- database, or the answer a request whose lease was taken over sends) may
-- have been committed on this primary and not yet on a standby: a commit
-- is visible once written locally, and one whose wait for the standby
-- ended without the standby (the primary crashed and restarted, or the
-- wait was cancelled) stays visible on this primary only. A failover then
-- takes it back, and the client would have been given an answer that no
-- replay gives again.
--
-- payorch_replicated_barrier(), run in a transaction of its own after such
-- a read, when payorch.require_sync_standby is on (migration 00015): it
-- fails with PO001 on a primary without a synchronous standby, else it
-- writes a transactional logical message (a few bytes of WAL, no table),
-- so that its commit waits until a synchronous standby has flushed the WAL
-- up to it, past the answer read before it. Off, it does nothing.
-- +goose StatementBegin
CREATE FUNCTION payorch_replicated_barrier() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('payorch.require_sync_standby', true) IS DISTINCT FROM 'on' THEN
        RETURN;
    END IF;
    IF current_setting('synchronous_standby_names') = ''
        OR current_setting('synchronous_commit') NOT IN ('on', 'remote_write', 'remote_apply') THEN
        RAISE EXCEPTION 'no synchronous standby: an answer is not given where a failover could take it back'
            USING ERRCODE = 'PO001',
                DETAIL = format('synchronous_standby_names = %L, synchronous_commit = %s',
                    current_setting('synchronous_standby_names'), current_setting('synchronous_commit'));
    END IF;
    PERFORM pg_logical_emit_message(true, 'payorch', 'replicated');
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION payorch_replicated_barrier();
