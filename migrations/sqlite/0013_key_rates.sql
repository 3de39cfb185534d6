-- Per-key rate limits (issue 25): `rpm` (requests per minute) and `tpm` (language tokens per minute),
-- positive or NULL (no limit), changed by `gateway admin key set`. `key_rate_use` is each limited
-- key's counter for its current fixed UTC minute (`window_start`, minutes since the epoch): the
-- requests and tokens granted to replicas in it, which a grant never lets pass the key's limits.
-- One row per key, reset when a new minute is first granted, so the table never grows with time.
ALTER TABLE api_keys ADD COLUMN rpm BIGINT;
ALTER TABLE api_keys ADD COLUMN tpm BIGINT;
CREATE TABLE key_rate_use (
    key_id TEXT PRIMARY KEY NOT NULL,
    window_start BIGINT NOT NULL,
    requests BIGINT NOT NULL,
    tokens BIGINT NOT NULL
);
