//! The report: the figures of every scenario as Markdown tables, the billing checks and notes.

use crate::billing::BillingCheck;
use crate::cli::Cli;
use crate::scenarios::Target;
use crate::stats::{ms, signed_ms};
use crate::wrk;

/// Target at 64 connections on SQLite (embedded default), billed req/s.
const TARGET_SQLITE_RPS: u64 = 8_000;
/// Target at 64 connections on SQLite: most gateway CPU per request, µs.
const TARGET_SQLITE_CPU_US: u64 = 120;
/// Target on SQLite: most added p50 latency at one connection, µs.
const TARGET_SQLITE_ADDED_P50_US: i64 = 250;
/// Target at 64 connections on PostgreSQL (one replica), billed req/s.
const TARGET_PG_RPS: u64 = 3_000;
/// Target: PostgreSQL at 64 connections as a share of SQLite in the same run, percent.
const TARGET_PG_SHARE_PCT: u64 = 70;
/// Target on PostgreSQL: most added p50 latency at one connection, µs.
const TARGET_PG_ADDED_P50_US: i64 = 600;
/// Target: two replicas together as a share of one replica on the same database, percent.
const TARGET_REPLICAS_SHARE_PCT: u64 = 90;
/// Target: most added time to first byte for a stream at one connection, µs.
const TARGET_TTFB_DELTA_US: i64 = 1_000;

/// The figures of one scenario on one database.
#[derive(Debug)]
pub struct Row {
    /// The scenario.
    pub name: &'static str,
    /// Its database label (`–` for the simulator's rows).
    pub database: String,
    /// Whom it talked to.
    pub target: Target,
    /// Whether the answers were event streams.
    pub stream: bool,
    /// Concurrent connections.
    pub connections: usize,
    /// Successful answers in the measured window.
    pub ok: u64,
    /// Successful answers per second.
    pub rps: u64,
    /// [`Row::rps`] with one decimal.
    pub rps_text: String,
    /// Median latency (send → last body byte), µs.
    pub p50_us: Option<u64>,
    /// 99th percentile latency, µs.
    pub p99_us: Option<u64>,
    /// Median time to first body byte, µs.
    pub ttfb_p50_us: Option<u64>,
    /// Failed requests, warm-up included.
    pub errors: u64,
    /// CPU of every gateway process per request, µs.
    pub gateway_cpu_us: Option<u64>,
    /// CPU of the PostgreSQL server per request (PostgreSQL rows only).
    pub database_cpu_us: Option<u64>,
    /// CPU of the simulator per request, µs.
    pub sim_cpu_us: Option<u64>,
    /// CPU of bench itself per request, µs.
    pub bench_cpu_us: Option<u64>,
    /// A few of the errors, for the progress log.
    pub error_examples: Vec<String>,
}

fn opt(v: Option<u64>, f: fn(u64) -> String) -> String {
    v.map_or("–".to_owned(), f)
}

/// The row of `name` on `database` (direct rows are shared by every database).
fn find<'a>(rows: &'a [Row], database: &str, name: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.name == name && (!r.target.is_gateway() || r.database == database))
}

fn delta(a: Option<u64>, b: Option<u64>) -> Option<i64> {
    Some(i64::try_from(a?).ok()? - i64::try_from(b?).ok()?)
}

/// `part` as a whole percentage of `whole`.
fn share_pct(part: u64, whole: u64) -> Option<u64> {
    (whole > 0).then(|| u64::try_from(u128::from(part) * 100 / u128::from(whole)).unwrap_or(u64::MAX))
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "not measured",
    }
}

/// The machine in one line: CPUs, CPU model, load average.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get().to_string()).unwrap_or_else(|_| "?".into());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into());
    format!("{cpus} CPUs, {model}; load average before the run {load}")
}

