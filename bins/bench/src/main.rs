//! `bench`: starts the upstream simulator and the gateway (SQLite) as child processes, drives
//! chat completions at fixed concurrencies through the gateway and directly at the simulator,
//! and prints throughput, latency, added latency, CPU per request, errors and a billing check.

mod load;
mod procs;
mod stats;
mod wrk;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use serde_json::Value;

use crate::load::{Endpoint, Load, Outcome};
use crate::procs::{Accounts, Rig};
use crate::stats::{micros, ms, per_second, percentile, signed_ms};

/// The chat request every scenario sends.
const CHAT_BODY: &str =
    r#"{"model":"LangA-V4-flash","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16"#;
/// Accounts of the many-users scenarios.
const MANY_USERS: usize = 32;
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
    /// The database of the gateways under test, repeatable: `sqlite` (a fresh file, the default)
    /// or a `postgres://` URL of a database the bench may add users to (a fresh one is best).
    /// Every gateway scenario runs once per database.
    #[arg(long = "database-url", default_value = "sqlite")]
    databases: Vec<String>,
    /// Whether the gateways enforce concurrency caps (`GATEWAY_CAPS`); the accounts' and models'
    /// caps are far above the load, so `true` against `false` measures what the caps cost.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    caps: bool,
    /// Give every benchmark key a spend budget of this many USD (total, far above what a run
    /// spends), so that every call's hold also checks and moves the key's budget.
    #[arg(long)]
    key_budget_usd: Option<String>,
    /// Give the gateways a second platform endpoint at this base URL besides the simulator (for
    /// example one nothing listens on, to measure what a dead endpoint costs the routing).
    #[arg(long)]
    extra_upstream: Option<String>,
    /// Also drive each closed-loop scenario of one account and one gateway (and the simulator's)
    /// with this `wrk` binary (Debian's `wrk`, e.g. /usr/bin/wrk), right after bench's own run and
    /// for as long, and report its figures beside bench's.
    #[arg(long)]
    wrk: Option<PathBuf>,
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
    /// Whether the load is spread over [`MANY_USERS`] accounts (else the one hot account).
    many_users: bool,
    /// Gateway processes on the one database, the connections split evenly over them.
    replicas: usize,
}

const fn direct(name: &'static str, stream: bool, connections: usize) -> Scenario {
    Scenario { name, via: Via::Direct, stream, connections, many_users: false, replicas: 0 }
}

const fn gateway(name: &'static str, stream: bool, connections: usize, many_users: bool, replicas: usize) -> Scenario {
    Scenario { name, via: Via::Gateway, stream, connections, many_users, replicas }
}

/// In running order; the two-replica rows come last, so one-replica rows run with one process.
const SCENARIOS: [Scenario; 12] = [
    direct("direct-c1", false, 1),
    direct("direct-c16", false, 16),
    direct("direct-c64", false, 64),
    gateway("gateway-c1", false, 1, false, 1),
    gateway("gateway-c16", false, 16, false, 1),
    gateway("gateway-c64", false, 64, false, 1),
    gateway("gateway-users32-c64", false, 64, true, 1),
    direct("direct-stream-c1", true, 1),
    gateway("gateway-stream-c1", true, 1, false, 1),
    gateway("gateway-stream-c16", true, 16, false, 1),
    gateway("replicas2-c64", false, 64, false, 2),
    gateway("replicas2-users32-c64", false, 64, true, 2),
];

/// The figures of one scenario on one database.
#[derive(Debug)]
struct Row {
    name: &'static str,
    database: String,
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
    /// CPU of the PostgreSQL server per request (PostgreSQL rows only).
    database_cpu_us: Option<u64>,
    sim_cpu_us: Option<u64>,
    bench_cpu_us: Option<u64>,
    error_examples: Vec<String>,
}

/// Billing rows compared with the successful chat answers the gateways gave, summed over the
/// accounts a scenario used (each account is also compared on its own).
#[derive(Debug)]
struct BillingCheck {
    after: String,
    accounts: usize,
    expected: u64,
    succeeded: u64,
    total: u64,
    active: u64,
    completed: u64,
    /// Whether every account's own figures equal its own successes.
    each_matches: bool,
}

