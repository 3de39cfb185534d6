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

/// The simulator and gateway processes and their scratch directory. Dropping it stops both
/// children and removes the directory, so every error path cleans up.
pub struct Rig {
    dir: PathBuf,
    sim: Option<Proc>,
    gateway: Option<Proc>,
    /// The simulator's base URL (`http://ADDR/api/v3`).
    pub sim_url: String,
    /// The gateway's address (`127.0.0.1:PORT`).
    pub gateway_addr: String,
    /// The demo API key the gateway printed.
    pub demo_key: String,
}

impl Rig {
    /// Creates a fresh scratch directory, starts `gateway sim-upstream`, then `gateway serve`
    /// on a new SQLite database pointed at that simulator.
    pub fn start(gateway_bin: &Path) -> Result<Rig, String> {
        if !gateway_bin.is_file() {
            return Err(format!(
                "gateway binary not found at {}; build it with `cargo build --release -p gateway -p bench` or pass --gateway-bin",
                gateway_bin.display()
            ));
        }
        let dir = std::env::temp_dir().join(format!("gateway-bench-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut rig = Rig {
            dir,
            sim: None,
            gateway: None,
            sim_url: String::new(),
            gateway_addr: String::new(),
            demo_key: String::new(),
        };

        let mut sim = rig.spawn("simulator", gateway_bin, &["sim-upstream", "--listen", "127.0.0.1:0"], &[])?;
        rig.sim_url = sim.wait_for_line(SIM_START_TIMEOUT, |line| {
            serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("simulator").and_then(|s| s.as_str()).map(str::to_owned))
        })?;
        rig.sim = Some(sim);

        let database = format!("sqlite://{}?mode=rwc", rig.dir.join("bench.db").display());
        let env = [
            ("GATEWAY_LISTEN", "127.0.0.1:0".to_owned()),
            ("GATEWAY_DATABASE_URL", database),
            ("GATEWAY_UPSTREAM_URL", rig.sim_url.clone()),
            ("GATEWAY_UPSTREAM_API_KEY", "bench".to_owned()),
            ("GATEWAY_DEMO_BALANCE", "1000000".to_owned()),
        ];
        let mut gateway = rig.spawn("gateway", gateway_bin, &["serve"], &env)?;
        let (addr, key) = gateway.wait_for_line(GATEWAY_START_TIMEOUT, parse_try_line)?;
        rig.gateway = Some(gateway);
        rig.gateway_addr = addr;
        rig.demo_key = key;
        Ok(rig)
    }

    /// Starts `bin args…` in the scratch directory with only the given `GATEWAY_*` variables
    /// (plus `GATEWAY_LOG=warn`); stdout is read line by line, stderr goes to a file.
    fn spawn(&self, name: &'static str, bin: &Path, args: &[&str], env: &[(&str, String)]) -> Result<Proc, String> {
        let stderr_path = self.dir.join(format!("{name}.stderr.log"));
        let stderr = File::create(&stderr_path).map_err(|e| format!("cannot create {}: {e}", stderr_path.display()))?;
        let mut command = Command::new(bin);
        command.args(args).current_dir(&self.dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("GATEWAY_") {
                command.env_remove(key);
            }
        }
        command.env("GATEWAY_LOG", "warn");
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().map_err(|e| format!("cannot start {name} ({}): {e}", bin.display()))?;
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

    /// The gateway's process id.
    pub fn gateway_pid(&self) -> Option<u32> {
        self.gateway.as_ref().map(Proc::pid)
    }

    /// The simulator's process id.
    pub fn sim_pid(&self) -> Option<u32> {
        self.sim.as_ref().map(Proc::pid)
    }

    /// Whether both children are still running; a message naming the one that is not.
    pub fn check_alive(&mut self) -> Result<(), String> {
        for proc in [self.sim.as_mut(), self.gateway.as_mut()].into_iter().flatten() {
            if let Ok(Some(status)) = proc.child.try_wait() {
                return Err(format!("{} exited during the benchmark ({status}){}", proc.name, proc.log_tail()));
            }
        }
        Ok(())
    }

    /// The last lines of both children's stderr (warnings the gateway logged during the run).
    pub fn warnings(&self) -> Vec<String> {
        [self.sim.as_ref(), self.gateway.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let text = std::fs::read_to_string(&p.stderr_path).ok()?;
                let count = text.lines().count();
                (count > 0).then(|| format!("{} logged {count} stderr line(s){}", p.name, p.log_tail()))
            })
            .collect()
    }

    /// Stops the gateway, then the simulator, and removes the scratch directory.
    pub fn shutdown(mut self) -> Result<(), String> {
        self.cleanup()
    }

    fn cleanup(&mut self) -> Result<(), String> {
        let mut problems = Vec::new();
        for mut proc in [self.gateway.take(), self.sim.take()].into_iter().flatten() {
            if let Err(e) = proc.stop() {
                problems.push(e);
            }
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

/// Address and key from `Try: curl -s http://ADDR/api/v1/models -H 'Authorization: Bearer KEY'`.
fn parse_try_line(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("Try: curl -s http://")?;
    let (addr, rest) = rest.split_once("/api/v1/")?;
    let key = rest.split_once("Bearer ")?.1.trim_end().trim_end_matches('\'');
    (!addr.is_empty() && !key.is_empty()).then(|| (addr.to_owned(), key.to_owned()))
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
    fn try_line() {
        let line = "Try: curl -s http://127.0.0.1:4321/api/v1/models -H 'Authorization: Bearer sk-gw-abc'";
        assert_eq!(parse_try_line(line), Some(("127.0.0.1:4321".to_owned(), "sk-gw-abc".to_owned())));
        assert_eq!(parse_try_line("Demo user usr_1 created with 1.000000 USD."), None);
    }

    #[test]
    fn own_cpu_is_readable() {
        assert!(cpu_ticks("self").is_some());
    }
}
