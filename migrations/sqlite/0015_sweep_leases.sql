-- Leases of periodic sweeps that run on one replica at a time (issue 21: the media lifecycle
-- sweep): a row per sweep, held by `holder` while `expires_at` (milliseconds) is ahead. The row exists
-- only to be a lease, like the replicas' liveness rows.
CREATE TABLE sweep_leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