impl BillingCheck {
    fn matches(&self) -> bool {
        self.each_matches
            && self.succeeded == self.expected
            && self.total == self.expected
            && self.completed == self.expected
            && self.active == 0
    }
}

/// CPU time of the processes, in clock ticks (all gateways together; every `postgres` process).
#[derive(Debug, Clone, Copy)]
struct Cpu {
    gateway: Option<u64>,
    database: Option<u64>,
    sim: Option<u64>,
    bench: Option<u64>,
}

impl Cpu {
    fn read(rig: &Rig) -> Cpu {
        let pids = rig.gateway_pids();
        let gateway = (!pids.is_empty())
            .then(|| pids.iter().map(|p| procs::cpu_ticks(&p.to_string())).sum::<Option<u64>>())
            .flatten();
        Cpu {
            gateway,
            database: procs::cpu_ticks_named("postgres"),
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

/// A short name for a database argument: `sqlite`, or `postgres` with host and database but no
/// user or password.
fn database_label(database: &str) -> Result<String, String> {
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

/// The request body of a scenario.
fn body_of(scenario: &Scenario) -> String {
    match (scenario.stream, scenario.via) {
        (false, _) => format!("{CHAT_BODY}}}"),
        (true, Via::Gateway) => format!("{CHAT_BODY},\"stream\":true}}"),
        // What the gateway sends upstream for a stream: usage forced on.
        (true, Via::Direct) => {
            format!("{CHAT_BODY},\"stream\":true,\"stream_options\":{{\"include_usage\":true}}}}")
        }
    }
}

/// Connection `i` of a gateway scenario goes to `endpoints[i % len]`: every account of the
/// scenario on every replica, so each account's load is split evenly over the replicas.
fn gateway_endpoints(scenario: &Scenario, rig: &Rig, accounts: &Accounts) -> Result<Vec<Endpoint>, String> {
    let keys: Vec<&String> = if scenario.many_users { accounts.many.iter().collect() } else { vec![&accounts.hot] };
    let addrs = rig.gateway_addrs.get(..scenario.replicas.max(1)).ok_or("fewer gateways than replicas")?;
    let mut endpoints = Vec::new();
    for key in keys {
        for addr in addrs {
            endpoints.push(Endpoint::new(addr, "/api/v1/chat/completions", key)?);
        }
    }
    Ok(endpoints)
}

async fn run(cli: Cli) -> Result<String, String> {
    let scenarios = selected(&cli.scenarios)?;
    let labels = cli.databases.iter().map(|d| database_label(d)).collect::<Result<Vec<_>, _>>()?;
    let gateway_bin = match cli.gateway_bin.clone() {
        Some(path) => path,
        None => default_gateway_bin()?,
    };
    let (ticks_per_s, ticks_known) = procs::clock_ticks();
    let machine = machine();
    eprintln!("starting the simulator ({})", gateway_bin.display());
    let mut rig = Rig::start(&gateway_bin)?;
    rig.caps = cli.caps;
    rig.key_budget_usd = cli.key_budget_usd.clone();
    rig.extra_upstream = cli.extra_upstream.clone();
    let (sim_addr, sim_path) = sim_target(&rig.sim_url)?;
    let direct = Endpoint::new(&sim_addr, &sim_path, "bench")?;

    let mut rows = Vec::new();
    let mut wrk_rows = Vec::new();
    let mut checks = Vec::new();
    let mut warnings = Vec::new();
    let many = scenarios.iter().any(|s| s.many_users);
    let has_gateway = scenarios.iter().any(|s| s.via == Via::Gateway);
    for (pass, (database, label)) in cli.databases.iter().zip(&labels).enumerate() {
        let accounts = if has_gateway {
            eprintln!("database {label}: migrating, creating accounts, starting a gateway");
            let accounts = rig.open(database, if many { MANY_USERS } else { 0 }, 1)?;
            eprintln!("gateway http://{} (pid {:?})", rig.gateway_addrs.join(", http://"), rig.gateway_pids());
            Some(accounts)
        } else {
            None
        };
        // Successful answers so far by API key (this database's accounts only).
        let mut succeeded: HashMap<String, u64> = HashMap::new();
        for scenario in &scenarios {
            // The simulator alone does not depend on the database: measured in the first pass only.
            if scenario.via == Via::Direct && pass > 0 {
                continue;
            }
            let endpoints = match (&accounts, scenario.via) {
                (Some(accounts), Via::Gateway) => {
                    rig.ensure_replicas(scenario.replicas)?;
                    gateway_endpoints(scenario, &rig, accounts)?
                }
                (None, Via::Gateway) => continue,
                (_, Via::Direct) => vec![direct.clone()],
            };
            rig.check_alive()?;
            eprintln!("running {} on {label} ({} s warm-up + {} s)", scenario.name, cli.warmup_secs, cli.duration_secs);
            let load = Load {
                endpoints: endpoints.clone(),
                body: Bytes::from(body_of(scenario)),
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
            let mut used = Vec::new();
            for (endpoint, ok) in endpoints.iter().zip(&outcome.ok_by_endpoint) {
                if scenario.via == Via::Gateway {
                    *succeeded.entry(endpoint.bearer().to_owned()).or_default() += ok;
                    used.push(endpoint.clone());
                }
            }
            let row = summarize(scenario, label, outcome, elapsed, before, after, ticks_per_s);
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
            let bench_rps_text = row.rps_text.clone();
            rows.push(row);
            if scenario.via == Via::Gateway {
                checks.push(billing_check(&used, &succeeded, format!("{} on {label}", scenario.name)).await?);
            }
            let single = !scenario.stream && !scenario.many_users && scenario.replicas <= 1;
            if let (Some(wrk_bin), true) = (&cli.wrk, single) {
                let (url, key) = match (&accounts, scenario.via) {
                    (Some(accounts), Via::Gateway) => (
                        format!("http://{}/api/v1/chat/completions", rig.gateway_addrs.first().ok_or("no gateway")?),
                        accounts.wrk.clone(),
                    ),
                    _ => (format!("http://{sim_addr}{sim_path}"), "bench".to_owned()),
                };
                eprintln!("running {} on {label} with wrk ({} s)", scenario.name, cli.duration_secs);
                let (bin, body, conns) = (wrk_bin.clone(), body_of(scenario), scenario.connections);
                let duration = Duration::from_secs(cli.duration_secs);
                let before = Cpu::read(&rig);
                let measured = tokio::task::spawn_blocking(move || wrk::run(&bin, &url, &key, &body, conns, duration))
                    .await
                    .map_err(|e| format!("wrk task: {e}"))?;
                let after = Cpu::read(&rig);
                match measured {
                    Ok(figures) => {
                        let gateway_cpu_us = (scenario.via == Via::Gateway)
                            .then(|| cpu_per_request(before.gateway, after.gateway, ticks_per_s, figures.requests))
                            .flatten();
                        eprintln!("  wrk: {} req/s, {} non-2xx", figures.rps_text, figures.non_2xx);
                        wrk_rows.push(wrk::Row {
                            name: scenario.name,
                            database: if scenario.via == Via::Direct { "–".into() } else { label.clone() },
                            connections: scenario.connections,
                            figures,
                            gateway_cpu_us,
                            bench_rps_text,
                        });
                    }
                    Err(e) => warnings.push(format!("{label}: {} with wrk: {e}", scenario.name)),
                }
            }
        }
        rig.check_alive()?;
        warnings.extend(rig.warnings().into_iter().map(|w| format!("{label}: {w}")));
    }
    rig.shutdown()?;
    let tables = Tables { rows: &rows, wrk_rows: &wrk_rows, checks: &checks, warnings: &warnings };
    Ok(report(&cli, &machine, &labels, &tables, ticks_per_s, ticks_known))
}

fn summarize(
    scenario: &Scenario,
    database: &str,
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
        database: if scenario.via == Via::Direct { "–".into() } else { database.to_owned() },
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
        database_cpu_us: if database.starts_with("postgres") && scenario.via == Via::Gateway {
            cpu_per_request(before.database, after.database, ticks_per_s, measured)
        } else {
            None
        },
        sim_cpu_us: cpu_per_request(before.sim, after.sim, ticks_per_s, measured),
        bench_cpu_us: cpu_per_request(before.bench, after.bench, ticks_per_s, measured),
        error_examples: outcome.error_examples,
    }
}

fn json_u64(v: &Value, pointer: &str) -> Result<u64, String> {
    v.pointer(pointer).and_then(Value::as_u64).ok_or_else(|| format!("no number at {pointer} in {v}"))
}

/// Reads the task statistics of every account the scenario used and compares each with the
/// successful answers that account got so far (`succeeded`, by API key).
async fn billing_check(
    used: &[Endpoint],
    succeeded: &HashMap<String, u64>,
    after: String,
) -> Result<BillingCheck, String> {
    let get = |endpoint: &Endpoint, path: &'static str| {
        let endpoint = endpoint.with_path(path);
        async move {
            let (status, text) = load::fetch(&endpoint).await?;
            if status != 200 {
                return Err(format!("GET {path}: status {status}: {text}"));
            }
            serde_json::from_str::<Value>(&text).map_err(|e| format!("GET {path}: {e}"))
        }
    };
    let mut check = BillingCheck {
        after,
        accounts: 0,
        expected: 0,
        succeeded: 0,
        total: 0,
        active: 0,
        completed: 0,
        each_matches: true,
    };
    let mut seen = std::collections::HashSet::new();
    for endpoint in used {
        if !seen.insert(endpoint.bearer()) {
            continue;
        }
        let expected = succeeded.get(endpoint.bearer()).copied().unwrap_or(0);
        let overview = get(endpoint, "/api/v1/overview").await?;
        let tasks = get(endpoint, "/api/v1/tasks?status=completed&page_size=20").await?;
        let own = BillingCheck {
            after: String::new(),
            accounts: 1,
            expected,
            succeeded: json_u64(&overview, "/stats/succeeded")?,
            total: json_u64(&overview, "/stats/total")?,
            active: json_u64(&overview, "/stats/active")?,
            completed: json_u64(&tasks, "/pagination/total")?,
            each_matches: true,
        };
        check.each_matches &= own.matches();
        check.accounts += 1;
        check.expected += own.expected;
        check.succeeded += own.succeeded;
        check.total += own.total;
        check.active += own.active;
        check.completed += own.completed;
    }
    Ok(check)
}

fn opt(v: Option<u64>, f: fn(u64) -> String) -> String {
    v.map_or("–".to_owned(), f)
}

/// The row of `name` on `database` (direct rows are shared by every database).
fn find<'a>(rows: &'a [Row], database: &str, name: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.name == name && (r.via == Via::Direct || r.database == database))
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

/// The target lines of one database.
fn targets(rows: &[Row], label: &str, checks: &[BillingCheck], sqlite_c64: Option<&Row>) -> Vec<String> {
    let mut out = Vec::new();
    let row = |name: &str| find(rows, label, name);
    let c64 = row("gateway-c64");
    let clean = rows.iter().filter(|r| r.via == Via::Gateway && r.database == label).all(|r| r.errors == 0);
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

#[allow(clippy::too_many_arguments)]
/// What a run measured, for [`report`].
struct Tables<'a> {
    rows: &'a [Row],
    wrk_rows: &'a [wrk::Row],
    checks: &'a [BillingCheck],
    warnings: &'a [String],
}

fn report(
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
            if r.via == Via::Gateway { opt(r.gateway_cpu_us, |v| v.to_string()) } else { "–".into() },
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
    fn scenario_filter() {
        assert_eq!(selected(&[]).map(|s| s.len()), Ok(SCENARIOS.len()));
        let some = selected(&["gateway-c1".into(), "direct-c1".into()]).unwrap_or_default();
        assert_eq!(some.iter().map(|s| s.name).collect::<Vec<_>>(), vec!["direct-c1", "gateway-c1"]);
        assert!(selected(&["nope".into()]).is_err());
    }

    #[test]
    fn database_labels() {
        assert_eq!(database_label("sqlite"), Ok("sqlite".to_owned()));
        assert_eq!(
            database_label("postgres://postgres:secret@127.0.0.1:5432/gw_bench?sslmode=disable"),
            Ok("postgres (127.0.0.1/gw_bench)".to_owned())
        );
        assert!(database_label("mysql://h/db").is_err());
    }

    #[test]
    fn shares() {
        assert_eq!(share_pct(2_100, 3_000), Some(70));
        assert_eq!(share_pct(1, 0), None);
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
