-- Nothing changes on PostgreSQL. The SQLite migration of the same number writes the running
-- statuses of three partial indexes as equalities and makes two indexes ascending, both for less
-- work per call of SQLite's writer. Here the planner proves the partial indexes' `status IN
-- (...)` from the statements' equalities, and a full b-tree page is split once, leaving room in
-- both halves, whichever end of it keys arrive at.
SELECT 1;
