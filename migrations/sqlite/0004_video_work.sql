-- Video work (SQLite): the worker's lease and schedule on tasks, the last webhook status
-- announced (NULL: `submitting`, the state a task is created in), webhook secrets and used media
-- bytes on users, stored media, and the webhook outbox with every delivery attempt.
ALTER TABLE tasks ADD COLUMN lease_owner TEXT;
ALTER TABLE tasks ADD COLUMN lease_until BIGINT;
ALTER TABLE tasks ADD COLUMN next_poll_at BIGINT;
ALTER TABLE tasks ADD COLUMN poll_failures BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN webhook_status TEXT;

-- The worker's claim: video tasks that are not terminal, due first (never polled = due now).
-- (SQLite sorts NULL first in ascending order, as the claim asks.)
CREATE INDEX tasks_video_due ON tasks (next_poll_at, created_at, id)
    WHERE kind = 'video' AND status IN ('submitting', 'queued', 'processing');
-- Per-model concurrency of video tasks.
CREATE INDEX tasks_video_active_model ON tasks (model)
    WHERE kind = 'video' AND status IN ('submitting', 'queued', 'processing');
-- Status changes whose webhook a crash kept from being enqueued.
CREATE INDEX tasks_unannounced ON tasks (updated_at)
    WHERE webhook_url IS NOT NULL AND status <> COALESCE(webhook_status, 'submitting');

ALTER TABLE users ADD COLUMN webhook_secret TEXT;
ALTER TABLE users ADD COLUMN media_used_bytes BIGINT NOT NULL DEFAULT 0;

-- The task may be created after its media is stored, so `task_id` has no foreign key.
CREATE TABLE media_objects (
    key TEXT PRIMARY KEY NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id),
    task_id TEXT NOT NULL,
    position BIGINT NOT NULL,
    kind TEXT NOT NULL,
    mime TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    source_url TEXT,
    asset_id TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX media_objects_task ON media_objects (task_id, position);
CREATE INDEX media_objects_user ON media_objects (user_id);

CREATE TABLE webhook_deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL REFERENCES tasks (id),
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
-- The worker's claim: deliveries still pending, due first.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id)
    WHERE delivered_at IS NULL AND given_up_at IS NULL;
CREATE INDEX webhook_deliveries_task ON webhook_deliveries (task_id, id);

CREATE TABLE webhook_attempts (
    delivery_id BIGINT NOT NULL REFERENCES webhook_deliveries (id),
    attempt BIGINT NOT NULL,
    status BIGINT,
    latency_ms BIGINT NOT NULL,
    error TEXT,
    at BIGINT NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
