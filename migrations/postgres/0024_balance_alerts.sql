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

-- The webhook outbox now also carries events that belong to no task (`balance.low`).
ALTER TABLE webhook_deliveries ALTER COLUMN task_id DROP NOT NULL;
