-- What each replica last saw of its upstream endpoints (issue 22): a JSON array of endpoint
-- states written with its liveness heartbeat, read by `gateway admin upstream list`; it goes with
-- the replica's row.
ALTER TABLE replicas ADD COLUMN upstream_health TEXT;
