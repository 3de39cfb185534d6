-- The account overview's `spent_usd` is a running total kept on the user's row by the write path
-- (every settlement adds its charge in the same statement that moves the balance), instead of a
-- sum over every settled reservation of the user, which no index served: each overview read the
-- whole `reservations` table. The total starts from that sum, once.
ALTER TABLE users ADD COLUMN spent_micros BIGINT NOT NULL DEFAULT 0;
UPDATE users SET spent_micros = COALESCE((SELECT CAST(SUM(r.actual_micros) AS BIGINT) FROM reservations r
  WHERE r.user_id = users.id AND r.status = 'settled'), 0);
