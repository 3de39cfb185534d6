//! `bench`: starts the upstream simulator and the gateway (SQLite) as child processes, drives
//! chat completions at fixed concurrencies through the gateway and directly at the simulator,
//! and prints throughput, latency, added latency, CPU per request, errors and a billing check.
//! It passes no judgement on speed: it exits 1 only when something failed functionally (a failed
//! request, a billing mismatch, a process that did not start or stopped).

mod billing;
mod cli;
mod load;
mod procs;
mod report;
mod run;
mod scenarios;
mod stats;
mod wrk;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;

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
            result = run::run(cli) => result,
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
        }
    });
    match outcome {
        Ok(finished) => {
            println!("{}", finished.report);
            for failure in &finished.failures {
                eprintln!("bench: {failure}");
            }
            if finished.failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
