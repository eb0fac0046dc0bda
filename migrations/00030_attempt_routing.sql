-- Why each attempt went to its connector (orchestrator.RoutingDecision):
-- the strategy, the rule and version, the connector it put first and, for
-- auth_rate, the scores it saw (integers: basis points and counts),
-- whether it explored, and the candidates eliminated. Written by the
-- statement that already inserts the attempt, so it adds no write and no
-- round trip to an authorization. NULL for attempts made before.

-- +goose Up
ALTER TABLE payment_attempts ADD COLUMN routing jsonb;

-- +goose Down
ALTER TABLE payment_attempts DROP COLUMN routing;
