-- The recovery sweep's question (calls a crash left running, oldest first) without reading the
-- whole task table: only running tasks are in this index, so it stays as small as the work in
-- flight.
CREATE INDEX tasks_running_updated ON tasks (updated_at)
    WHERE status IN ('submitting', 'queued', 'processing');
