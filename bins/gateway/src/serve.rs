//! `serve` and `migrate`: open the store, load the catalog, create the demo account, run the server.

use std::sync::Arc;
use std::time::Duration;

use domain::{SystemClock, UsdAmount};
use service::{Gateway, Ports};
use store::Store;

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
    upstream::sim::serve(listener, shutdown_signal()).await.map_err(|e| e.to_string())
}

/// The chat upstream: the configured platform, or an in-process simulator for `sim`.
/// The simulator's handle must live as long as the server.
async fn chat_upstream(
    config: &Config,
) -> Result<(upstream::HttpChatUpstream, Option<upstream::sim::SimHandle>), String> {
    let (base, key, sim) = if config.upstream_url == "sim" {
        let (addr, handle) = upstream::sim::spawn().await.map_err(|e| format!("simulator: {e}"))?;
        (format!("http://{addr}/api/v3"), "sim".to_owned(), Some(handle))
    } else {
        (config.upstream_url.clone(), config.upstream_api_key.expose().to_owned(), None)
    };
    let client = upstream::HttpChatUpstream::new(
        &base,
        key,
        Duration::from_millis(config.upstream_connect_timeout_ms),
        Duration::from_millis(config.upstream_timeout_ms),
    )
    .map_err(|e| format!("upstream: {e}"))?;
    Ok((client, sim))
}

/// `gateway serve`: runs until SIGINT or SIGTERM.
pub(crate) async fn run(config: Config) -> Result<(), String> {
    let (chat, _sim) = chat_upstream(&config).await?;
    let gateway = open(&config).await?;
    let gateway = Gateway::new(gateway.ports().clone().with_chat(Arc::new(chat)))
        .with_call_timeout(Duration::from_millis(config.upstream_timeout_ms));
    spawn_recovery(gateway.clone(), gateway.recovery_age());
    let balance = UsdAmount::parse_decimal(&config.demo_balance).map_err(|e| format!("demo_balance: {e}"))?;
    let demo = gateway.ensure_demo_account(balance).await.map_err(|e| format!("demo account: {e}"))?;
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(%addr, database = %redact_url(&config.database_url), upstream = %config.upstream_url, "gateway listening");
    match demo {
        // The secret goes to stdout once, never to the log.
        Some(demo) => println!(
            "Demo user {} created with {} USD.\nDemo API key (shown once): {}\nTry: curl -s http://{addr}/api/v1/models -H 'Authorization: Bearer {}'",
            demo.user.id, demo.user.balance, demo.key.secret, demo.key.secret
        ),
        None => println!(
            "Gateway on http://{addr}. Users exist already; issue a key with: gateway admin key create --user <id> --all-scopes"
        ),
    }
    api::serve(listener, api::AppState::new(gateway), shutdown_signal()).await.map_err(|e| e.to_string())
}

/// Refunds synchronous calls abandoned by an earlier crash, now and then every minute.
fn spawn_recovery(gateway: Gateway, max_age: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tick.tick().await;
            match gateway.recover_interrupted_calls(max_age).await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(ended = n, "refunded calls interrupted by a restart"),
                Err(e) => tracing::error!(error = %e, "recovery sweep failed"),
            }
        }
    });
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
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
