-- Low-balance alerts (issue 39): one alert per user, armed while the balance is at or above its
-- threshold. Disarming (when a debit takes the balance below) and the `balance.low` delivery are
-- one commit; re-arming happens when the balance is back at or above the threshold.
CREATE TABLE balance_alerts (
    user_id TEXT PRIMARY KEY REFERENCES users (id),
    threshold_micros BIGINT NOT NULL,
    webhook_url TEXT,
    armed BOOLEAN NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The webhook outbox now also carries events that belong to no task (`balance.low`): its task
-- becomes optional. SQLite cannot drop a NOT NULL in place, so both outbox tables are rebuilt (the
-- attempts reference the deliveries) and their indexes made again.
CREATE TABLE webhook_deliveries_v24 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT REFERENCES tasks (id),
    user_id TEXT NOT NULL REFERENCES users (id),
    url TEXT NOT NULL,
    event TEXT NOT NULL,
    payload TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    lease_owner TEXT,
    lease_until BIGINT,
    delivered_at BIGINT,
    given_up_at BIGINT,
    last_status BIGINT,
    last_error TEXT,
    created_at BIGINT NOT NULL
);
INSERT INTO webhook_deliveries_v24 (id, task_id, user_id, url, event, payload, attempts, next_attempt_at,
    lease_owner, lease_until, delivered_at, given_up_at, last_status, last_error, created_at)
SELECT id, task_id, user_id, url, event, payload, attempts, next_attempt_at, lease_owner, lease_until,
    delivered_at, given_up_at, last_status, last_error, created_at FROM webhook_deliveries;
CREATE TABLE webhook_attempts_v24 (
    delivery_id BIGINT NOT NULL REFERENCES webhook_deliveries_v24 (id),
    attempt BIGINT NOT NULL,
    status BIGINT,
    latency_ms BIGINT NOT NULL,
    error TEXT,
    at BIGINT NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
INSERT INTO webhook_attempts_v24 (delivery_id, attempt, status, latency_ms, error, at)
SELECT delivery_id, attempt, status, latency_ms, error, at FROM webhook_attempts;
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
ALTER TABLE webhook_deliveries_v24 RENAME TO webhook_deliveries;
ALTER TABLE webhook_attempts_v24 RENAME TO webhook_attempts;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id)
    WHERE delivered_at IS NULL AND given_up_at IS NULL;
CREATE INDEX webhook_deliveries_task ON webhook_deliveries (task_id, id);
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (created_at, id)
    WHERE delivered_at IS NOT NULL OR given_up_at IS NOT NULL;
