-- The upstream's id for a task (video: recorded on submitting → queued), written by state changes.
ALTER TABLE tasks ADD COLUMN upstream_id TEXT;
