-- Initial schema (SQLite). Amounts are integer micro-USD; times are Unix milliseconds.
CREATE TABLE users (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    email TEXT NOT NULL,
    role TEXT NOT NULL,
    balance_micros BIGINT NOT NULL,
    concurrency_limit BIGINT NOT NULL,
    media_quota_bytes BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id),
    name TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    scopes TEXT NOT NULL,
    revoked_at BIGINT,
    created_at BIGINT NOT NULL
);
CREATE INDEX api_keys_user ON api_keys (user_id);

CREATE TABLE models (
    name TEXT PRIMARY KEY NOT NULL,
    kind TEXT NOT NULL,
    enabled BOOLEAN NOT NULL,
    concurrency_limit BIGINT NOT NULL,
    definition TEXT NOT NULL,
    active_pricing_version BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE pricing_versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    model TEXT NOT NULL REFERENCES models (name),
    version BIGINT NOT NULL,
    rates TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (model, version)
);

CREATE TABLE tasks (
    id TEXT PRIMARY KEY NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id),
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    prompt TEXT,
    provider TEXT NOT NULL,
    input_mode TEXT,
    media_type TEXT,
    media_url TEXT,
    duration BIGINT,
    resolution TEXT,
    ratio TEXT,
    generate_audio BOOLEAN,
    pricing_version_id TEXT,
    usage TEXT,
    output_url TEXT,
    last_frame_url TEXT,
    error_code TEXT,
    error_message TEXT,
    webhook_url TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    completed_at BIGINT
);
CREATE INDEX tasks_user_created ON tasks (user_id, created_at DESC, id DESC);
CREATE INDEX tasks_user_status ON tasks (user_id, status);

CREATE TABLE reservations (
    task_id TEXT PRIMARY KEY NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id),
    amount_micros BIGINT NOT NULL,
    status TEXT NOT NULL,
    actual_micros BIGINT,
    balance_after_micros BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX reservations_status ON reservations (status);

CREATE TABLE ledger_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL REFERENCES users (id),
    task_id TEXT,
    kind TEXT NOT NULL,
    amount_micros BIGINT NOT NULL,
    balance_after_micros BIGINT NOT NULL,
    description TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX ledger_entries_user ON ledger_entries (user_id, id DESC);

CREATE TABLE idempotency_keys (
    user_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    task_id TEXT,
    response_status BIGINT,
    response_body TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (user_id, idem_key)
);

CREATE TABLE settings (
    name TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
