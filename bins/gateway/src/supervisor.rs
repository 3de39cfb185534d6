//! The one place background work starts and stops. [`Supervisor::start`] takes the replica's
//! liveness lease and starts, in order: the recovery sweep, the lease renewal and the sweep of dead
//! replicas' calls, the video worker, the media sweep, the prune of old rows and the concurrency
//! lease manager. [`Supervisor::stop`] ends them in the order that keeps every hold accounted for:
//!
//! 1. calls still running (their clients may have left) end their holds;
//! 2. the video worker ends its pass (each task it claimed is released as it is scheduled);
//! 3. the periodic loops end their round (the liveness lease is renewed until here);
//! 4. the concurrency leases go back to the other replicas;
//! 5. the liveness lease ends, when no call of this replica is left to end;
//! 6. the store commits what its batched writer holds and closes.

use std::future::Future;
use std::time::Duration;

use service::Gateway;
use store::{PrunePolicy, Store};
use tokio::task::JoinHandle;

/// What the loops need to know, from the configuration.
pub(crate) struct Rounds {
    /// How long this replica's liveness lease lives unless renewed (renewed every third of it).
    pub(crate) replica_lease: Duration,
    /// How often the media sweep runs.
    pub(crate) media_sweep: Duration,
    /// What the prune removes, and how often it runs.
    pub(crate) prune: (PrunePolicy, Duration),
}

/// The running background work of one replica.
pub(crate) struct Supervisor {
    gateway: Gateway,
    store: Store,
    stop_loops: tokio::sync::watch::Sender<bool>,
    loops: Vec<JoinHandle<()>>,
    worker: JoinHandle<()>,
}

impl Supervisor {
    /// Takes the liveness lease and starts every loop, the video worker (which stops by itself once
    /// `shutdown` completes) and the concurrency lease manager.
    pub(crate) async fn start(
        gateway: &Gateway,
        store: Store,
        rounds: Rounds,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Supervisor, String> {
        gateway.keep_alive(rounds.replica_lease).await.map_err(|e| format!("replica lease: {e}"))?;
        let (stop_loops, stop) = tokio::sync::watch::channel(false);
        let mut loops = vec![spawn_recovery(gateway.clone(), gateway.recovery_age(), stop.clone())];
        loops.extend(spawn_liveness(gateway.clone(), rounds.replica_lease, &stop));
        let worker = tokio::spawn(gateway.clone().run_video_worker(crate::wiring::worker_name(), shutdown));
        loops.push(spawn_media_sweep(gateway.clone(), rounds.media_sweep, stop.clone()));
        let (policy, every) = rounds.prune;
        loops.push(spawn_prune(store.clone(), policy, every, stop));
        gateway.start_cap_leases();
        Ok(Supervisor { gateway: gateway.clone(), store, stop_loops, loops, worker })
    }

    /// Stops everything in the order the module documents, each step waiting at most
    /// [`SHUTDOWN_WAIT`].
    pub(crate) async fn stop(self) {
        let Supervisor { gateway, store, stop_loops, loops, worker } = self;
        let running = gateway.background().running();
        if running > 0 {
            tracing::info!(running, "waiting for calls still running");
        }
        if !gateway.background().wait(SHUTDOWN_WAIT).await {
            let left = gateway.background().running();
            tracing::warn!(left, "calls still running at exit; the recovery sweep will end them");
        }
        if tokio::time::timeout(SHUTDOWN_WAIT, worker).await.is_err() {
            tracing::warn!("the video worker did not stop in time; its claims expire on their own");
        }
        let _ = stop_loops.send(true);
        for handle in loops {
            if tokio::time::timeout(SHUTDOWN_WAIT, handle).await.is_err() {
                tracing::warn!("a periodic sweep did not stop in time");
            }
        }
        if let Err(e) = gateway.release_leases().await {
            tracing::warn!(error = %e, "giving back concurrency leases failed; they expire on their own");
        }
        if gateway.background().running() == 0
            && let Err(e) = gateway.retire().await
        {
            tracing::warn!(error = %e, "ending the replica lease failed; it expires on its own");
        }
        if let Err(e) = store.close().await {
            tracing::warn!(error = %e, "closing the database failed");
        }
    }
}

/// How long each step of the shutdown waits (running calls, the video worker's pass, each loop).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(30);

/// A receiver that says when the periodic loops are to stop.
type Stop = tokio::sync::watch::Receiver<bool>;

/// Waits for the next tick of `tick`; `false` once `stop` says to stop (checked first, so a loop
/// never starts another round after it).
async fn next_round(tick: &mut tokio::time::Interval, stop: &mut Stop) -> bool {
    if *stop.borrow() {
        return false;
    }
    let ticked = tokio::select! {
        _ = tick.tick() => true,
        _ = stop.wait_for(|stop| *stop) => false,
    };
    ticked && !*stop.borrow()
}

/// Refunds synchronous calls abandoned by an earlier crash, now and then every minute, until `stop`.
fn spawn_recovery(gateway: Gateway, max_age: Duration, mut stop: Stop) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        while next_round(&mut tick, &mut stop).await {
            match gateway.recover_interrupted_calls(max_age).await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(ended = n, "refunded calls interrupted by a restart"),
                Err(e) => tracing::error!(error = %e, "recovery sweep failed"),
            }
        }
    })
}

