//! The command line: the flags of `bench` and what their values mean.

use std::path::PathBuf;

use clap::Parser;

/// Benchmark of the gateway against the upstream simulator, both on this machine.
#[derive(Parser, Debug)]
#[command(name = "bench", version, args_override_self = true)]
pub struct Cli {
    /// Measured seconds per scenario (after the warm-up).
    #[arg(long, default_value_t = 10)]
    pub duration_secs: u64,
    /// Warm-up seconds per scenario, sent but excluded from the figures.
    #[arg(long, default_value_t = 1)]
    pub warmup_secs: u64,
    /// The `gateway` binary (default: `gateway` next to this executable, i.e. target/release/gateway).
    #[arg(long)]
    pub gateway_bin: Option<PathBuf>,
    /// Only these scenarios, comma-separated (default: all; see the table for names).
    #[arg(long, value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// Most requests per scenario, warm-up included.
    #[arg(long, default_value_t = 2_000_000)]
    pub max_requests: u64,
    /// The database of the gateways under test, repeatable: `sqlite` (a fresh file, the default)
    /// or a `postgres://` URL of a database the bench may add users to (a fresh one is best).
    /// Every gateway scenario runs once per database.
    #[arg(long = "database-url", default_value = "sqlite")]
    pub databases: Vec<String>,
    /// Whether the gateways enforce concurrency caps (`GATEWAY_CAPS`); the accounts' and models'
    /// caps are far above the load, so `true` against `false` measures what the caps cost.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub caps: bool,
    /// Give every benchmark key a spend budget of this many USD (total, far above what a run
    /// spends), so that every call's hold also checks and moves the key's budget.
    #[arg(long)]
    pub key_budget_usd: Option<String>,
    /// Give the gateways a second platform endpoint at this base URL besides the simulator (for
    /// example one nothing listens on, to measure what a dead endpoint costs the routing).
    #[arg(long)]
    pub extra_upstream: Option<String>,
    /// Also drive each closed-loop scenario of one account and one gateway (and the simulator's)
    /// with this `wrk` binary (Debian's `wrk`, e.g. /usr/bin/wrk), right after bench's own run and
    /// for as long, and report its figures beside bench's.
    #[arg(long)]
    pub wrk: Option<PathBuf>,
}

/// A short name for a database argument: `sqlite`, or `postgres` with host and database but no
/// user or password.
pub fn database_label(database: &str) -> Result<String, String> {
    if database == "sqlite" {
        return Ok("sqlite".into());
    }
    let rest = database
        .strip_prefix("postgres://")
        .or_else(|| database.strip_prefix("postgresql://"))
        .ok_or_else(|| format!("--database-url must be `sqlite` or a postgres:// URL, not {database:?}"))?;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let (host, db) = rest.split_once('/').unwrap_or((rest, ""));
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    Ok(format!("postgres ({host}/{})", db.split('?').next().unwrap_or_default()))
}

/// `gateway` next to this executable.
pub fn default_gateway_bin() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    Ok(me.with_file_name(format!("gateway{}", std::env::consts::EXE_SUFFIX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_labels() {
        assert_eq!(database_label("sqlite"), Ok("sqlite".to_owned()));
        assert_eq!(
            database_label("postgres://postgres:secret@127.0.0.1:5432/gw_bench?sslmode=disable"),
            Ok("postgres (127.0.0.1/gw_bench)".to_owned())
        );
        assert!(database_label("mysql://h/db").is_err());
    }
}
