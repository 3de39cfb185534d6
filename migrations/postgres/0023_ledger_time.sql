-- Statements and exports (issue 39): a user's ledger entries are found by time. A month's
-- statement sums the entries before and within the month, and an export reads a range of days in
-- pages ordered by (created_at, id), which this index gives without sorting. One more index entry
-- per ledger row; the ledger is never updated.
CREATE INDEX ledger_entries_user_time ON ledger_entries (user_id, created_at, id);
