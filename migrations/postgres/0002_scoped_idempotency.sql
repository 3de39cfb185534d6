-- Idempotency-Key claims are scoped by route as well as by user and key (the same key on two
-- endpoints names two different requests); existing claims were all made on chat completions.
-- Response ids returned by the response-style endpoint are recorded with their owner, so that
-- `previous_response_id` can only name the caller's own responses.
CREATE TABLE idempotency_claims (
    user_id TEXT NOT NULL,
    route TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    task_id TEXT,
    response_status BIGINT,
    response_body TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (user_id, route, idem_key)
);
INSERT INTO idempotency_claims (user_id, route, idem_key, request_hash, task_id, response_status, response_body, created_at)
SELECT user_id, 'chat.completions', idem_key, request_hash, task_id, response_status, response_body, created_at
FROM idempotency_keys;
DROP TABLE idempotency_keys;

CREATE TABLE native_responses (
    response_id TEXT PRIMARY KEY NOT NULL,
    user_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
