//! The processes under test: the simulator and the gateway, each a child process of the bench,
//! their working directory, their CPU counters, and their clean-up on every path.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How long the simulator may take to print its address.
const SIM_START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the gateway may take to migrate a fresh database and print its address.
const GATEWAY_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a child may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A started child: its process, the lines of its stdout, and where its stderr goes.
struct Proc {
    name: &'static str,
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr_path: PathBuf,
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next stdout line that `accept` maps to `Some`, waiting at most `timeout`.
    fn wait_for_line<T>(&mut self, timeout: Duration, accept: impl Fn(&str) -> Option<T>) -> Result<T, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "{} printed no start-up line within {} s{}",
                    self.name,
                    timeout.as_secs(),
                    self.log_tail()
                ));
            }
            match self.lines.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    if let Some(found) = accept(&line) {
                        return Ok(found);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.try_wait().ok().flatten().map(|s| s.to_string()).unwrap_or_default();
                    return Err(format!("{} exited before it was ready ({status}){}", self.name, self.log_tail()));
                }
            }
        }
    }

    /// The last lines of the child's stderr, for error messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n  ");
        if tail.is_empty() { String::new() } else { format!("; its stderr ends with:\n  {tail}") }
    }

    /// SIGTERM (through the `kill` command), then SIGKILL if it has not exited in time.
    fn stop(&mut self) -> Result<(), String> {
        if let Ok(Some(_)) = self.child.try_wait() {
            return Ok(());
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("waiting for {}: {e}", self.name)),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err(format!("{} did not stop within {} s of SIGTERM and was killed", self.name, STOP_TIMEOUT.as_secs()))
    }
}

/// The accounts a benchmark drives: one hot account and `users` further ones, each with one key.
#[derive(Debug, Clone)]
pub struct Accounts {
    /// The API key of the hot account (every one-user scenario uses it).
    pub hot: String,
    /// The API keys of the many-users scenarios.
    pub many: Vec<String>,
    /// The API key `--wrk` runs use: an account of their own, so that the calls wrk leaves
    /// unfinished at its end (it does not count them) never touch the billing checks of bench's.
    pub wrk: String,
}

/// The simulator, the gateway processes of the database under test and a scratch directory.
/// Dropping it stops every child and removes the directory, so every error path cleans up.
pub struct Rig {
    dir: PathBuf,
    bin: PathBuf,
    sim: Option<Proc>,
    gateways: Vec<Proc>,
    databases: usize,
    /// The `GATEWAY_*` settings of the current database's gateways.
    env: Vec<(&'static str, String)>,
    /// Whether the gateways enforce concurrency caps (`GATEWAY_CAPS`).
    pub caps: bool,
    /// A spend budget (USD, total) for every benchmark key, when set.
    pub key_budget_usd: Option<String>,
    /// A second platform base URL for the gateways, after the simulator's.
    pub extra_upstream: Option<String>,
    /// The simulator's base URL (`http://ADDR/api/v3`).
    pub sim_url: String,
    /// The addresses (`127.0.0.1:PORT`) of the running gateways.
    pub gateway_addrs: Vec<String>,
}

/// Opening balance of every benchmark account, USD: far more than any run can spend.
const BENCH_BALANCE: &str = "1000000";

impl Rig {
    /// Creates a fresh scratch directory and starts `gateway sim-upstream`.
    pub fn start(gateway_bin: &Path) -> Result<Rig, String> {
        if !gateway_bin.is_file() {
            return Err(format!(
                "gateway binary not found at {}; build it with `cargo build --release -p gateway -p bench` or pass --gateway-bin",
                gateway_bin.display()
            ));
        }
        // The children run in the scratch directory: a relative path would not find the binary there.
        let gateway_bin = &std::fs::canonicalize(gateway_bin)
            .map_err(|e| format!("cannot resolve the gateway binary {}: {e}", gateway_bin.display()))?;
        let dir = std::env::temp_dir().join(format!("gateway-bench-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut rig = Rig {
            dir,
            bin: gateway_bin.to_owned(),
            sim: None,
            gateways: Vec::new(),
            databases: 0,
            env: Vec::new(),
            caps: true,
            key_budget_usd: None,
            extra_upstream: None,
            sim_url: String::new(),
            gateway_addrs: Vec::new(),
        };
        let mut sim = rig.spawn("simulator", &["sim-upstream", "--listen", "127.0.0.1:0"], &[])?;
        rig.sim_url = sim.wait_for_line(SIM_START_TIMEOUT, |line| {
            serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("simulator").and_then(|s| s.as_str()).map(str::to_owned))
        })?;
        rig.sim = Some(sim);
        Ok(rig)
    }

