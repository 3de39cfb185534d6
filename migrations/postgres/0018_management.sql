-- The management API (issue 23): operators can disable a user (every key refused while
-- `disabled_at` is set); each operator action is one `admin_audit` row (who, what, on what, the
-- state before and after as JSON text); and settled charges are found by user and settlement time
-- for `GET /api/v1/usage` through a partial index that only settled reservations enter (a hold
-- never touches it, a settlement adds one entry).
ALTER TABLE users ADD COLUMN disabled_at BIGINT;

CREATE TABLE admin_audit (
    id BIGSERIAL PRIMARY KEY,
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    actor_key TEXT,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    before_state TEXT,
    after_state TEXT
);

CREATE INDEX reservations_settled_user ON reservations (user_id, updated_at) WHERE status = 'settled';
