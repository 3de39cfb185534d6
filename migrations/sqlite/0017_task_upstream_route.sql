-- Which configured upstream endpoint served a task and after how many attempts (issue 22): the
-- endpoint's name (never its URL or key) and the attempts of the call, for operators
-- (`gateway admin task show`); a video task is polled and cancelled on the endpoint named here.
ALTER TABLE tasks ADD COLUMN upstream_endpoint TEXT;
ALTER TABLE tasks ADD COLUMN upstream_attempts INTEGER;