    /// Stops the gateways of the previous database, then on `database` (`sqlite` for a fresh
    /// SQLite file in the scratch directory, or a `postgres://` URL): applies the migrations,
    /// creates the hot account and `users` more through `gateway admin` (as an operator
    /// would; so an existing database works too), and starts `replicas` `gateway serve`
    /// processes on it, all pointed at the simulator.
    pub fn open(&mut self, database: &str, users: usize, replicas: usize) -> Result<Accounts, String> {
        self.env.clear();
        self.stop_gateways()?;
        self.databases += 1;
        let url = if database == "sqlite" {
            format!("sqlite://{}?mode=rwc", self.dir.join(format!("bench-{}.db", self.databases)).display())
        } else {
            database.to_owned()
        };
        let env = [
            ("GATEWAY_LISTEN", "127.0.0.1:0".to_owned()),
            ("GATEWAY_DATABASE_URL", url),
            (
                "GATEWAY_UPSTREAM_URL",
                match &self.extra_upstream {
                    Some(extra) => format!("{},{extra}", self.sim_url),
                    None => self.sim_url.clone(),
                },
            ),
            ("GATEWAY_UPSTREAM_API_KEY", "bench".to_owned()),
            ("GATEWAY_CAPS", self.caps.to_string()),
            // All load comes from 127.0.0.1: lift the per-address connection cap.
            ("GATEWAY_MAX_CONNECTIONS_PER_IP", "65536".to_owned()),
        ];
        self.admin(&["migrate"], &env)?;
        let hot = self.account("hot", &env)?;
        let many = (0..users).map(|i| self.account(&format!("u{i}"), &env)).collect::<Result<Vec<_>, _>>()?;
        let wrk = self.account("wrk", &env)?;
        self.env = env.to_vec();
        self.ensure_replicas(replicas)?;
        Ok(Accounts { hot, many, wrk })
    }

    /// Starts more `gateway serve` processes on the current database until `replicas` run.
    pub fn ensure_replicas(&mut self, replicas: usize) -> Result<(), String> {
        while self.gateways.len() < replicas.max(1) {
            let mut gateway = self.spawn("gateway", &["serve"], &self.env)?;
            let addr = gateway.wait_for_line(GATEWAY_START_TIMEOUT, parse_listening_line)?;
            self.gateways.push(gateway);
            self.gateway_addrs.push(addr);
        }
        Ok(())
    }

    /// A new user with [`BENCH_BALANCE`] and a key with every scope; returns the key.
    fn account(&self, label: &str, env: &[(&str, String)]) -> Result<String, String> {
        let email = format!("bench-{label}-{}@example.com", uuid::Uuid::new_v4().simple());
        let user = self.admin(
            &[
                "admin",
                "user",
                "create",
                "--name",
                label,
                "--email",
                &email,
                "--balance",
                BENCH_BALANCE,
                "--concurrency-limit",
                "100000",
            ],
            env,
        )?;
        let id = user.get("id").and_then(|v| v.as_str()).ok_or("admin user create printed no id")?.to_owned();
        let mut args = vec!["admin", "key", "create", "--user", &id, "--all-scopes", "--name", "bench"];
        if let Some(budget) = &self.key_budget_usd {
            args.extend(["--budget-usd", budget.as_str()]);
        }
        let key = self.admin(&args, env)?;
        key.get("key")
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .ok_or_else(|| "admin key create printed no key".into())
    }

