//! Orchestration: starts the simulator and the gateways, and interprets each selected row of the
//! scenario table on each database: its load (warm-up, measured window, CPU readings), the billing
//! check after it and wrk beside it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::billing::{BillingCheck, billing_check};
use crate::cli::{Cli, database_label, default_gateway_bin};
use crate::load::{self, Endpoint, Load, Outcome};
use crate::procs::{self, Accounts, Rig};
use crate::report::{Row, Tables, failures, machine, report};
use crate::scenarios::{Scenario, Target, Users, selected};
use crate::stats::{micros, ms, per_second, percentile};
use crate::wrk;

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

/// `http://ADDR/api/v3` → (`ADDR`, `/api/v3`): the simulator's address and API base.
fn sim_target(url: &str) -> Result<(String, String), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("unexpected simulator URL {url:?}"))?;
    let (addr, base) = rest.split_once('/').unwrap_or((rest, ""));
    let base = base.trim_matches('/');
    Ok((addr.to_owned(), if base.is_empty() { String::new() } else { format!("/{base}") }))
}

/// The gateway's API base, under which a scenario's route lies.
const GATEWAY_BASE: &str = "/api/v1";

/// What a run keeps from scenario to scenario: the processes and what was measured so far.
struct Runner<'a> {
    cli: &'a Cli,
    rig: Rig,
    /// The simulator's address and API base.
    sim: (String, String),
    ticks_per_s: u64,
    rows: Vec<Row>,
    wrk_rows: Vec<wrk::Row>,
    checks: Vec<BillingCheck>,
    warnings: Vec<String>,
    problems: Vec<String>,
}

/// What a run ends with: the report for stdout and the functional failures (bench exits 1 when
/// there is one).
pub struct Finished {
    /// The report.
    pub report: String,
    /// One line per functional failure (see [`failures`]); speed is never one.
    pub failures: Vec<String>,
}

/// One database's pass over the scenarios.
struct Pass<'a> {
    label: &'a str,
    /// Whether it is the first pass (the simulator's rows run in the first pass only).
    first: bool,
    /// Its accounts, when a gateway scenario is selected.
    accounts: Option<Accounts>,
    /// Successful answers so far by API key (this database's accounts only).
    succeeded: HashMap<String, u64>,
}

/// Runs the selected scenarios on every database. An error is a run that could not go on (a
/// process that did not start or exited, a billing check that could not be read).
pub async fn run(cli: Cli) -> Result<Finished, String> {
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
    let sim = sim_target(&rig.sim_url)?;
    let mut runner = Runner {
        cli: &cli,
        rig,
        sim,
        ticks_per_s,
        rows: Vec::new(),
        wrk_rows: Vec::new(),
        checks: Vec::new(),
        warnings: Vec::new(),
        problems: Vec::new(),
    };
    let extra_accounts = scenarios.iter().map(|s| s.users.extra_accounts()).max().unwrap_or(0);
    let has_gateway = scenarios.iter().any(|s| s.target.is_gateway());
    for (i, (database, label)) in cli.databases.iter().zip(&labels).enumerate() {
        let accounts = if has_gateway {
            eprintln!("database {label}: migrating, creating accounts, starting a gateway");
            let accounts = runner.rig.open(database, extra_accounts, 1)?;
            let rig = &runner.rig;
            eprintln!("gateway http://{} (pid {:?})", rig.gateway_addrs.join(", http://"), rig.gateway_pids());
            Some(accounts)
        } else {
            None
        };
        let mut pass = Pass { label, first: i == 0, accounts, succeeded: HashMap::new() };
        for scenario in &scenarios {
            runner.scenario(scenario, &mut pass).await?;
        }
        runner.rig.check_alive()?;
        runner.warnings.extend(runner.rig.warnings().into_iter().map(|w| format!("{label}: {w}")));
    }
    let Runner { rig, rows, wrk_rows, checks, warnings, problems, .. } = runner;
    rig.shutdown()?;
    let tables = Tables { rows: &rows, wrk_rows: &wrk_rows, checks: &checks, warnings: &warnings, problems: &problems };
    Ok(Finished { report: report(&cli, &machine, &tables, ticks_per_s, ticks_known), failures: failures(&tables) })
}

