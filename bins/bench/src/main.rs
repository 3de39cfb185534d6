//! `bench`: starts the upstream simulator and the gateway (SQLite) as child processes, drives
//! chat completions at fixed concurrencies through the gateway and directly at the simulator,
//! and prints throughput, latency, added latency, CPU per request, errors and a billing check.

mod load;
mod procs;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use serde_json::Value;

use crate::load::{Endpoint, Load, Outcome};
use crate::procs::Rig;
use crate::stats::{micros, ms, per_second, percentile, signed_ms};

/// The chat request every scenario sends.
const CHAT_BODY: &str =
    r#"{"model":"LangA-V4-flash","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16"#;
/// Target: billed non-streaming requests per second through the gateway at 64 connections.
const TARGET_RPS_C64: u64 = 3_000;
/// Target: most added p50 latency at one connection, µs.
const TARGET_ADDED_P50_US: i64 = 500;
/// Target: most added time to first byte for a stream at one connection, µs.
const TARGET_TTFB_DELTA_US: i64 = 1_000;

/// Benchmark of the gateway against the upstream simulator, both on this machine.
#[derive(Parser, Debug)]
#[command(name = "bench", version, args_override_self = true)]
struct Cli {
    /// Measured seconds per scenario (after the warm-up).
    #[arg(long, default_value_t = 10)]
    duration_secs: u64,
    /// Warm-up seconds per scenario, sent but excluded from the figures.
    #[arg(long, default_value_t = 1)]
    warmup_secs: u64,
    /// The `gateway` binary (default: `gateway` next to this executable, i.e. target/release/gateway).
    #[arg(long)]
    gateway_bin: Option<PathBuf>,
    /// Only these scenarios, comma-separated (default: all; see the table for names).
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Most requests per scenario, warm-up included.
    #[arg(long, default_value_t = 2_000_000)]
    max_requests: u64,
}

/// Who a scenario talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Direct,
    Gateway,
}

/// One row of the benchmark.
#[derive(Debug)]
struct Scenario {
    name: &'static str,
    via: Via,
    stream: bool,
    connections: usize,
}

const SCENARIOS: [Scenario; 9] = [
    Scenario { name: "direct-c1", via: Via::Direct, stream: false, connections: 1 },
    Scenario { name: "direct-c16", via: Via::Direct, stream: false, connections: 16 },
    Scenario { name: "direct-c64", via: Via::Direct, stream: false, connections: 64 },
    Scenario { name: "gateway-c1", via: Via::Gateway, stream: false, connections: 1 },
    Scenario { name: "gateway-c16", via: Via::Gateway, stream: false, connections: 16 },
    Scenario { name: "gateway-c64", via: Via::Gateway, stream: false, connections: 64 },
    Scenario { name: "direct-stream-c1", via: Via::Direct, stream: true, connections: 1 },
    Scenario { name: "gateway-stream-c1", via: Via::Gateway, stream: true, connections: 1 },
    Scenario { name: "gateway-stream-c16", via: Via::Gateway, stream: true, connections: 16 },
];

/// The figures of one scenario.
#[derive(Debug)]
struct Row {
    name: &'static str,
    via: Via,
    stream: bool,
    connections: usize,
    ok: u64,
    rps: u64,
    rps_text: String,
    p50_us: Option<u64>,
    p99_us: Option<u64>,
    ttfb_p50_us: Option<u64>,
    errors: u64,
    gateway_cpu_us: Option<u64>,
    sim_cpu_us: Option<u64>,
    bench_cpu_us: Option<u64>,
    error_examples: Vec<String>,
}

/// Billing rows compared with the successful chat answers the gateway gave.
#[derive(Debug)]
struct BillingCheck {
    after: &'static str,
    expected: u64,
    succeeded: u64,
    total: u64,
    active: u64,
    completed: u64,
}

impl BillingCheck {
    fn matches(&self) -> bool {
        self.succeeded == self.expected
            && self.total == self.expected
            && self.completed == self.expected
            && self.active == 0
    }
}

/// CPU time of the three processes, in clock ticks.
#[derive(Debug, Clone, Copy)]
struct Cpu {
    gateway: Option<u64>,
    sim: Option<u64>,
    bench: Option<u64>,
}

