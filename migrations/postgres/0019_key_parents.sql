-- Keys minted through the API (issue 35): a key created with another key is that key's child.
-- Its limits are within its parent's, its calls count against every budgeted ancestor's budget
-- (the chain is on each reservation's `budget_key`, the ids joined by ','), and it is refused once
-- any ancestor is revoked or expired. Operators' keys have no parent.
ALTER TABLE api_keys ADD COLUMN parent_id TEXT;
