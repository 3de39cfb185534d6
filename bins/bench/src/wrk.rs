//! `bench --wrk PATH`: the closed-loop scenarios driven again by `wrk`, the load generator others
//! use, so that the figures a reader reproduces with standard tools sit beside bench's own.
//!
//! wrk gets a Lua script that sends the scenario's request (method, body, `Content-Type`, the
//! bearer key) on every connection, runs for the scenario's measured time with `--latency`, and
//! its report is parsed for requests per second, requests completed, non-2xx answers, socket
//! errors and the 50th and 99th latency percentiles.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// What one wrk run reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WrkFigures {
    /// Requests per second over the run, as wrk printed it (`Requests/sec`).
    pub rps_text: String,
    /// Its whole part.
    pub rps: u64,
    /// Responses read in the run (wrk's `N requests in`; non-2xx included).
    pub requests: u64,
    /// Responses that were not 2xx or 3xx.
    pub non_2xx: u64,
    /// Connect, read, write and timeout errors together.
    pub socket_errors: u64,
    /// Latency percentiles, µs.
    pub p50_us: Option<u64>,
    /// See [`WrkFigures::p50_us`].
    pub p99_us: Option<u64>,
}

/// What `wrk` measured for one scenario, beside bench's figure for it.
#[derive(Debug)]
pub struct Row {
    /// The scenario.
    pub name: &'static str,
    /// Its database (`–` for the simulator's).
    pub database: String,
    /// Connections.
    pub connections: usize,
    /// What wrk reported.
    pub figures: WrkFigures,
    /// The gateway's CPU per request over wrk's run.
    pub gateway_cpu_us: Option<u64>,
    /// Bench's own req/s for the same scenario, for the side-by-side table.
    pub bench_rps_text: String,
}

/// The report's wrk table (no lines when there are no rows).
pub fn table(rows: &[Row]) -> Vec<String> {
    if rows.is_empty() {
        return Vec::new();
    }
    let opt = |v: Option<u64>, f: fn(u64) -> String| v.map_or_else(|| "–".to_owned(), f);
    let mut lines = vec![
        "The same scenarios driven by wrk (its own account, same duration), beside bench's req/s:".to_owned(),
        String::new(),
        "| scenario | database | conns | wrk req/s | bench req/s | wrk p50 ms | wrk p99 ms | non-2xx | socket errors | gateway CPU µs/req |".to_owned(),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|".to_owned(),
    ];
    for w in rows {
        let f = &w.figures;
        lines.push(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            w.name,
            w.database,
            w.connections,
            f.rps_text,
            w.bench_rps_text,
            opt(f.p50_us, crate::stats::ms),
            opt(f.p99_us, crate::stats::ms),
            f.non_2xx,
            f.socket_errors,
            opt(w.gateway_cpu_us, |v| v.to_string()),
        ));
    }
    lines.push(String::new());
    lines
}

/// The Lua script that makes wrk send `body` as a JSON POST with `key` as bearer token.
fn script(body: &str, key: &str) -> String {
    let quote = |s: &str| s.replace('\\', "\\\\").replace('\'', "\\'");
    format!(
        "wrk.method = 'POST'\nwrk.body = '{}'\nwrk.headers['Content-Type'] = 'application/json'\nwrk.headers['Authorization'] = 'Bearer {}'\n",
        quote(body),
        quote(key)
    )
}

/// Runs `wrk` against `url` with `connections` connections (and at most as many threads as the
/// machine has cores, at most `connections`) for `duration`; its figures.
pub fn run(
    wrk: &Path,
    url: &str,
    key: &str,
    body: &str,
    connections: usize,
    duration: Duration,
) -> Result<WrkFigures, String> {
    let dir = std::env::temp_dir().join(format!("bench-wrk-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let lua = dir.join("request.lua");
    let written = std::fs::write(&lua, script(body, key)).map_err(|e| format!("cannot write {}: {e}", lua.display()));
    let threads = std::thread::available_parallelism().map_or(2, std::num::NonZero::get).min(connections.max(1));
    let out = written.and_then(|()| {
        Command::new(wrk)
            .arg(format!("-t{threads}"))
            .arg(format!("-c{connections}"))
            .arg(format!("-d{}s", duration.as_secs().max(1)))
            .arg("--latency")
            .arg("-s")
            .arg(&lua)
            .arg(url)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", wrk.display()))
    });
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("wrk failed ({}): {}{}", out.status, text, String::from_utf8_lossy(&out.stderr)));
    }
    parse(&text).ok_or_else(|| format!("cannot read wrk's report: {text}"))
}

