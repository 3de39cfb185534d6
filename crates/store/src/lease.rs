//! Leases: one shape for every row somebody holds for a while, and one statement builder.
//!
//! A lease is a holder and an end (`until`, milliseconds). At `now` it is live while
//! `until > now`; an expired lease is free, whoever held it, and nothing has to delete it first.
//! Every table with leases names its columns in a [`Lease`] and takes its predicates and
//! statements from it:
//!
//! | lease | row | holder | until | taken | renewed | given back |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | [`TASK`] | a video task | `lease_owner` | `lease_until` | claim (`video::claim_sql`) | [`Lease::renew`] | [`Lease::release`] with the next poll |
//! | [`DELIVERY`] | a webhook delivery | `lease_owner` | `lease_until` | claim (`video::claim_sql`) | [`Lease::renew`] | the attempt's record |
//! | [`CAP`] | a row per cap and replica | `replica_id` | `expires_at` | grant (`caps.rs`) | the next grant | `DELETE` |
//! | [`REPLICA`] | a row per replica | `id` | `expires_at` | heartbeat | heartbeat | `DELETE` (retire) |
//! | [`SWEEP`] | a row per one-at-a-time sweep | `holder` | `expires_at` | [`Lease::take_row`] | [`Lease::take_row`] | [`Lease::take_row`] ending now |
//!
//! The first two lease a row that exists anyway (the work), so taking it sets the holder and the
//! end where the lease is free, and giving it back clears them; the last two are rows that exist
//! only to be leases (a replica's slots of one cap, a replica's liveness), so taking or renewing
//! one writes the row and giving it back deletes it. An `Idempotency-Key` claim's take-over is not
//! a lease of this shape: its end is the claim's age plus a stale age that each caller passes
//! (`IdempotencyStore::claim`), and its holder is the request that owns the row; see
//! `idempotency.rs`.

/// Where one table keeps its leases.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    /// The table.
    pub table: &'static str,
    /// The column that names the leased row.
    pub key: &'static str,
    /// Who holds the lease.
    pub holder: &'static str,
    /// When it ends.
    pub until: &'static str,
}

/// The video worker's lease on a task.
pub(crate) const TASK: Lease = Lease { table: "tasks", key: "id", holder: "lease_owner", until: "lease_until" };

/// The video worker's lease on a webhook delivery.
pub(crate) const DELIVERY: Lease =
    Lease { table: "webhook_deliveries", key: "id", holder: "lease_owner", until: "lease_until" };

/// A replica's slots of one cap.
pub(crate) const CAP: Lease = Lease { table: "cap_leases", key: "scope", holder: "replica_id", until: "expires_at" };

/// A replica's liveness: its running calls are its own while it is live.
pub(crate) const REPLICA: Lease = Lease { table: "replicas", key: "id", holder: "id", until: "expires_at" };

/// A periodic sweep's turn: the replica holding it runs the sweep (the media lifecycle).
pub(crate) const SWEEP: Lease = Lease { table: "sweep_leases", key: "name", holder: "holder", until: "expires_at" };

impl Lease {
    /// Live at `now` (a placeholder or expression): `alias` is the table's alias with its dot, or
    /// empty.
    pub(crate) fn live(&self, alias: &str, now: &str) -> String {
        format!("{alias}{} > {now}", self.until)
    }

    /// Free at `now`: never taken, given back, or expired.
    pub(crate) fn free(&self, alias: &str, now: &str) -> String {
        let until = self.until;
        format!("({alias}{until} IS NULL OR {alias}{until} <= {now})")
    }

    /// The assignments that take the lease: `$1` the holder, `$2` the end.
    pub(crate) fn take(&self) -> String {
        format!("{} = $1, {} = $2", self.holder, self.until)
    }

    /// Moves the end of a lease the holder still has: `$1` the new end, `$2` the row, `$3` the
    /// holder; `also` adds conditions (` AND …`). It changes one row, or none when the lease was
    /// taken over (or the row is gone).
    pub(crate) fn renew(&self, also: &str) -> String {
        let Lease { table, key, holder, until } = self;
        format!("UPDATE {table} SET {until} = $1 WHERE {key} = $2 AND {holder} = $3{also}")
    }

    /// Gives a lease back, setting the columns `also_set` to `$1`, `$2`, … as well; the row and the
    /// holder are the two placeholders after them. It changes one row, or none when the lease was
    /// taken over.
    pub(crate) fn release(&self, also_set: &[&str]) -> String {
        let Lease { table, key, holder, until } = self;
        let mut sets = format!("{holder} = NULL, {until} = NULL");
        for (i, column) in also_set.iter().enumerate() {
            sets.push_str(&format!(", {column} = ${}", i + 1));
        }
        let n = also_set.len();
        format!("UPDATE {table} SET {sets} WHERE {key} = ${} AND {holder} = ${}", n + 1, n + 2)
    }

    /// Takes or renews a lease that is a row of its own: `$1` the row, `$2` the holder, `$3` the
    /// end, `$4` now. The row is written when it is missing, free at `$4` or `$2`'s already; it
    /// changes one row exactly when `$2` holds the lease afterwards.
    pub(crate) fn take_row(&self) -> String {
        let Lease { table, key, holder, until } = self;
        let free = self.free(&format!("{table}."), "$4");
        format!(
            "INSERT INTO {table} ({key}, {holder}, {until}) VALUES ($1, $2, $3) ON CONFLICT ({key}) DO UPDATE \
             SET {holder} = excluded.{holder}, {until} = excluded.{until} WHERE {free} OR {table}.{holder} = $2"
        )
    }

    /// Deletes the rows of this lease held by `$1` (a lease row's release).
    pub(crate) fn delete_held(&self) -> String {
        format!("DELETE FROM {} WHERE {} = $1", self.table, self.holder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statements_of_one_shape() {
        // Expired means free: a lease that ends at `now` is free at `now`, and no longer live.
        assert_eq!(TASK.live("e.", "$3"), "e.lease_until > $3");
        assert_eq!(TASK.free("", "$3"), "(lease_until IS NULL OR lease_until <= $3)");
        assert_eq!(DELIVERY.take(), "lease_owner = $1, lease_until = $2");
        assert_eq!(TASK.renew(""), "UPDATE tasks SET lease_until = $1 WHERE id = $2 AND lease_owner = $3");
        assert_eq!(
            TASK.release(&["next_poll_at", "poll_failures"]),
            "UPDATE tasks SET lease_owner = NULL, lease_until = NULL, next_poll_at = $1, poll_failures = $2 \
             WHERE id = $3 AND lease_owner = $4"
        );
        assert_eq!(CAP.delete_held(), "DELETE FROM cap_leases WHERE replica_id = $1");
        assert_eq!(REPLICA.live("r.", "$1"), "r.expires_at > $1");
        assert_eq!(
            SWEEP.take_row(),
            "INSERT INTO sweep_leases (name, holder, expires_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE \
             SET holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE (sweep_leases.expires_at IS NULL OR sweep_leases.expires_at <= $4) OR sweep_leases.holder = $2"
        );
    }
}
