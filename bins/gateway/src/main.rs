//! `gateway`: reads configuration, starts logging, and runs one subcommand.

mod admin;
mod cli;
mod config;
mod serve;
mod supervisor;
mod wiring;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::config::{Config, LogFormat};

/// The process allocator. A call allocates and frees many short-lived buffers (request and
/// answer bodies, JSON values, boxed futures) from several threads; glibc's allocator spent a
/// sixth of the gateway's CPU on them in a profile (`docs/PERFORMANCE.md`). Without the `mimalloc`
/// feature (a build for heap profilers) the system allocator serves them.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code for an unusable configuration (EX_CONFIG-like, as `sysexits` EX_USAGE).
const EXIT_CONFIG: u8 = 64;

/// Why a command failed: one line for stderr, and the exit code.
#[derive(Debug)]
pub(crate) struct Exit {
    code: u8,
    message: String,
}

impl Exit {
    /// The configuration cannot be used (exit 64): a setting names something that does not work.
    pub(crate) fn config(message: String) -> Exit {
        Exit { code: EXIT_CONFIG, message }
    }
}

impl From<String> for Exit {
    fn from(message: String) -> Exit {
        Exit { code: 1, message }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line: the error and its details, without the usage block.
            let text = e.to_string();
            let line: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:"))
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("{}", line.join(" "));
            return ExitCode::from(2);
        }
    };
    if let Command::Settings { .. } = cli.command {
        // The declarations, not this process's configuration: nothing is loaded.
        print!("{}", config::table::markdown());
        return ExitCode::SUCCESS;
    }
    let config = match Config::environment().and_then(|env| Config::load(cli.config.as_deref(), &env)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    init_tracing(config.log.clone(), config.log_format == LogFormat::Json);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Serve { demo } => serve::run(config, demo).await,
            Command::Migrate => serve::migrate(&config).await.map_err(Exit::from),
            Command::SimUpstream { listen } => serve::sim_upstream(&listen).await.map_err(Exit::from),
            Command::Settings { .. } => Ok(()),
            Command::Admin(cmd) => admin::run(&config, *cmd).await.map_err(Exit::from),
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(exit) => {
            eprintln!("{}", exit.message.lines().next().unwrap_or("failed"));
            ExitCode::from(exit.code)
        }
    }
}

/// Logs go to stderr, so stdout stays one JSON object for admin commands; `json` writes one JSON
/// object per line (the event's fields flattened beside `timestamp`, `level` and `message`).
fn init_tracing(targets: tracing_subscriber::filter::Targets, json: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let text = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
    });
    let json = json.then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .with_target(false)
    });
    let _ = tracing_subscriber::registry().with(text).with(json).with(targets).try_init();
}
