//! The report: the figures of every scenario as Markdown tables, the billing checks, notes, and
//! the functional failures that make bench exit 1 (never a speed threshold).

use crate::billing::BillingCheck;
use crate::cli::Cli;
use crate::scenarios::{SCENARIOS, Scenario, Target};
use crate::stats::{ms, signed_ms};
use crate::wrk;

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
    /// Successful answers per second, with one decimal.
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

/// `a - b` in µs, when both were measured.
fn delta(a: Option<u64>, b: Option<u64>) -> Option<i64> {
    Some(i64::try_from(a?).ok()? - i64::try_from(b?).ok()?)
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

/// What each gateway row adds to its baseline (the simulator's row of the same connections and
/// kind, see [`Scenario::baseline`]): p50, and the time to first byte for streams. Figures only.
fn added_lines(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    for row in rows.iter().filter(|r| r.target.is_gateway()) {
        let Some(base) = SCENARIOS
            .iter()
            .find(|s| s.name == row.name)
            .and_then(Scenario::baseline)
            .and_then(|b| rows.iter().find(|r| r.name == b.name))
        else {
            continue;
        };
        let signed = |d: Option<i64>| d.map_or("–".to_owned(), |d| format!("{} ms", signed_ms(d)));
        let mut text = format!(
            "- {} on {}: p50 {} over {}",
            row.name,
            row.database,
            signed(delta(row.p50_us, base.p50_us)),
            base.name
        );
        if row.stream {
            text.push_str(&format!(", TTFB p50 {}", signed(delta(row.ttfb_p50_us, base.ttfb_p50_us))));
        }
        out.push(text);
    }
    out
}

/// What went wrong functionally, one line each: failed requests (any answer that was not a
/// complete 200, any transport error or timeout), non-2xx answers to wrk, billing figures that
/// differ from the successes, and the problems the run noted (a wrk that could not run).
/// Speed is never a failure.
pub fn failures(tables: &Tables<'_>) -> Vec<String> {
    let mut out = tables.problems.to_vec();
    for r in tables.rows.iter().filter(|r| r.errors > 0) {
        out.push(format!("{} on {}: {} failed request(s)", r.name, r.database, r.errors));
    }
    for w in tables.wrk_rows.iter().filter(|w| w.figures.non_2xx > 0) {
        out.push(format!("{} on {} with wrk: {} non-2xx answer(s)", w.name, w.database, w.figures.non_2xx));
    }
    for c in tables.checks.iter().filter(|c| !c.matches()) {
        out.push(format!("billing after {}: the figures differ from the {} successful answers", c.after, c.expected));
    }
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
    /// Notes: what the children logged.
    pub warnings: &'a [String],
    /// Functional problems the run met besides the figures (a wrk that could not run).
    pub problems: &'a [String],
}

/// The report printed on stdout: the tables, the billing checks, what the gateway adds to the
/// simulator, the notes and the failures (none when all went well).
pub fn report(cli: &Cli, machine: &str, tables: &Tables<'_>, ticks_per_s: u64, ticks_known: bool) -> String {
    let Tables { rows, wrk_rows, checks, warnings, .. } = *tables;
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
    let added = added_lines(rows);
    if !added.is_empty() {
        line(String::new());
        line("Added by the gateway over the simulator at the same connections:".into());
        added.into_iter().for_each(&mut line);
    }
    line(String::new());
    line(format!(
        "CPU from /proc/<pid>/stat utime+stime at {ticks_per_s} ticks/s{}, over the measured window, divided by the requests measured in it (all gateway processes together); PostgreSQL's CPU is that of every `postgres` process on this machine; the bench client and the database share the same CPUs.",
        if ticks_known { " (getconf CLK_TCK)" } else { " (assumed: getconf CLK_TCK failed)" }
    ));
    for w in warnings {
        line(format!("Note: {w}"));
    }
    let failures = failures(tables);
    line(String::new());
    if failures.is_empty() {
        line("Failures: none (every request answered, every billing check matched).".into());
    } else {
        line(format!("Failures: {}", failures.len()));
        for f in failures {
            line(format!("- {f}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas() {
        assert_eq!(delta(Some(300), Some(60)), Some(240));
        assert_eq!(delta(Some(60), Some(300)), Some(-240));
        assert_eq!(delta(None, Some(300)), None);
    }
}
