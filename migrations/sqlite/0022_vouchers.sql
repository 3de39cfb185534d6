-- Vouchers and payments (issue 39): voucher batches an operator mints, each code stored only as
-- its SHA-256 hash, the failed redemption attempts that limit guessing per user, and the payments
-- credited.
CREATE TABLE voucher_batches (
    id TEXT PRIMARY KEY,
    amount_micros BIGINT NOT NULL,
    count BIGINT NOT NULL,
    expires_at BIGINT,
    note TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE TABLE vouchers (
    code_hash TEXT PRIMARY KEY,
    batch_id TEXT NOT NULL REFERENCES voucher_batches (id),
    redeemed_by TEXT,
    redeemed_at BIGINT
);
CREATE INDEX vouchers_by_batch ON vouchers (batch_id);
CREATE TABLE voucher_failures (
    user_id TEXT NOT NULL,
    at BIGINT NOT NULL
);
CREATE INDEX voucher_failures_by_user ON voucher_failures (user_id, at);
-- Payments credited (Stripe Checkout Sessions): the processor's id is the key, so a session is
-- credited once whatever the replays and races.
CREATE TABLE payments (
    payment_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    amount_micros BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