impl Cpu {
    fn read(rig: &Rig) -> Cpu {
        Cpu {
            gateway: rig.gateway_pid().and_then(|p| procs::cpu_ticks(&p.to_string())),
            sim: rig.sim_pid().and_then(|p| procs::cpu_ticks(&p.to_string())),
            bench: procs::cpu_ticks("self"),
        }
    }
}

/// CPU µs per request from two tick readings.
fn cpu_per_request(before: Option<u64>, after: Option<u64>, ticks_per_s: u64, requests: u64) -> Option<u64> {
    let ticks = after?.checked_sub(before?)?;
    let us = u128::from(ticks) * 1_000_000 / u128::from(ticks_per_s.max(1));
    (requests > 0).then(|| u64::try_from(us / u128::from(requests)).unwrap_or(u64::MAX))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        tokio::select! {
            result = run(cli) => result,
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
        }
    });
    match outcome {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn selected(filter: &[String]) -> Result<Vec<&'static Scenario>, String> {
    if filter.is_empty() {
        return Ok(SCENARIOS.iter().collect());
    }
    let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
    if let Some(unknown) = filter.iter().find(|f| !names.contains(&f.trim())) {
        return Err(format!("unknown scenario {unknown:?}; known: {}", names.join(", ")));
    }
    Ok(SCENARIOS.iter().filter(|s| filter.iter().any(|f| f.trim() == s.name)).collect())
}

fn default_gateway_bin() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    Ok(me.with_file_name(format!("gateway{}", std::env::consts::EXE_SUFFIX)))
}

/// `http://ADDR/api/v3` → (`ADDR`, `/api/v3/chat/completions`).
fn sim_target(url: &str) -> Result<(String, String), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("unexpected simulator URL {url:?}"))?;
    let (addr, base) = rest.split_once('/').unwrap_or((rest, ""));
    Ok((addr.to_owned(), format!("/{}/chat/completions", base.trim_matches('/'))))
}

async fn run(cli: Cli) -> Result<String, String> {
    let scenarios = selected(&cli.scenarios)?;
    let gateway_bin = match cli.gateway_bin.clone() {
        Some(path) => path,
        None => default_gateway_bin()?,
    };
    let (ticks_per_s, ticks_known) = procs::clock_ticks();
    let machine = machine();
    eprintln!("starting the simulator and the gateway ({})", gateway_bin.display());
    let mut rig = Rig::start(&gateway_bin)?;
    let (sim_addr, sim_path) = sim_target(&rig.sim_url)?;
    let direct = Endpoint::new(&sim_addr, &sim_path, "bench")?;
    let gateway = Endpoint::new(&rig.gateway_addr, "/api/v1/chat/completions", &rig.demo_key)?;
    eprintln!(
        "simulator {} (pid {:?}), gateway http://{} (pid {:?})",
        rig.sim_url,
        rig.sim_pid(),
        rig.gateway_addr,
        rig.gateway_pid()
    );

    let mut rows = Vec::new();
    let mut checks = Vec::new();
    let mut gateway_ok = 0;
    for scenario in scenarios {
        rig.check_alive()?;
        eprintln!("running {} ({} s warm-up + {} s)", scenario.name, cli.warmup_secs, cli.duration_secs);
        let body = match (scenario.stream, scenario.via) {
            (false, _) => format!("{CHAT_BODY}}}"),
            (true, Via::Gateway) => format!("{CHAT_BODY},\"stream\":true}}"),
            // What the gateway sends upstream for a stream: usage forced on.
            (true, Via::Direct) => {
                format!("{CHAT_BODY},\"stream\":true,\"stream_options\":{{\"include_usage\":true}}}}")
            }
        };
        let load = Load {
            endpoint: if scenario.via == Via::Gateway { gateway.clone() } else { direct.clone() },
            body: Bytes::from(body),
            stream: scenario.stream,
            connections: scenario.connections,
            warmup: Duration::from_secs(cli.warmup_secs),
            duration: Duration::from_secs(cli.duration_secs),
            max_requests: cli.max_requests,
        };
        let running = load::start(load);
        let warm_end = running.warm_end;
        tokio::time::sleep_until(tokio::time::Instant::from_std(warm_end)).await;
        let before = Cpu::read(&rig);
        let outcome = running.finish().await;
        let elapsed = Instant::now().saturating_duration_since(warm_end);
        let after = Cpu::read(&rig);
        if scenario.via == Via::Gateway {
            gateway_ok += outcome.ok_total;
        }
        let row = summarize(scenario, outcome, elapsed, before, after, ticks_per_s);
        eprintln!(
            "  {} ok, {} req/s, p50 {} ms, {} errors",
            row.ok,
            row.rps_text,
            row.p50_us.map_or("-".to_owned(), ms),
            row.errors
        );
        for e in &row.error_examples {
            eprintln!("  error: {e}");
        }
        rows.push(row);
        if scenario.name == "gateway-c64" {
            checks.push(billing_check(&gateway, "gateway-c64", gateway_ok).await?);
        }
    }
    if rows.iter().any(|r| r.via == Via::Gateway) {
        checks.push(billing_check(&gateway, "all scenarios", gateway_ok).await?);
    }
    rig.check_alive()?;
    let warnings = rig.warnings();
    rig.shutdown()?;
    Ok(report(&cli, &machine, &rows, &checks, &warnings, ticks_per_s, ticks_known))
}