/// The target lines of one database.
fn targets(rows: &[Row], label: &str, checks: &[BillingCheck], sqlite_c64: Option<&Row>) -> Vec<String> {
    let mut out = Vec::new();
    let row = |name: &str| find(rows, label, name);
    let c64 = row("gateway-c64");
    let clean = rows.iter().filter(|r| r.target.is_gateway() && r.database == label).all(|r| r.errors == 0);
    let mine: Vec<&BillingCheck> = checks.iter().filter(|c| c.after.ends_with(&format!(" on {label}"))).collect();
    let billing = (!mine.is_empty()).then(|| mine.iter().all(|c| c.matches()));
    out.push(format!(
        "- {label}: zero errors in every gateway scenario and billing rows = successes after each: {}",
        verdict(billing.map(|b| b && clean))
    ));
    let added = delta(row("gateway-c1").and_then(|r| r.p50_us), row("direct-c1").and_then(|r| r.p50_us));
    let added_text = added.map_or("–".into(), |d| format!("{} ms", signed_ms(d)));
    let rps_text = c64.map_or("–".into(), |r| r.rps_text.clone());
    if label == "sqlite" {
        out.push(format!(
            "- sqlite: ≥ {TARGET_SQLITE_RPS} billed req/s at 64 connections: {} ({rps_text})",
            verdict(c64.map(|r| r.rps >= TARGET_SQLITE_RPS))
        ));
        out.push(format!(
            "- sqlite: ≤ {TARGET_SQLITE_CPU_US} µs gateway CPU per request at 64 connections: {} ({} µs)",
            verdict(c64.and_then(|r| r.gateway_cpu_us).map(|c| c <= TARGET_SQLITE_CPU_US)),
            opt(c64.and_then(|r| r.gateway_cpu_us), |v| v.to_string())
        ));
        out.push(format!(
            "- sqlite: added p50 at 1 connection ≤ {} ms: {} ({added_text})",
            ms(TARGET_SQLITE_ADDED_P50_US.unsigned_abs()),
            verdict(added.map(|d| d <= TARGET_SQLITE_ADDED_P50_US))
        ));
    } else {
        out.push(format!(
            "- {label}: ≥ {TARGET_PG_RPS} billed req/s at 64 connections: {} ({rps_text})",
            verdict(c64.map(|r| r.rps >= TARGET_PG_RPS))
        ));
        let share = c64.zip(sqlite_c64).and_then(|(pg, lite)| share_pct(pg.rps, lite.rps));
        out.push(format!(
            "- {label}: ≥ 0.{TARGET_PG_SHARE_PCT} × SQLite at 64 connections in the same run: {} ({})",
            verdict(share.map(|s| s >= TARGET_PG_SHARE_PCT)),
            share.map_or("SQLite not measured in this run".into(), |s| format!("{s} %"))
        ));
        out.push(format!(
            "- {label}: added p50 at 1 connection ≤ {} ms: {} ({added_text})",
            ms(TARGET_PG_ADDED_P50_US.unsigned_abs()),
            verdict(added.map(|d| d <= TARGET_PG_ADDED_P50_US))
        ));
    }
    let two = row("replicas2-c64");
    let share = c64.zip(two).and_then(|(one, two)| share_pct(two.rps, one.rps));
    out.push(format!(
        "- {label}: two replicas (replicas2-c64) ≥ 0.{TARGET_REPLICAS_SHARE_PCT} × one (gateway-c64): {} ({})",
        verdict(share.map(|s| s >= TARGET_REPLICAS_SHARE_PCT)),
        share.map_or("–".into(), |s| format!("{s} %"))
    ));
    let ttfb = delta(
        row("gateway-stream-c1").and_then(|r| r.ttfb_p50_us),
        row("direct-stream-c1").and_then(|r| r.ttfb_p50_us),
    );
    out.push(format!(
        "- {label}: streaming TTFB at 1 connection within {} ms of the simulator's: {} ({})",
        ms(TARGET_TTFB_DELTA_US.unsigned_abs()),
        verdict(ttfb.map(|d| d <= TARGET_TTFB_DELTA_US)),
        ttfb.map_or("–".into(), |d| format!("{} ms", signed_ms(d)))
    ));
    out
}

/// What a run measured, for [`report`].
pub struct Tables<'a> {
    /// Bench's own figures, one row per scenario and database.
    pub rows: &'a [Row],
    /// wrk's figures (with `--wrk`).
    pub wrk_rows: &'a [wrk::Row],
    /// The billing check after each gateway scenario.
    pub checks: &'a [BillingCheck],
    /// Notes: what the children logged, what could not be measured.
    pub warnings: &'a [String],
}

/// The report printed on stdout: the tables, the billing checks, the targets, the notes.
pub fn report(
    cli: &Cli,
    machine: &str,
    labels: &[String],
    tables: &Tables<'_>,
    ticks_per_s: u64,
    ticks_known: bool,
) -> String {
    let Tables { rows, wrk_rows, checks, warnings } = *tables;
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!(
        "Machine: {}. Each scenario: {} s warm-up (excluded) + {} s measured, at most {} requests.",
        machine, cli.warmup_secs, cli.duration_secs, cli.max_requests
    ));
    line(String::new());
    line("| scenario | database | conns | req/s | p50 ms | p99 ms | TTFB p50 ms (stream) | errors | gateway CPU µs/req | PostgreSQL CPU µs/req | sim CPU µs/req | bench CPU µs/req |".into());
    line("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into());
    for r in rows {
        line(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            r.database,
            r.connections,
            r.rps_text,
            opt(r.p50_us, ms),
            opt(r.p99_us, ms),
            if r.stream { opt(r.ttfb_p50_us, ms) } else { "–".into() },
            r.errors,
            if r.target.is_gateway() { opt(r.gateway_cpu_us, |v| v.to_string()) } else { "–".into() },
            opt(r.database_cpu_us, |v| v.to_string()),
            opt(r.sim_cpu_us, |v| v.to_string()),
            opt(r.bench_cpu_us, |v| v.to_string()),
        ));
    }
    line(String::new());
    for l in wrk::table(wrk_rows) {
        line(l);
    }
    for c in checks {
        line(format!(
            "Billing after {}: {} account(s), {} successful answers; overview succeeded={} total={} active={}; tasks?status=completed total={} → {}",
            c.after,
            c.accounts,
            c.expected,
            c.succeeded,
            c.total,
            c.active,
            c.completed,
            if c.matches() { "match" } else { "MISMATCH" }
        ));
    }
    line(String::new());
    line("Targets:".into());
    let sqlite_c64 = find(rows, "sqlite", "gateway-c64");
    for label in labels {
        for t in targets(rows, label, checks, sqlite_c64) {
            line(t);
        }
    }
    line(String::new());
    line(format!(
        "CPU from /proc/<pid>/stat utime+stime at {ticks_per_s} ticks/s{}, over the measured window, divided by the requests measured in it (all gateway processes together); PostgreSQL's CPU is that of every `postgres` process on this machine; the bench client and the database share the same CPUs.",
        if ticks_known { " (getconf CLK_TCK)" } else { " (assumed: getconf CLK_TCK failed)" }
    ));
    for w in warnings {
        line(format!("Note: {w}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares() {
        assert_eq!(share_pct(2_100, 3_000), Some(70));
        assert_eq!(share_pct(1, 0), None);
    }
}
