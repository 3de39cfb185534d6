//! Concurrency caps shared by replicas: each replica leases blocks of slots per cap (a model's or a
//! user's `concurrency_limit`) from the database and admits calls locally against what it holds.
//! The port [`CapLeases`] is implemented by the `store` crate on both databases.

use async_trait::async_trait;

use crate::ports::StoreError;
use crate::records::UserId;
use crate::time::Timestamp;

/// A concurrency cap: one model's (over all users and replicas) or one user's (over all models and
/// replicas).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CapScope {
    /// The `concurrency_limit` of the model with this name.
    Model(String),
    /// The `concurrency_limit` of this user.
    User(UserId),
}

impl CapScope {
    /// The key a lease row is stored under: `model:<name>` or `user:<id>`.
    pub fn key(&self) -> String {
        match self {
            CapScope::Model(name) => format!("model:{name}"),
            CapScope::User(id) => format!("user:{}", id.as_str()),
        }
    }
}

/// What one replica asks of a cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The cap.
    pub scope: CapScope,
    /// Slots the replica would like to hold (its calls in flight, its waiting calls and a little
    /// headroom). 0 gives the lease back.
    pub want: u32,
    /// Slots in use now (reported, so that video task creation can count them).
    pub in_use: u32,
    /// Slots the grant must not go below: the most calls the replica may have running on this cap
    /// while the request is under way. A replica that grows or renews its lease keeps admitting
    /// against its current grant and so keeps all of it; one that gives slots back stops admitting
    /// first and keeps only its calls in flight. So a lease never drops below its running calls,
    /// and the sum of leases bounds the calls running on all replicas.
    pub keep: u32,
}

/// What the database granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    /// Slots this replica now holds, until the lease's expiry. May be fewer than its calls in flight
    /// (the cap was lowered, or another replica is short): it then admits nothing new until enough
    /// of them end.
    pub slots: u32,
    /// The cap's current value (0 when the model or user no longer exists).
    pub cap: u32,
    /// Whether another live replica wants more slots than it holds (this replica's grant was held
    /// to its fair share).
    pub others_short: bool,
}

