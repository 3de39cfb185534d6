-- Per-key limits (issue 25): a key whose `expires_at` (Unix milliseconds) is now or past is refused
-- as expired; `models` is the comma-separated allow-list of model names and kinds the key may reach
-- (NULL: every model). Both are optional and changed by `gateway admin key set`.
ALTER TABLE api_keys ADD COLUMN expires_at BIGINT;
ALTER TABLE api_keys ADD COLUMN models TEXT;
