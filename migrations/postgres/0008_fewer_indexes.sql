-- Less to write per call. Every call inserts a task and a reservation and then changes both, so
-- every index on them is written two or three times per call.
--
-- `tasks_running_runner` answered nothing `tasks_running_updated` does not: the orphan sweep
-- filters running tasks by `updated_at` (both databases' planners chose the other index).
DROP INDEX tasks_running_runner;
-- Only open reservations are ever looked up by status (how many are open); settled and refunded
-- ones no longer enter an index of their own.
DROP INDEX reservations_status;
CREATE INDEX reservations_open ON reservations (created_at) WHERE status = 'reserved';
