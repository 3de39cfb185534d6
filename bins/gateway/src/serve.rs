//! `serve` and `migrate`: open the store, load the catalog, create the demo account, run the server
//! and its periodic sweeps (recovery, liveness, the prune of old rows).

use std::sync::Arc;
use std::time::Duration;

use domain::SystemClock;
use service::{Gateway, Ports};
use store::{Backend, PrunePolicy, Store};

use crate::config::Config;

/// Opens the database (migrating it) and loads catalog models it does not know yet.
pub(crate) async fn open(config: &Config) -> Result<Gateway, String> {
    let store = Store::open(&config.database_url).await.map_err(|e| format!("database: {e}"))?;
    let gateway = Gateway::new(Ports::from_store(store, Arc::new(SystemClock)));
    let catalog = catalog::Catalog::builtin().map_err(|e| format!("catalog: {e}"))?;
    let added = gateway.seed_catalog(&catalog).await.map_err(|e| format!("catalog: {e}"))?;
    if added > 0 {
        tracing::debug!(added, "catalog models loaded");
    }
    Ok(gateway)
}

/// `gateway migrate`.
pub(crate) async fn migrate(config: &Config) -> Result<(), String> {
    let store = Store::connect(&config.database_url).await.map_err(|e| format!("database: {e}"))?;
    let applied = store.migrate().await.map_err(|e| format!("migrate: {e}"))?;
    println!("{}", serde_json::json!({"migrations_applied": applied}));
    Ok(())
}

/// `gateway sim-upstream --listen ADDR`: the simulator alone, until SIGINT or SIGTERM.
pub(crate) async fn sim_upstream(listen: &str) -> Result<(), String> {
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("{}", serde_json::json!({"simulator": format!("http://{addr}/api/v3")}));
    let shutdown = Shutdown::listen()?;
    sim::serve(listener, shutdown.signalled()).await.map_err(|e| e.to_string())
}

/// `gateway serve`: runs until SIGINT or SIGTERM. A funded demo user is created on a database
/// without users when it is SQLite (the first local run) or when `demo` is set (`--demo`).
pub(crate) async fn run(config: Config, demo: bool) -> Result<(), crate::Exit> {
    let shutdown = Shutdown::listen()?;
    let store = Store::open(&config.database_url)
        .await
        .map_err(|e| format!("database: {e}"))?
        .with_idempotency_ttl(config.idempotency_ttl.0);
    let backend = store.backend();
    let pruner = store.clone();
    let closing = store.clone();
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let wired = crate::wiring::wire(&config, store, addr).await?;
    let gateway = wired.gateway;
    let catalog = catalog::Catalog::builtin().map_err(|e| format!("catalog: {e}"))?;
    gateway.seed_catalog(&catalog).await.map_err(|e| format!("catalog: {e}"))?;
    let replica_lease = Duration::from_millis(config.replica_lease_ms);
    gateway.keep_alive(replica_lease).await.map_err(|e| format!("replica lease: {e}"))?;
    // The periodic loops run until the very end (the liveness lease must be renewed while calls
    // still finish after the drain) and are stopped, and waited for, before the lease is ended: a
    // renewal after `retire` would bring this replica's liveness row back.
    let (stop_loops, loops_stop) = tokio::sync::watch::channel(false);
    let mut loops = vec![spawn_recovery(gateway.clone(), gateway.recovery_age(), loops_stop.clone())];
    loops.extend(spawn_liveness(gateway.clone(), replica_lease, &loops_stop));
    let worker = tokio::spawn(gateway.clone().run_video_worker(crate::wiring::worker_name(), shutdown.signalled()));
    loops.push(spawn_media_sweep(gateway.clone(), config.media_sweep_interval.0, loops_stop.clone()));
    loops.push(spawn_prune(pruner, prune_policy(&config, &gateway), config.prune_interval.0, loops_stop));
    let wants_demo = demo || backend == Backend::Sqlite;
    let demo = if wants_demo {
        gateway.ensure_demo_account(config.demo_balance).await.map_err(|e| format!("demo account: {e}"))?
    } else {
        None
    };
    let users = gateway.ports().accounts.count_users().await.map_err(|e| format!("database: {e}"))?;
    tracing::info!(%addr, database = %redact_url(&config.database_url), upstream = %config.upstream_url, "gateway listening");
    match demo {
        // The secret goes to stdout once, never to the log.
        Some(demo) => println!(
            "Demo user {} created with {} USD.\nDemo API key (shown once): {}\nTry: curl -s http://{addr}/api/v1/models -H 'Authorization: Bearer {}'\nConsole: http://{addr}/console/ (sign in with the key above)",
            demo.user.id, demo.user.balance, demo.key.secret, demo.key.secret
        ),
        None if users == 0 => println!(
            "Gateway on http://{addr}. Console: http://{addr}/console/. No users yet: create one with gateway admin user create --name <name> --email <email> --balance <usd>, then a key with gateway admin key create --user <id> --all-scopes (or start once with --demo for a funded demo user)"
        ),
        None => println!(
            "Gateway on http://{addr}. Console: http://{addr}/console/. Users exist already; issue a key with: gateway admin key create --user <id> --all-scopes"
        ),
    }
    let state = api::AppState::new(gateway.clone())
        .with_body_budget(config.body_budget())
        .with_limits(config.limits())
        .with_metrics_token(config.metrics_token.expose())
        .with_trusted_proxies(config.trusted_proxies.clone());
    let served = api::serve(listener, state, shutdown.signalled()).await.map_err(|e| crate::Exit::from(e.to_string()));
    // The server has drained its connections. Calls whose clients left, streams, refunds and
    // idempotency completions still run on tasks of their own: let them end their holds.
    let running = gateway.background().running();
    if running > 0 {
        tracing::info!(running, "waiting for calls still running");
    }
    if !gateway.background().wait(SHUTDOWN_WAIT).await {
        let left = gateway.background().running();
        tracing::warn!(left, "calls still running at exit; the recovery sweep will end them");
    }
    // The video worker ends its pass (each task it claimed is released as it is scheduled).
    match tokio::time::timeout(SHUTDOWN_WAIT, worker).await {
        Ok(_) => {}
        Err(_) => tracing::warn!("the video worker did not stop in time; its claims expire on their own"),
    }
    // Stop the periodic loops (each ends its current round) before the leases are given back.
    let _ = stop_loops.send(true);
    for handle in loops {
        if tokio::time::timeout(SHUTDOWN_WAIT, handle).await.is_err() {
            tracing::warn!("a periodic sweep did not stop in time");
        }
    }
    // Give the concurrency slots back to the other replicas, and end the liveness lease (no call
    // of this replica is left to end).
    if let Err(e) = gateway.release_leases().await {
        tracing::warn!(error = %e, "giving back concurrency leases failed; they expire on their own");
    }
    if gateway.background().running() == 0
        && let Err(e) = gateway.retire().await
    {
        tracing::warn!(error = %e, "ending the replica lease failed; it expires on its own");
    }
    // Last, the store: its batched writer commits what is queued and stops, then its pools close.
    if let Err(e) = closing.close().await {
        tracing::warn!(error = %e, "closing the database failed");
    }
    drop(wired.simulator);
    served
}