impl Runner<'_> {
    /// Where `scenario`'s connections go in this pass (connection `i` to `endpoints[i % len]`),
    /// starting the gateways it needs; `None` when it does not run in this pass.
    fn endpoints(&mut self, scenario: &Scenario, pass: &Pass<'_>) -> Result<Option<Vec<Endpoint>>, String> {
        let route = scenario.request.route;
        let replicas = match scenario.target {
            // The simulator alone does not depend on the database: measured in the first pass only.
            Target::Simulator if !pass.first => return Ok(None),
            Target::Simulator => {
                let (addr, base) = &self.sim;
                return Ok(Some(vec![Endpoint::new(addr, &format!("{base}{route}"), "bench")?]));
            }
            Target::Gateway(replicas) => replicas,
        };
        let Some(accounts) = &pass.accounts else { return Ok(None) };
        let keys: &[String] = match scenario.users {
            Users::Hot => std::slice::from_ref(&accounts.hot),
            Users::Many(n) => accounts.many.get(..n).ok_or("fewer accounts than the scenario spreads over")?,
        };
        self.rig.ensure_replicas(replicas)?;
        let addrs = self.rig.gateway_addrs.get(..replicas).ok_or("fewer gateways than replicas")?;
        // Every account on every replica, so each account's load is split evenly over them.
        let mut endpoints = Vec::new();
        for key in keys {
            for addr in addrs {
                endpoints.push(Endpoint::new(addr, &format!("{GATEWAY_BASE}{route}"), key)?);
            }
        }
        Ok(Some(endpoints))
    }

    /// Runs one row of the table in this pass: the load, its figures, the billing check after a
    /// gateway scenario, and wrk beside it when asked for.
    async fn scenario(&mut self, scenario: &Scenario, pass: &mut Pass<'_>) -> Result<(), String> {
        let Some(endpoints) = self.endpoints(scenario, pass)? else { return Ok(()) };
        let cli = self.cli;
        let label = pass.label;
        self.rig.check_alive()?;
        eprintln!("running {} on {label} ({} s warm-up + {} s)", scenario.name, cli.warmup_secs, cli.duration_secs);
        let load = Load {
            endpoints: endpoints.clone(),
            body: Bytes::from_static(scenario.request.body.as_bytes()),
            stream: scenario.request.stream,
            connections: scenario.connections,
            warmup: Duration::from_secs(cli.warmup_secs),
            duration: Duration::from_secs(cli.duration_secs),
            max_requests: cli.max_requests,
        };
        let running = load::start(load);
        let warm_end = running.warm_end;
        tokio::time::sleep_until(tokio::time::Instant::from_std(warm_end)).await;
        let before = Cpu::read(&self.rig);
        let outcome = running.finish().await;
        let elapsed = Instant::now().saturating_duration_since(warm_end);
        let after = Cpu::read(&self.rig);
        if scenario.target.is_gateway() {
            for (endpoint, ok) in endpoints.iter().zip(&outcome.ok_by_endpoint) {
                *pass.succeeded.entry(endpoint.bearer().to_owned()).or_default() += ok;
            }
        }
        let row = summarize(scenario, label, outcome, elapsed, before, after, self.ticks_per_s);
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
        self.rows.push(row);
        if scenario.target.is_gateway() {
            let after = format!("{} on {label}", scenario.name);
            self.checks.push(billing_check(&endpoints, &pass.succeeded, after).await?);
        }
        if let (Some(wrk_bin), true) = (&cli.wrk, scenario.wrk_too()) {
            self.wrk(wrk_bin, scenario, pass, bench_rps_text).await?;
        }
        Ok(())
    }

    /// Drives `scenario` with wrk for the measured time, on the wrk account (or the simulator).
    async fn wrk(
        &mut self,
        wrk_bin: &std::path::Path,
        scenario: &Scenario,
        pass: &Pass<'_>,
        bench_rps_text: String,
    ) -> Result<(), String> {
        let label = pass.label;
        let route = scenario.request.route;
        let (url, key) = match (&pass.accounts, scenario.target) {
            (Some(accounts), Target::Gateway(_)) => (
                format!("http://{}{GATEWAY_BASE}{route}", self.rig.gateway_addrs.first().ok_or("no gateway")?),
                accounts.wrk.clone(),
            ),
            _ => (format!("http://{}{}{route}", self.sim.0, self.sim.1), "bench".to_owned()),
        };
        let duration = Duration::from_secs(self.cli.duration_secs);
        eprintln!("running {} on {label} with wrk ({} s)", scenario.name, duration.as_secs());
        let (bin, body, conns) = (wrk_bin.to_owned(), scenario.request.body, scenario.connections);
        let before = Cpu::read(&self.rig);
        let measured = tokio::task::spawn_blocking(move || wrk::run(&bin, &url, &key, body, conns, duration))
            .await
            .map_err(|e| format!("wrk task: {e}"))?;
        let after = Cpu::read(&self.rig);
        match measured {
            Ok(figures) => {
                let gateway_cpu_us = scenario
                    .target
                    .is_gateway()
                    .then(|| cpu_per_request(before.gateway, after.gateway, self.ticks_per_s, figures.requests))
                    .flatten();
                eprintln!("  wrk: {} req/s, {} non-2xx", figures.rps_text, figures.non_2xx);
                self.wrk_rows.push(wrk::Row {
                    name: scenario.name,
                    database: if scenario.target.is_gateway() { label.to_owned() } else { "–".into() },
                    connections: scenario.connections,
                    figures,
                    gateway_cpu_us,
                    bench_rps_text,
                });
            }
            Err(e) => self.problems.push(format!("{} on {label} with wrk: {e}", scenario.name)),
        }
        Ok(())
    }
}

/// The figures of one scenario from its outcome and the CPU readings around its measured window.
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
    let (_, rps_text) = per_second(ok, micros(elapsed));
    Row {
        name: scenario.name,
        database: if scenario.target.is_gateway() { database.to_owned() } else { "–".into() },
        target: scenario.target,
        stream: scenario.request.stream,
        connections: scenario.connections,
        ok,
        rps_text,
        p50_us: percentile(&latencies, 50),
        p99_us: percentile(&latencies, 99),
        ttfb_p50_us: percentile(&ttfb, 50),
        errors: outcome.errors_total,
        gateway_cpu_us: cpu_per_request(before.gateway, after.gateway, ticks_per_s, measured),
        database_cpu_us: if database.starts_with("postgres") && scenario.target.is_gateway() {
            cpu_per_request(before.database, after.database, ticks_per_s, measured)
        } else {
            None
        },
        sim_cpu_us: cpu_per_request(before.sim, after.sim, ticks_per_s, measured),
        bench_cpu_us: cpu_per_request(before.bench, after.bench, ticks_per_s, measured),
        error_examples: outcome.error_examples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulator_url() {
        assert_eq!(sim_target("http://127.0.0.1:9/api/v3"), Ok(("127.0.0.1:9".to_owned(), "/api/v3".to_owned())));
    }

    #[test]
    fn cpu_math() {
        assert_eq!(cpu_per_request(Some(100), Some(130), 100, 3000), Some(100));
        assert_eq!(cpu_per_request(Some(100), Some(130), 100, 0), None);
        assert_eq!(cpu_per_request(None, Some(130), 100, 10), None);
    }
}
