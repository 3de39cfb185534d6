//! `serve` and `migrate`: open the store, load the catalog, create the demo account, and wire the
//! server and the background work (`crate::supervisor`) together.

use std::sync::Arc;
use std::time::Duration;

use domain::SystemClock;
use service::{Gateway, Ports};
use store::{Backend, PrunePolicy, Store};

use crate::config::Config;
use crate::supervisor::{Rounds, Supervisor};

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
    let closing = store.clone();
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let wired = crate::wiring::wire(&config, store, addr).await?;
    let gateway = wired.gateway;
    let catalog = catalog::Catalog::builtin().map_err(|e| format!("catalog: {e}"))?;
    gateway.seed_catalog(&catalog).await.map_err(|e| format!("catalog: {e}"))?;
    apply_aliases(&gateway, &config.model_aliases).await?;
    let rounds = Rounds {
        replica_lease: config.replica_lease.0,
        media_sweep: config.media_sweep_interval.0,
        prune: (prune_policy(&config, &gateway), config.prune_interval.0),
    };
    let supervisor = Supervisor::start(&gateway, closing, rounds, shutdown.signalled()).await?;
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
        None => match gateway.demo_user().await.map_err(|e| format!("database: {e}"))? {
            Some(user) => println!(
                "Gateway on http://{addr}. Console: http://{addr}/console/. Demo user {} ({}): its key was shown at its first start; a new one: gateway admin key create --user {} --all-scopes",
                user.id, user.email, user.id
            ),
            None => println!(
                "Gateway on http://{addr}. Console: http://{addr}/console/. Users exist already; issue a key with: gateway admin key create --user <id> --all-scopes (gateway admin user list shows the ids)"
            ),
        },
    }
    let state = api::AppState::new(gateway.clone())
        .with_body_budget(config.body_budget())
        .with_limits(config.limits())
        .with_metrics_token(config.metrics_token.expose())
        .with_trusted_proxies(config.trusted_proxies.clone());
    let served = api::serve(listener, state, shutdown.signalled()).await.map_err(|e| crate::Exit::from(e.to_string()));
    // The server has drained its connections; background work ends in its written order.
    supervisor.stop().await;
    drop(wired.simulator);
    served
}

/// Sets the configuration file's `[[model_aliases]]` as `gateway admin alias set` would (and
/// audited the same way), leaving those already set as written alone; a bad one stops the start.
async fn apply_aliases(gateway: &Gateway, aliases: &[crate::config::ModelAliasSetting]) -> Result<(), crate::Exit> {
    if aliases.is_empty() {
        return Ok(());
    }
    let stored = gateway.model_aliases().await.map_err(|e| format!("database: {e}"))?;
    let actor = domain::Actor::Cli;
    let operator = gateway.operator(&actor);
    for setting in aliases {
        let alias = domain::ModelAlias { name: setting.name.clone(), models: setting.models.clone() };
        if !stored.contains(&alias) {
            operator
                .set_alias(alias)
                .await
                .map_err(|e| crate::Exit::config(format!("model_aliases: {}: {e}", setting.name)))?;
        }
    }
    Ok(())
}

/// The prune's ages: the configured retentions; an unanswered idempotency claim is kept while its
/// request may still run (the recovery age, or the upstream timeout plus the five minutes after
/// which a claim counts as abandoned, whichever is longer).
fn prune_policy(config: &Config, gateway: &Gateway) -> PrunePolicy {
    let abandoned = config.upstream_timeout.0.saturating_add(Duration::from_secs(300));
    PrunePolicy {
        idempotency_ttl: config.idempotency_ttl.0,
        claim_running: gateway.recovery_age().max(abandoned),
        webhook_retention: config.webhook_retention.0,
        response_retention: config.response_retention.0,
        batch: config.prune_batch,
    }
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
