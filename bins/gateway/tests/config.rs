//! The binary refuses a configuration it cannot use before it does anything: an unknown `GATEWAY_*`
//! variable, a log filter that does not parse, a number out of range, a bad file key; each exits
//! with code 64 and one line on stderr that names the setting, and never prints a secret.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::io::Read;
use std::process::Stdio;

use common::{COMMAND_TIMEOUT, Sandbox, wait_bounded};

/// Runs `gateway migrate` with `env` (and `--config file` when given): exit code, stdout, stderr.
fn migrate(sandbox: &Sandbox, env: &[(&str, &str)], file: Option<&str>) -> (Option<i32>, String, String) {
    let mut args = vec!["migrate"];
    if let Some(file) = file {
        args.extend(["--config", file]);
    }
    let mut cmd = sandbox.command(&args);
    cmd.envs(env.iter().copied()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn gateway");
    let status = wait_bounded(&mut child, COMMAND_TIMEOUT).unwrap_or_else(|| panic!("{env:?}: no exit"));
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().expect("stdout").read_to_string(&mut out).expect("read stdout");
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read stderr");
    (status.code(), out, err)
}

/// Exit 64, nothing on stdout, one line on stderr naming `name`.
fn assert_refused(sandbox: &Sandbox, env: &[(&str, &str)], file: Option<&str>, name: &str) -> String {
    let (code, out, err) = migrate(sandbox, env, file);
    assert_eq!(code, Some(64), "{env:?}: exit code; stderr {err:?}");
    assert_eq!(out, "", "{env:?}: nothing on stdout");
    assert_eq!(err.lines().count(), 1, "{env:?}: one line on stderr: {err:?}");
    assert!(err.contains(name), "{env:?}: the error names {name}: {err:?}");
    err
}

#[test]
fn an_unusable_configuration_stops_the_binary_with_the_setting_named() {
    let sandbox = Sandbox::new();
    assert_refused(&sandbox, &[("GATEWAY_LISTN", "127.0.0.1:9000")], None, "GATEWAY_LISTN");
    assert_refused(&sandbox, &[("GATEWAY_LOG", "store=loud")], None, "GATEWAY_LOG");
    assert_refused(&sandbox, &[("GATEWAY_CAP_LEASE", "10ms")], None, "GATEWAY_CAP_LEASE");
    assert_refused(&sandbox, &[("GATEWAY_PRUNE_INTERVAL", "soon")], None, "GATEWAY_PRUNE_INTERVAL");
    assert_refused(&sandbox, &[("GATEWAY_TRUSTED_PROXIES", "10.0.0.0/8,lb.local")], None, "GATEWAY_TRUSTED_PROXIES");
    let err = assert_refused(
        &sandbox,
        &[("GATEWAY_METRICS_TOKEN", "never-printed"), ("GATEWAY_WORKER_USER_SLOTS", "many")],
        None,
        "GATEWAY_WORKER_USER_SLOTS",
    );
    assert!(!err.contains("never-printed"), "{err}");
    let file = sandbox.file("bad.toml", "worker_task_slots = 4\nprune_batchh = 10\n");
    assert_refused(&sandbox, &[], Some(&file), "prune_batchh");
    // The same settings, valid, are used.
    let (code, out, err) = migrate(
        &sandbox,
        &[
            ("GATEWAY_LOG", "warn,store=debug"),
            ("GATEWAY_CAP_LEASE", "1000ms"),
            ("GATEWAY_TRUSTED_PROXIES", "10.0.0.0/8, ::1"),
        ],
        None,
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("migrations_applied"), "{out}");
}
