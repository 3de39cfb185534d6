-- Operators' model aliases (issue 37): a name callers send as `model`, for models of one kind tried
-- in order (comma-separated); and what a call that named an alias or a list asked for.
CREATE TABLE model_aliases (
    name TEXT PRIMARY KEY,
    models TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
ALTER TABLE tasks ADD COLUMN requested_model TEXT;
