-- fee_schedules: the fees agreed with each connector, one row per change
-- (versioned like routing_versions: append-only, the highest version is
-- the active one). schedule is reconcile.FeeSchedule: per currency a
-- percent in basis points and a fixed fee in minor units, a default for
-- the other currencies, and the tolerance within which a provider's fee
-- agrees. Settlement reconciliation compares each balance transaction's
-- fee with it (fee_mismatch).

-- +goose Up
CREATE TABLE fee_schedules (
    connector  text        NOT NULL,
    version    integer     NOT NULL,
    schedule   jsonb       NOT NULL,
    created_by text        NOT NULL,
    created_at timestamptz NOT NULL,
    CONSTRAINT fee_schedules_pkey PRIMARY KEY (connector, version),
    CONSTRAINT fee_schedules_version_check CHECK (version > 0)
);

-- +goose Down
DROP TABLE fee_schedules;
