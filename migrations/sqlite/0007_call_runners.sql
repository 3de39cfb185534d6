-- Which replica runs each synchronous call (`runner`), and when each replica's liveness lease
-- ends: a replica renews its row while it runs, so a call whose runner's lease has run out was
-- cut off by a crash and is refunded by any other replica, without waiting for the age-based sweep.
ALTER TABLE tasks ADD COLUMN runner TEXT;
CREATE TABLE replicas (
    id TEXT PRIMARY KEY NOT NULL,
    expires_at BIGINT NOT NULL
);
-- Running calls by runner: only running tasks with a runner are in this index.
CREATE INDEX tasks_running_runner ON tasks (runner)
    WHERE runner IS NOT NULL AND status IN ('submitting', 'queued', 'processing');
