-- Less work per call for SQLite's batched writer (issue 40): two changes to the indexes every
-- chat call writes, measured each alone in docs/PERFORMANCE.md. No table is rebuilt.
--
-- 1. The running statuses of three partial indexes as equalities joined by OR. SQLite evaluates
--    a partial index's condition for the old and the new row of every task it writes, and builds
--    a temporary b-tree for each `IN` list of three constants or more it meets: nine per chat call
--    (three on the insert, six on the update). The statements that read these indexes write the
--    same condition (`is_running!` in the store crate), which SQLite needs to use them.
DROP INDEX tasks_video_due;
CREATE INDEX tasks_video_due ON tasks (next_poll_at, created_at, id)
    WHERE kind = 'video' AND (status = 'submitting' OR status = 'queued' OR status = 'processing');
DROP INDEX tasks_video_active_model;
CREATE INDEX tasks_video_active_model ON tasks (model)
    WHERE kind = 'video' AND (status = 'submitting' OR status = 'queued' OR status = 'processing');
DROP INDEX tasks_running_updated;
CREATE INDEX tasks_running_updated ON tasks (updated_at)
    WHERE (status = 'submitting' OR status = 'queued' OR status = 'processing');

-- 2. A user's ledger entries and tasks indexed in ascending order. A new row sorts last among
--    its user's in `(user_id, id)` but first in `(user_id, id DESC)`, and SQLite packs a b-tree's
--    leaves from the left: prepending to a full leaf rebalances it with its siblings on every
--    insert (three leaves and their parent rewritten per commit instead of one leaf). The
--    newest-first listings read these indexes backwards, without a sort.
DROP INDEX ledger_entries_user;
CREATE INDEX ledger_entries_user ON ledger_entries (user_id, id);
DROP INDEX tasks_user_created;
CREATE INDEX tasks_user_created ON tasks (user_id, created_at, id);