/// Renews this replica's liveness lease every third of `lease`, and, on a task of its own (so that
/// a slow sweep never delays a renewal), refunds the calls of replicas whose lease ran out (they
/// died mid-call); both until `stop`.
fn spawn_liveness(gateway: Gateway, lease: Duration, stop: &Stop) -> [tokio::task::JoinHandle<()>; 2] {
    let renewer = gateway.clone();
    let mut renewer_stop = stop.clone();
    let renewal = tokio::spawn(async move {
        let mut tick = tokio::time::interval(lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while next_round(&mut tick, &mut renewer_stop).await {
            if let Err(e) = renewer.keep_alive(lease).await {
                tracing::error!(error = %e, "renewing the replica lease failed");
            }
        }
    });
    let mut stop = stop.clone();
    let sweep = tokio::spawn(async move {
        let mut tick = tokio::time::interval(lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while next_round(&mut tick, &mut stop).await {
            match gateway.recover_orphaned_calls(lease).await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(ended = n, "refunded calls of a replica that stopped answering"),
                Err(e) => tracing::error!(error = %e, "sweep of dead replicas' calls failed"),
            }
        }
    });
    [renewal, sweep]
}

/// Objects one media sweep batch deletes; a round runs batches until one is short.
const MEDIA_SWEEP_BATCH: u64 = 200;
/// Most batches in one media sweep round (the rest waits for the next round).
const MEDIA_SWEEP_BATCHES: u32 = 50;

/// Deletes media whose time is up, now and then every `interval`, until `stop`; each batch runs
/// only while this replica holds the sweep's lease (given back after the batch, at most a minute),
/// so one replica at a time sweeps.
fn spawn_media_sweep(gateway: Gateway, interval: Duration, mut stop: Stop) -> tokio::task::JoinHandle<()> {
    let holder = format!("media-sweep-{}", crate::wiring::worker_name());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while next_round(&mut tick, &mut stop).await {
            for _ in 0..MEDIA_SWEEP_BATCHES {
                match gateway.sweep_media(&holder, MEDIA_SWEEP_BATCH).await {
                    Ok(round) if round.deleted > 0 || round.failed > 0 => {
                        tracing::info!(deleted = round.deleted, failed = round.failed, "media sweep");
                        // A short batch is the last; a failure is retried next round, not now.
                        if round.failed > 0 || round.deleted < MEDIA_SWEEP_BATCH {
                            break;
                        }
                    }
                    Ok(_) => break,
                    Err(e) => {
                        tracing::error!(error = %e, "media sweep failed");
                        break;
                    }
                }
            }
        }
    })
}

/// Prunes old rows now and then every `interval` (each replica does; their batches never overlap),
/// until `stop`.
fn spawn_prune(store: Store, policy: PrunePolicy, interval: Duration, mut stop: Stop) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while next_round(&mut tick, &mut stop).await {
            let started = std::time::Instant::now();
            match store.prune(&policy).await {
                Ok(pruned) if pruned.total() == 0 => {}
                Ok(pruned) => tracing::info!(
                    idempotency_claims = pruned.idempotency_claims,
                    webhook_deliveries = pruned.webhook_deliveries,
                    webhook_attempts = pruned.webhook_attempts,
                    response_owners = pruned.response_owners,
                    batches = pruned.batches,
                    ms = domain::duration_millis(started.elapsed()),
                    "pruned old rows"
                ),
                Err(e) => tracing::error!(error = %e, "prune failed; the next pass retries"),
            }
        }
    })
}
