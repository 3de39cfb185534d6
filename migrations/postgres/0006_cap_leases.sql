-- Concurrency slots leased by replicas: one row per cap (`model:<name>` or `user:<id>`) and
-- replica. `slots` is what the replica may admit until `expires_at` (Unix ms); `wanted` and
-- `in_use` are what it last reported, so that other replicas see who is short and video task
-- creation can count synchronous calls in flight.
CREATE TABLE cap_leases (
    scope TEXT NOT NULL,
    replica_id TEXT NOT NULL,
    slots BIGINT NOT NULL,
    wanted BIGINT NOT NULL,
    in_use BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (scope, replica_id)
);
CREATE INDEX cap_leases_replica ON cap_leases (replica_id);