/// Leases of concurrency slots, one row per replica and cap.
///
/// The rule every implementation keeps: for each cap, the slots of all unexpired leases plus the
/// video tasks counted against it that are not terminal never exceed the cap's value, because a
/// grant is computed and written while that cap's lease rows are locked. An expired lease counts
/// for nothing, so a replica that died gives its slots back at expiry.
#[async_trait]
pub trait CapLeases: Send + Sync {
    /// Sets `replica`'s lease on `request.scope` to at most `request.want` slots, expiring at
    /// `expires_at`: as many as the cap leaves after the other replicas' live leases and the
    /// scope's running video tasks, held to a fair share when another replica is short.
    async fn lease(
        &self,
        replica: &str,
        request: &LeaseRequest,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<LeaseGrant, StoreError>;

    /// Gives back every lease of `replica` (shutdown).
    async fn release_leases(&self, replica: &str) -> Result<(), StoreError>;

    /// Slots in use by synchronous calls on `scope`, summed over the live leases of all replicas
    /// (as last reported by each).
    async fn leased_in_use(&self, scope: &CapScope, now: Timestamp) -> Result<u64, StoreError>;

    /// Takes one slot of each of `scopes` for work that counts through its own row once stored (a
    /// video task about to be created), as lease rows of `holder` that last until `expires_at` or
    /// until `release_leases(holder)`. It is checked and written under the caps' locks, like a
    /// grant, against every live lease and running video task, so it never passes a cap. Returns
    /// the first scope that has no free slot (nothing is taken then), or `None` when taken.
    async fn take_slots(
        &self,
        holder: &str,
        scopes: &[CapScope],
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<Option<CapScope>, StoreError>;

    /// Renews `replica`'s liveness lease until `expires_at` (and forgets replicas whose lease
    /// ended long ago).
    async fn heartbeat(&self, replica: &str, now: Timestamp, expires_at: Timestamp) -> Result<(), StoreError>;

    /// Ends `replica`'s liveness lease (a clean stop, after its last call ended).
    async fn retire(&self, replica: &str) -> Result<(), StoreError>;

    /// Records what `replica` last saw of its upstream endpoints (a JSON array of
    /// `EndpointHealth`), on its liveness row, so `gateway admin upstream list` can show it.
    async fn report_upstream_health(&self, replica: &str, endpoints_json: &str) -> Result<(), StoreError>;

    /// The live replicas at `now` (lease ahead), each with its lease's end and its last upstream
    /// report (`None` before its first).
    async fn replica_reports(&self, now: Timestamp) -> Result<Vec<(String, Timestamp, Option<String>)>, StoreError>;

    /// Up to `limit` running synchronous calls whose runner has no liveness lease at `now` (it
    /// died) and that have not changed since `before`, oldest first.
    async fn orphaned_calls(
        &self,
        now: Timestamp,
        before: Timestamp,
        limit: u64,
    ) -> Result<Vec<crate::TaskId>, StoreError>;
}

/// What a cap holds while a grant is computed (read under the cap's lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapState {
    /// The cap's value; 0 when its model or user does not exist.
    pub cap: i64,
    /// Video tasks counted against it that are not terminal.
    pub video_active: i64,
    /// Slots of the other replicas' live leases.
    pub others_slots: i64,
    /// Other live replicas that want more slots than they hold.
    pub others_short: i64,
}

impl CapState {
    /// The slots a replica asking for `want` gets: what the cap leaves after the video tasks and the
    /// other replicas' leases, and, when some other replica is short, no more than an even share of
    /// the cap among the replicas that want slots (so a replica holding a large block gives slots
    /// back as its calls end, instead of starving the others).
    ///
    /// The grant is never below `keep` (slots that calls may be using), even when that passes the
    /// cap (the cap was lowered under running calls); such a replica admits nothing new until its
    /// calls fall below its grant.
    pub fn grant(&self, want: u32, keep: u32) -> u32 {
        let room = (self.cap - self.video_active).max(0);
        let free = (room - self.others_slots).max(0);
        let mut grant = i64::from(want).min(free);
        if self.others_short > 0 {
            let sharers = self.others_short + 1;
            let fair = (room + sharers - 1) / sharers;
            grant = grant.min(fair);
        }
        u32::try_from(grant.max(0)).unwrap_or(u32::MAX).max(keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(cap: i64, video_active: i64, others_slots: i64, others_short: i64) -> CapState {
        CapState { cap, video_active, others_slots, others_short }
    }

    #[test]
    fn grant_never_passes_the_cap() {
        assert_eq!(state(5, 0, 0, 0).grant(3, 0), 3);
        assert_eq!(state(5, 0, 0, 0).grant(5, 0), 5);
        assert_eq!(state(5, 0, 0, 0).grant(6, 0), 5);
        assert_eq!(state(5, 0, 4, 0).grant(6, 0), 1);
        assert_eq!(state(5, 0, 5, 0).grant(6, 0), 0);
        assert_eq!(state(5, 2, 2, 0).grant(6, 0), 1);
        assert_eq!(state(5, 7, 0, 0).grant(6, 0), 0);
        assert_eq!(state(5, 0, 9, 0).grant(1, 0), 0, "a lowered cap grants nothing until leases shrink");
        assert_eq!(state(0, 0, 0, 0).grant(1, 0), 0, "an unknown model or user grants nothing");
        assert_eq!(state(5, 0, 0, 0).grant(0, 0), 0, "want 0 gives the lease back");
        assert_eq!(state(5, 0, 4, 0).grant(3, 2), 2, "never below the slots calls may be using");
        assert_eq!(state(5, 0, 4, 1).grant(0, 3), 3, "not even for a short replica elsewhere");
        assert_eq!(state(2, 0, 0, 0).grant(1, 4), 4, "nor under a lowered cap");
    }

    #[test]
    fn a_short_replica_elsewhere_holds_this_one_to_its_share() {
        assert_eq!(state(5, 0, 0, 1).grant(5, 0), 3, "two sharers of 5: ceil(5/2)");
        assert_eq!(state(5, 0, 3, 1).grant(5, 0), 2, "and never more than is free");
        assert_eq!(state(10, 0, 0, 3).grant(10, 0), 3, "four sharers of 10");
        assert_eq!(state(100, 0, 0, 1).grant(8, 0), 8, "a small want is unaffected");
    }

    #[test]
    fn every_sequence_of_grants_stays_within_the_cap() {
        // Replicas asking in turn, each seeing the others' current slots: the sum never passes the cap.
        for cap in 1..12i64 {
            let mut held = [0u32; 3];
            for round in 0..40u32 {
                let me = (round % 3) as usize;
                let want = (round * 7 + 3) % 15;
                let others: i64 = held.iter().enumerate().filter(|(i, _)| *i != me).map(|(_, s)| i64::from(*s)).sum();
                // A replica keeps what its calls may use: here, half of what it held.
                let keep = held[me] / 2;
                held[me] = state(cap, 0, others, i64::from(round % 2)).grant(want, keep);
                let total: i64 = held.iter().map(|s| i64::from(*s)).sum();
                assert!(total <= cap, "cap {cap}, round {round}: {held:?}");
            }
        }
    }
}
