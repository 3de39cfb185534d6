//! Orchestration: starts the simulator and the gateways, runs each selected scenario on each
//! database (warm-up, measured window, CPU readings), the billing check after it and wrk beside it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::billing::billing_check;
use crate::cli::{Cli, database_label, default_gateway_bin};
use crate::load::{self, Endpoint, Load, Outcome};
use crate::procs::{self, Accounts, Rig};
use crate::report::{Row, Tables, machine, report};
use crate::scenarios::{MANY_USERS, Scenario, Via, body_of, selected};
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

/// `http://ADDR/api/v3` → (`ADDR`, `/api/v3/chat/completions`).
fn sim_target(url: &str) -> Result<(String, String), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("unexpected simulator URL {url:?}"))?;
    let (addr, base) = rest.split_once('/').unwrap_or((rest, ""));
    Ok((addr.to_owned(), format!("/{}/chat/completions", base.trim_matches('/'))))
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

/// Runs the selected scenarios on every database and returns the report.
pub async fn run(cli: Cli) -> Result<String, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