/// A wrk duration such as `612.00us`, `1.25ms` or `2.01s`, in µs (wrk prints two decimals;
/// read as integers, without floating point).
fn micros(text: &str) -> Option<u64> {
    let (number, unit_us) = [("us", 1_u64), ("ms", 1_000), ("m", 60_000_000), ("s", 1_000_000)]
        .iter()
        .find_map(|(unit, us)| text.strip_suffix(unit).map(|n| (n, *us)))?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let hundredths: String = fraction.chars().chain(std::iter::repeat('0')).take(2).collect();
    let whole: u64 = whole.parse().ok()?;
    let hundredths: u64 = hundredths.parse().ok()?;
    Some(whole.checked_mul(unit_us)? + hundredths * unit_us / 100)
}

/// The figures of wrk's text report.
pub fn parse(report: &str) -> Option<WrkFigures> {
    let mut figures = WrkFigures::default();
    let mut seen_rps = false;
    for line in report.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", rps] => {
                figures.rps = rps.split('.').next()?.parse().ok()?;
                figures.rps_text = (*rps).to_owned();
                seen_rps = true;
            }
            [n, "requests", "in", ..] => figures.requests = n.parse().ok()?,
            ["Non-2xx", "or", "3xx", "responses:", n] => figures.non_2xx = n.parse().ok()?,
            ["Socket", "errors:", rest @ ..] => {
                // `connect 0, read 0, write 0, timeout 0`
                figures.socket_errors = rest.iter().filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok()).sum();
            }
            ["50%", latency] => figures.p50_us = micros(latency),
            ["99%", latency] => figures.p99_us = micros(latency),
            _ => {}
        }
    }
    seen_rps.then_some(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "Running 10s test @ http://127.0.0.1:9201/api/v1/chat/completions
  3 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     7.57ms    6.51ms  95.72ms   90.69%
    Req/Sec     2.46k   296.81     3.26k    71.67%
  Latency Distribution
     50%    7.05ms
     75%    8.62ms
     90%   11.22ms
     99%   36.84ms
  73552 requests in 10.01s, 48.02MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 5
Requests/sec:   7340.33
Transfer/sec:      4.80MB
";

    #[test]
    fn reads_wrks_report() {
        let figures = parse(REPORT).expect("a report");
        assert_eq!(
            figures,
            WrkFigures {
                rps_text: "7340.33".into(),
                rps: 7340,
                requests: 73_552,
                non_2xx: 5,
                socket_errors: 3,
                p50_us: Some(7_050),
                p99_us: Some(36_840)
            }
        );
        assert_eq!(parse("wrk: connection refused"), None, "no Requests/sec: no report");
    }

    #[test]
    fn the_table_puts_wrks_figures_beside_benchs() {
        assert!(table(&[]).is_empty(), "no wrk run, no table");
        let row = Row {
            name: "gateway-c64",
            database: "sqlite".into(),
            connections: 64,
            figures: parse(REPORT).unwrap_or_default(),
            gateway_cpu_us: Some(239),
            bench_rps_text: "8123.4".into(),
        };
        let lines = table(&[row]);
        assert!(
            lines
                .iter()
                .any(|l| l == "| gateway-c64 | sqlite | 64 | 7340.33 | 8123.4 | 7.050 | 36.840 | 5 | 3 | 239 |"),
            "{lines:#?}"
        );
    }

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(micros("61.00us"), Some(61));
        assert_eq!(micros("1.25ms"), Some(1_250));
        assert_eq!(micros("2.01s"), Some(2_010_000));
        assert_eq!(micros("1.50m"), Some(90_000_000));
        assert_eq!(micros("fast"), None);
    }

    #[test]
    fn the_script_quotes_what_it_sends() {
        let lua = script(r#"{"a":"it's"}"#, "sk-1");
        assert!(lua.contains(r#"wrk.body = '{"a":"it\'s"}'"#), "{lua}");
        assert!(lua.contains("wrk.headers['Authorization'] = 'Bearer sk-1'"), "{lua}");
    }
}