    /// Runs `gateway ARGS…` to completion; its stdout's last line as JSON (`null` when not JSON).
    fn admin(&self, args: &[&str], env: &[(&str, String)]) -> Result<serde_json::Value, String> {
        let mut command = self.command(args, env);
        let out = command.output().map_err(|e| format!("cannot run gateway {}: {e}", args.join(" ")))?;
        if !out.status.success() {
            return Err(format!(
                "gateway {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text.lines().last().and_then(|l| serde_json::from_str(l).ok()).unwrap_or(serde_json::Value::Null))
    }

    /// `gateway ARGS…` in the scratch directory with only the given `GATEWAY_*` variables
    /// (plus `GATEWAY_LOG=warn`).
    fn command(&self, args: &[&str], env: &[(&str, String)]) -> Command {
        let mut command = Command::new(&self.bin);
        command.args(args).current_dir(&self.dir).stdin(Stdio::null());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("GATEWAY_") {
                command.env_remove(key);
            }
        }
        command.env("GATEWAY_LOG", "warn");
        for (key, value) in env {
            command.env(key, value);
        }
        command
    }

    /// Starts `gateway ARGS…`; stdout is read line by line, stderr goes to a file.
    fn spawn(&self, name: &'static str, args: &[&str], env: &[(&str, String)]) -> Result<Proc, String> {
        let stderr_path = self.dir.join(format!("{name}-{}-{}.stderr.log", self.databases, self.gateways.len()));
        let stderr = File::create(&stderr_path).map_err(|e| format!("cannot create {}: {e}", stderr_path.display()))?;
        let mut command = self.command(args, env);
        command.stdout(Stdio::piped()).stderr(stderr);
        let mut child = command.spawn().map_err(|e| format!("cannot start {name} ({}): {e}", self.bin.display()))?;
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            // Drains stdout until the child exits, so the child never blocks on a full pipe.
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    // After start-up nobody listens any more; keep draining anyway.
                    let _ = tx.send(line);
                }
            });
        }
        Ok(Proc { name, child, lines, stderr_path })
    }

    /// The process ids of the running gateways.
    pub fn gateway_pids(&self) -> Vec<u32> {
        self.gateways.iter().map(Proc::pid).collect()
    }

    /// The simulator's process id.
    pub fn sim_pid(&self) -> Option<u32> {
        self.sim.as_ref().map(Proc::pid)
    }

    /// Whether every child is still running; a message naming one that is not.
    pub fn check_alive(&mut self) -> Result<(), String> {
        for proc in self.sim.iter_mut().chain(self.gateways.iter_mut()) {
            if let Ok(Some(status)) = proc.child.try_wait() {
                return Err(format!("{} exited during the benchmark ({status}){}", proc.name, proc.log_tail()));
            }
        }
        Ok(())
    }

    /// The last lines of the children's stderr (warnings logged during the run).
    pub fn warnings(&self) -> Vec<String> {
        self.sim
            .iter()
            .chain(self.gateways.iter())
            .filter_map(|p| {
                let text = std::fs::read_to_string(&p.stderr_path).ok()?;
                let count = text.lines().count();
                (count > 0).then(|| format!("{} logged {count} stderr line(s){}", p.name, p.log_tail()))
            })
            .collect()
    }

    /// Stops the gateways (the simulator keeps running).
    fn stop_gateways(&mut self) -> Result<(), String> {
        let mut problems = Vec::new();
        for mut proc in self.gateways.drain(..) {
            if let Err(e) = proc.stop() {
                problems.push(e);
            }
        }
        self.gateway_addrs.clear();
        if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
    }

    /// Stops the gateways, then the simulator, and removes the scratch directory.
    pub fn shutdown(mut self) -> Result<(), String> {
        self.cleanup()
    }

    fn cleanup(&mut self) -> Result<(), String> {
        let mut problems = Vec::new();
        if let Err(e) = self.stop_gateways() {
            problems.push(e);
        }
        if let Some(mut sim) = self.sim.take()
            && let Err(e) = sim.stop()
        {
            problems.push(e);
        }
        if self.dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&self.dir)
        {
            problems.push(format!("cannot remove {}: {e}", self.dir.display()));
        }
        if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Err(e) = self.cleanup() {
            eprintln!("clean-up: {e}");
        }
    }
}

/// The address from `Gateway on http://ADDR. …` (printed when users exist already).
fn parse_listening_line(line: &str) -> Option<String> {
    let rest = line.strip_prefix("Gateway on http://")?;
    let addr = rest.split_once(". ").map_or(rest, |(addr, _)| addr).trim_end_matches('.');
    (!addr.is_empty()).then(|| addr.to_owned())
}

/// Clock ticks per second for `/proc/<pid>/stat`: `getconf CLK_TCK`, else 100 (and says so).
pub fn clock_ticks() -> (u64, bool) {
    let read = Command::new("getconf")
        .arg("CLK_TCK")
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&n| n > 0);
    match read {
        Some(n) => (n, true),
        None => (100, false),
    }
}

/// User + system CPU time of every process whose command name is `name` (such as the
/// `postgres` server and its backends), in clock ticks; `None` when there is none.
pub fn cpu_ticks_named(name: &str) -> Option<u64> {
    let mut total = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = entry.file_name();
        let Some(pid) = pid.to_str().filter(|p| p.bytes().all(|b| b.is_ascii_digit())) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let comm = stat.split_once('(').and_then(|(_, rest)| rest.rsplit_once(')')).map(|(c, _)| c);
        if comm == Some(name)
            && let Some(ticks) = cpu_ticks(pid)
        {
            total = Some(total.unwrap_or(0) + ticks);
        }
    }
    total
}

/// User + system CPU time of a process in clock ticks (fields 14 and 15 of `/proc/<pid>/stat`).
pub fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it start at field 3.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime = fields.get(11)?.parse::<u64>().ok()?;
    let stime = fields.get(12)?.parse::<u64>().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_line() {
        let line = "Gateway on http://127.0.0.1:4321. Console: http://127.0.0.1:4321/console/. Users exist already; issue a key with: gateway admin key create";
        assert_eq!(parse_listening_line(line), Some("127.0.0.1:4321".to_owned()));
        assert_eq!(parse_listening_line("Demo user usr_1 created with 1.000000 USD."), None);
    }

    #[test]
    fn own_cpu_is_readable() {
        assert!(cpu_ticks("self").is_some());
    }
}
