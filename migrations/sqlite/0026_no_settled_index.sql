-- One index fewer written per call (issue 40). `reservations_settled_user` served two reads,
-- the spend by day and model and the spend by key; both now find a user's settled calls through
-- their `settle` ledger entries (`ledger_entries_user_time`), which every settlement writes in the
-- same commit and with the same time as the reservation's end. Each chat call inserted one entry
-- into this index, in a b-tree of its own: one more page in the WAL of nearly every commit.
DROP INDEX reservations_settled_user;