fn summarize(
    scenario: &Scenario,
    outcome: Outcome,
    elapsed: Duration,
    before: Cpu,
    after: Cpu,
    ticks_per_s: u64,
) -> Row {
    let mut latencies: Vec<u64> = outcome.samples.iter().map(|s| s.latency_us).collect();
    let mut ttfb: Vec<u64> = outcome.samples.iter().map(|s| s.ttfb_us).collect();
    latencies.sort_unstable();
    ttfb.sort_unstable();
    let ok = u64::try_from(latencies.len()).unwrap_or(u64::MAX);
    let measured = ok + outcome.measured_errors;
    let (rps, rps_text) = per_second(ok, micros(elapsed));
    Row {
        name: scenario.name,
        via: scenario.via,
        stream: scenario.stream,
        connections: scenario.connections,
        ok,
        rps,
        rps_text,
        p50_us: percentile(&latencies, 50),
        p99_us: percentile(&latencies, 99),
        ttfb_p50_us: percentile(&ttfb, 50),
        errors: outcome.errors_total,
        gateway_cpu_us: cpu_per_request(before.gateway, after.gateway, ticks_per_s, measured),
        sim_cpu_us: cpu_per_request(before.sim, after.sim, ticks_per_s, measured),
        bench_cpu_us: cpu_per_request(before.bench, after.bench, ticks_per_s, measured),
        error_examples: outcome.error_examples,
    }
}

fn json_u64(v: &Value, pointer: &str) -> Result<u64, String> {
    v.pointer(pointer).and_then(Value::as_u64).ok_or_else(|| format!("no number at {pointer} in {v}"))
}

/// Reads the account's task statistics and compares them with `expected` successful answers.
async fn billing_check(gateway: &Endpoint, after: &'static str, expected: u64) -> Result<BillingCheck, String> {
    let get = |path: &'static str| {
        let endpoint = gateway.with_path(path);
        async move {
            let (status, text) = load::fetch(&endpoint).await?;
            if status != 200 {
                return Err(format!("GET {path}: status {status}: {text}"));
            }
            serde_json::from_str::<Value>(&text).map_err(|e| format!("GET {path}: {e}"))
        }
    };
    let overview = get("/api/v1/overview").await?;
    let tasks = get("/api/v1/tasks?status=completed&page_size=20").await?;
    Ok(BillingCheck {
        after,
        expected,
        succeeded: json_u64(&overview, "/stats/succeeded")?,
        total: json_u64(&overview, "/stats/total")?,
        active: json_u64(&overview, "/stats/active")?,
        completed: json_u64(&tasks, "/pagination/total")?,
    })
}

fn opt(v: Option<u64>, f: fn(u64) -> String) -> String {
    v.map_or("–".to_owned(), f)
}

fn find<'a>(rows: &'a [Row], name: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.name == name)
}

fn delta(a: Option<u64>, b: Option<u64>) -> Option<i64> {
    Some(i64::try_from(a?).ok()? - i64::try_from(b?).ok()?)
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "not measured",
    }
}

