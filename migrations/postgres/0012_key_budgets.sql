-- Per-key spend budgets (issue 25). `budget_micros` is the limit (NULL: none) for each
-- `budget_period` (`total`, `day`, `week`, `month`, UTC); `budget_spent_micros` is what the key's
-- settlements charged since `budget_period_start` (Unix milliseconds; 0 for `total`) and
-- `budget_held_micros` what its open holds keep. Both counters move in the ledger writer's
-- batches, in the same commit as the balance, so a key never holds past its limit.
ALTER TABLE api_keys ADD COLUMN budget_micros BIGINT;
ALTER TABLE api_keys ADD COLUMN budget_period TEXT;
ALTER TABLE api_keys ADD COLUMN budget_period_start BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN budget_spent_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN budget_held_micros BIGINT NOT NULL DEFAULT 0;
-- The key whose budget a reservation counts against (NULL: only the balance).
ALTER TABLE reservations ADD COLUMN budget_key TEXT;
-- The key that made a task (NULL for tasks made before this migration), for per-key spend.
ALTER TABLE tasks ADD COLUMN key_id TEXT;
