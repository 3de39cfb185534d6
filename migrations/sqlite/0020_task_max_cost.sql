-- The most a call may cost, from the caller's `X-Max-Cost` header (issue 37): a settlement above it
-- charges the cap. Kept on the task because a video task settles long after the request.
ALTER TABLE tasks ADD COLUMN max_cost_micros BIGINT;