fn machine() -> String {
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

fn report(
    cli: &Cli,
    machine: &str,
    rows: &[Row],
    checks: &[BillingCheck],
    warnings: &[String],
    ticks_per_s: u64,
    ticks_known: bool,
) -> String {
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
    line("| scenario | conns | req/s | p50 ms | p99 ms | TTFB p50 ms (stream) | errors | gateway CPU µs/req | sim CPU µs/req | bench CPU µs/req |".into());
    line("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into());
    for r in rows {
        line(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            r.connections,
            r.rps_text,
            opt(r.p50_us, ms),
            opt(r.p99_us, ms),
            if r.stream { opt(r.ttfb_p50_us, ms) } else { "–".into() },
            r.errors,
            if r.via == Via::Gateway { opt(r.gateway_cpu_us, |v| v.to_string()) } else { "–".into() },
            opt(r.sim_cpu_us, |v| v.to_string()),
            opt(r.bench_cpu_us, |v| v.to_string()),
        ));
    }
    line(String::new());
    let added = delta(find(rows, "gateway-c1").and_then(|r| r.p50_us), find(rows, "direct-c1").and_then(|r| r.p50_us));
    let ttfb = delta(
        find(rows, "gateway-stream-c1").and_then(|r| r.ttfb_p50_us),
        find(rows, "direct-stream-c1").and_then(|r| r.ttfb_p50_us),
    );
    line(format!(
        "Added latency p50 at c=1 (gateway p50 − direct p50): {}",
        added.map_or("not measured".into(), |d| format!("{} ms", signed_ms(d)))
    ));
    line(format!(
        "TTFB delta at c=1 (gateway stream TTFB p50 − direct stream TTFB p50): {}",
        ttfb.map_or("not measured".into(), |d| format!("{} ms", signed_ms(d)))
    ));
    for c in checks {
        line(format!(
            "Billing after {}: {} successful gateway chat answers; overview stats succeeded={} total={} active={}; tasks?status=completed total={} → {}",
            c.after,
            c.expected,
            c.succeeded,
            c.total,
            c.active,
            c.completed,
            if c.matches() { "match" } else { "MISMATCH" }
        ));
    }
    line(String::new());
    let c64 = find(rows, "gateway-c64");
    let billing_ok = (!checks.is_empty()).then(|| checks.iter().all(BillingCheck::matches));
    let throughput = c64.map(|r| r.rps >= TARGET_RPS_C64 && r.errors == 0 && billing_ok.unwrap_or(false));
    line("Targets:".into());
    line(format!(
        "- ≥ {TARGET_RPS_C64} billed non-streaming req/s at 64 connections, zero errors, billing rows = successes: {} ({} req/s, {} errors, billing {})",
        verdict(throughput),
        c64.map_or("–".into(), |r| r.rps_text.clone()),
        c64.map_or("–".into(), |r| r.errors.to_string()),
        match billing_ok {
            Some(true) => "matches",
            Some(false) => "does not match",
            None => "not checked",
        }
    ));
    line(format!("- added p50 latency at 1 connection ≤ 0.5 ms: {}", verdict(added.map(|d| d <= TARGET_ADDED_P50_US))));
    line(format!(
        "- streaming TTFB at 1 connection within 1 ms of the simulator's: {}",
        verdict(ttfb.map(|d| d <= TARGET_TTFB_DELTA_US))
    ));
    line(String::new());
    line(format!(
        "CPU from /proc/<pid>/stat utime+stime at {ticks_per_s} ticks/s{}, over the measured window, divided by the requests measured in it; the bench client shares the same CPUs.",
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
    fn scenario_filter() {
        assert_eq!(selected(&[]).map(|s| s.len()), Ok(SCENARIOS.len()));
        let some = selected(&["gateway-c1".into(), "direct-c1".into()]).unwrap_or_default();
        assert_eq!(some.iter().map(|s| s.name).collect::<Vec<_>>(), vec!["direct-c1", "gateway-c1"]);
        assert!(selected(&["nope".into()]).is_err());
    }

    #[test]
    fn simulator_url() {
        assert_eq!(
            sim_target("http://127.0.0.1:9/api/v3"),
            Ok(("127.0.0.1:9".to_owned(), "/api/v3/chat/completions".to_owned()))
        );
    }

    #[test]
    fn cpu_math() {
        assert_eq!(cpu_per_request(Some(100), Some(130), 100, 3000), Some(100));
        assert_eq!(cpu_per_request(Some(100), Some(130), 100, 0), None);
        assert_eq!(cpu_per_request(None, Some(130), 100, 10), None);
    }

    #[test]
    fn bodies_are_json() {
        for body in [format!("{CHAT_BODY}}}"), format!("{CHAT_BODY},\"stream\":true}}")] {
            assert!(serde_json::from_str::<Value>(&body).is_ok_and(|v| v.is_object()));
        }
    }
}