/// How long shutdown waits for running calls, and then for the video worker's pass.
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

/// The prune's ages: the configured retentions; an unanswered idempotency claim is kept while its
/// request may still run (the recovery age, or the upstream timeout plus the five minutes after
/// which a claim counts as abandoned, whichever is longer).
fn prune_policy(config: &Config, gateway: &Gateway) -> PrunePolicy {
    let abandoned = Duration::from_millis(config.upstream_timeout_ms).saturating_add(Duration::from_secs(300));
    PrunePolicy {
        idempotency_ttl: config.idempotency_ttl.0,
        claim_running: gateway.recovery_age().max(abandoned),
        webhook_retention: config.webhook_retention.0,
        response_retention: config.response_retention.0,
        batch: config.prune_batch,
    }
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

/// SIGINT (Ctrl-C) and SIGTERM, listened for from the moment this is called (not from the first
/// poll of a future, which could miss a signal that arrives while, say, the video worker's first
/// pass runs): every [`Shutdown::signalled`] completes once one of them has arrived.
#[derive(Clone)]
struct Shutdown(tokio::sync::watch::Receiver<bool>);

impl Shutdown {
    fn listen() -> Result<Shutdown, String> {
        let (tx, rx) = tokio::sync::watch::channel(false);
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate()).map_err(|e| format!("cannot listen for SIGTERM: {e}"))?;
            let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("cannot listen for SIGINT: {e}"))?;
            tokio::spawn(async move {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
                tracing::info!("shutdown signal received");
                let _ = tx.send(true);
            });
        }
        #[cfg(not(unix))]
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutdown signal received");
            let _ = tx.send(true);
        });
        Ok(Shutdown(rx))
    }

    /// Completes once a signal has arrived (at once if one already has).
    fn signalled(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }
}

/// The URL without a password, for logs.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}:*****{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("postgres://u:pw@h/db"), "postgres://u:*****@h/db");
        assert_eq!(redact_url("sqlite://data/x.db"), "sqlite://data/x.db");
    }
}
