//! Helpers for the tests that run the `gateway` binary: a sandbox folder with its own database, bounded
//! waits on child processes, stdout readers and a tiny HTTP/1.1 client for 127.0.0.1.

// Each test crate uses its own subset; helpers fail the test by panicking, as the assertions do.
#![allow(dead_code, clippy::panic)]

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The longest any one command may run (a debug build migrating a fresh database is well under this).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `serve` may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a running process is checked.
pub const POLL: Duration = Duration::from_millis(10);

/// A fresh temporary folder holding the database; removed on drop.
pub struct Sandbox {
    /// The folder.
    pub dir: PathBuf,
    /// The database, when not the folder's SQLite file.
    database: Option<String>,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let name = format!("gw-cli-it-{}-{}-{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).expect("create the temp dir");
        Sandbox { dir, database: None }
    }

    /// A sandbox whose commands use the database at `url` instead of a SQLite file.
    pub fn with_database(url: String) -> Sandbox {
        let mut sandbox = Sandbox::new();
        sandbox.database = Some(url);
        sandbox
    }

    pub fn database_url(&self) -> String {
        if let Some(url) = &self.database {
            return url.clone();
        }
        format!("sqlite://{}?mode=rwc", self.dir.join("gw.db").display())
    }

    /// The binary with a clean `GATEWAY_*` environment, this sandbox's database and cwd.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gateway"));
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("GATEWAY_") {
                cmd.env_remove(name);
            }
        }
        cmd.args(args).current_dir(&self.dir).env("GATEWAY_DATABASE_URL", self.database_url()).stdin(Stdio::null());
        cmd
    }

    /// Runs `gateway args…` to completion (bounded) and captures its output.
    pub fn run(&self, args: &[&str]) -> Outcome {
        let n = {
            static RUNS: AtomicU64 = AtomicU64::new(0);
            RUNS.fetch_add(1, Ordering::Relaxed)
        };
        let out_path = self.dir.join(format!("run-{n}.out"));
        let err_path = self.dir.join(format!("run-{n}.err"));
        let mut child = self
            .command(args)
            .stdout(File::create(&out_path).expect("stdout file"))
            .stderr(File::create(&err_path).expect("stderr file"))
            .spawn()
            .expect("spawn gateway");
        let status = wait_bounded(&mut child, COMMAND_TIMEOUT)
            .unwrap_or_else(|| panic!("gateway {args:?} did not finish within {COMMAND_TIMEOUT:?}"));
        Outcome {
            args: args.join(" "),
            code: status.code(),
            stdout: std::fs::read_to_string(&out_path).expect("read stdout"),
            stderr: std::fs::read_to_string(&err_path).expect("read stderr"),
        }
    }

    /// Writes `text` to a file in the sandbox and returns its path as text.
    pub fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).expect("write file");
        path.display().to_string()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `child` until it exits or `limit` passes; on timeout the child is killed and `None` returned.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("poll child") {
            return Some(status);
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// What one command did.
#[derive(Debug)]
pub struct Outcome {
    /// The arguments, for messages.
    pub args: String,
    /// The exit code.
    pub code: Option<i32>,
    /// Everything on stdout.
    pub stdout: String,
    /// Everything on stderr.
    pub stderr: String,
}

impl Outcome {
    /// Exit 0 and stdout exactly one JSON object, which is returned.
    pub fn json(&self) -> Value {
        assert_eq!(self.code, Some(0), "gateway {} failed: {}", self.args, self.stderr);
        let values: Vec<Value> = serde_json::Deserializer::from_str(&self.stdout)
            .into_iter::<Value>()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("gateway {}: stdout is not JSON ({e}): {:?}", self.args, self.stdout));
        assert_eq!(
            values.len(),
            1,
            "gateway {}: stdout holds {} JSON values: {:?}",
            self.args,
            values.len(),
            self.stdout
        );
        let value = values.into_iter().next().expect("one value");
        assert!(value.is_object(), "gateway {}: stdout is not an object: {value}", self.args);
        assert_eq!(self.stdout.trim_end().lines().count(), 1, "gateway {}: one line on stdout", self.args);
        value
    }

    /// A non-zero exit, nothing on stdout, and exactly one non-empty line on stderr.
    pub fn assert_one_line_error(&self) {
        assert!(matches!(self.code, Some(c) if c != 0), "gateway {} should fail, exited {:?}", self.args, self.code);
        assert_eq!(self.stdout, "", "gateway {}: stdout must stay empty on error", self.args);
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "gateway {}: stderr must be one line, got {:?}", self.args, self.stderr);
        assert!(!lines[0].trim().is_empty(), "gateway {}: empty error line", self.args);
    }
}

/// Reads the child's stdout lines on a thread, so that the test can wait for them with a deadline.
pub fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Collects lines until one satisfies `stop` (returned last) or the deadline passes.
pub fn lines_until(rx: &mpsc::Receiver<String>, stop: impl Fn(&str) -> bool, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut lines = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = stop(&line);
                lines.push(line);
                if done {
                    return lines;
                }
            }
            Err(_) => break,
        }
    }
    panic!("the expected line never came; stdout so far: {lines:?}");
}

/// The remaining lines of an exited process (bounded wait for the reader thread).
pub fn drain(rx: &mpsc::Receiver<String>) -> Vec<String> {
    let mut lines = Vec::new();
    while let Ok(line) = rx.recv_timeout(STOP_TIMEOUT) {
        lines.push(line);
    }
    lines
}

/// The `IP:PORT` after the first `http://` of `line`.
pub fn address_in(line: &str) -> String {
    let rest = line.split("http://").nth(1).unwrap_or_else(|| panic!("no address in {line:?}"));
    let addr: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':').collect();
    addr.trim_end_matches('.').to_owned()
}

/// `GET path` over a plain HTTP/1.1 connection to 127.0.0.1; returns status and JSON body.
pub fn http_get(addr: &str, path: &str, key: Option<&str>) -> (u16, Value) {
    http_request(addr, "GET", path, key, None)
}

/// One request (a JSON `body` when given) through the test client (`testkit::http`) to the
/// gateway at `addr`; returns status and JSON body (`Null` when the body is not JSON).
pub fn http_request(addr: &str, method: &str, path: &str, key: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let method = testkit::http::Method::from_bytes(method.as_bytes()).expect("method");
    let payload = body.map(|b| serde_json::to_vec(b).expect("JSON")).unwrap_or_default();
    let mut headers = Vec::new();
    if body.is_some() {
        headers.push(("content-type", "application/json"));
    }
    let reply = request(addr, method, path, key, &headers, &payload, COMMAND_TIMEOUT);
    (reply.status, reply.json)
}

/// `method path` with `Authorization: Bearer key` (when given), the `headers` and `body`, through
/// the test client on a fresh connection to `addr`, waiting at most `limit` for each step.
pub fn request(
    addr: &str,
    method: testkit::http::Method,
    path: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
    limit: Duration,
) -> testkit::http::Reply {
    let addr: std::net::SocketAddr = addr.parse().expect("a socket address");
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut all: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    all.extend_from_slice(headers);
    let fetched = testkit::http::blocking(testkit::http::try_fetch(addr, method, path, &all, body, limit));
    fetched.unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Sends SIGTERM to `child` through `kill(1)` and waits (bounded) for a clean exit.
pub fn terminate(child: &mut Child) {
    let pid = child.id().to_string();
    let sent = Command::new("kill").arg("-TERM").arg(&pid).status().expect("run kill");
    assert!(sent.success(), "kill -TERM {pid} failed");
    let status =
        wait_bounded(child, STOP_TIMEOUT).unwrap_or_else(|| panic!("serve did not exit within {STOP_TIMEOUT:?}"));
    assert!(status.success(), "serve exited with {status} after SIGTERM");
}

/// Kills the server if a test fails while it runs.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

pub fn spawn_serve(sandbox: &Sandbox, stderr: &Path) -> Running {
    let child = sandbox
        .command(&["serve"])
        .env("GATEWAY_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(File::create(stderr).expect("stderr file"))
        .spawn()
        .expect("spawn gateway serve");
    Running(child)
}

/// A sandbox on a private PostgreSQL schema when `TEST_DATABASE_URL` is set, else on a SQLite file;
/// and which of the two.
pub fn sandbox(rt: &tokio::runtime::Runtime) -> (Sandbox, &'static str) {
    match rt.block_on(testkit::pg::Schema::from_env("gw_it_proc")) {
        Some(schema) => (Sandbox::with_database(schema.url), "postgres"),
        None => (Sandbox::new(), "sqlite"),
    }
}

/// A user with `balance` and a concurrency limit of 200, and a key carrying `scopes`
/// (comma-separated): (user id, key).
pub fn account(sandbox: &Sandbox, balance: &str, scopes: &str) -> (String, String) {
    account_with(sandbox, balance, scopes, &[])
}

/// [`account`] with more `admin user create` options (such as `--media-quota-bytes N`).
pub fn account_with(sandbox: &Sandbox, balance: &str, scopes: &str, options: &[&str]) -> (String, String) {
    let mut args = vec![
        "admin",
        "user",
        "create",
        "--name",
        "P",
        "--email",
        "p@example.com",
        "--balance",
        balance,
        "--concurrency-limit",
        "200",
    ];
    args.extend_from_slice(options);
    let user = sandbox.run(&args).json();
    let id = user["id"].as_str().expect("user id").to_owned();
    let key = sandbox.run(&["admin", "key", "create", "--user", &id, "--scopes", scopes]).json();
    (id, key["key"].as_str().expect("key").to_owned())
}

/// The lines above `INFO` that the `serve` started by [`serve_against`] under `name` has logged so
/// far: what a failed assertion about its answers shows, so a 500 names its cause.
pub fn logged_problems(sandbox: &Sandbox, name: &str) -> String {
    let log = std::fs::read_to_string(sandbox.dir.join(format!("{name}.err"))).unwrap_or_default();
    log.lines().filter(|l| !l.contains(" INFO ")).collect::<Vec<_>>().join("\n")
}

/// `gateway serve` on 127.0.0.1:0 with every upstream endpoint at the simulator `sim`, with `env` on top
/// (stderr in `<name>.err`); its address once it listens. Its stdout keeps being read, so that the
/// server never blocks on a full pipe.
pub fn serve_against(
    sandbox: &Sandbox,
    sim: std::net::SocketAddr,
    name: &str,
    env: &[(&str, String)],
) -> (Running, String) {
    let mut command = sandbox.command(&["serve"]);
    command
        .env("GATEWAY_LISTEN", "127.0.0.1:0")
        .env("GATEWAY_UPSTREAM_URL", format!("http://{sim}/api/v3"))
        .env("GATEWAY_UPSTREAM_API_KEY", upstream::config::SIM_PLATFORM_KEY)
        // Every endpoint at the test's simulator: none runs inside the server, whose memory tests read.
        .env("GATEWAY_SPEECH_URL", format!("http://{sim}"))
        .env("GATEWAY_SPEECH_API_KEY", upstream::config::SIM_SPEECH_KEY)
        .env("GATEWAY_MESSAGES_URL", format!("http://{sim}/api/compatible"))
        .env("GATEWAY_MEDIA_DIR", sandbox.dir.join("media"));
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command
        .stdout(Stdio::piped())
        .stderr(File::create(sandbox.dir.join(format!("{name}.err"))).expect("stderr file"))
        .spawn()
        .expect("spawn gateway serve");
    let mut running = Running(child);
    let rx = stdout_lines(&mut running.0);
    let lines = lines_until(&rx, |l| l.contains("http://127.0.0.1:"), COMMAND_TIMEOUT);
    let addr = address_in(lines.last().expect("the address line"));
    std::thread::spawn(move || while rx.recv().is_ok() {});
    (running, addr)
}

/// The settings that point `serve` at the simulator's asset control plane and make its video
/// worker quick: polls every 100 ms, 2-s claims (so a dead worker's tasks come back in seconds).
pub fn video_env(sim: std::net::SocketAddr) -> Vec<(&'static str, String)> {
    vec![
        ("GATEWAY_ASSETS_URL", format!("http://{sim}")),
        ("GATEWAY_ASSETS_ACCESS_KEY", upstream::config::SIM_ASSETS_ACCESS_KEY.to_owned()),
        ("GATEWAY_ASSETS_SECRET_KEY", upstream::config::SIM_ASSETS_SECRET_KEY.to_owned()),
        ("GATEWAY_TASK_POLL_INTERVAL", "100ms".to_owned()),
        ("GATEWAY_TASK_LEASE", "2000ms".to_owned()),
    ]
}

/// Every task of `user` (all pages) and every ledger entry, read from `store` after checking that
/// the balance equals the ledger's sum. Read only once no money moves (no task running): two
/// separate reads could otherwise straddle a commit.
async fn read_books(store: &store::Store, user: &domain::UserId) -> (Vec<domain::Task>, Vec<domain::LedgerEntry>) {
    testkit::assert_balance_is_ledger_sum(store, user, "the books read from the database").await;
    let entries = billing::Ledger::entries(store, user, 1_000_000).await.expect("entries");
    (all_tasks(store, user).await, entries)
}

/// Every task of `user`, through every page.
async fn all_tasks(store: &store::Store, user: &domain::UserId) -> Vec<domain::Task> {
    let mut tasks = Vec::new();
    for page in 1.. {
        let request = domain::ports::PageRequest { page, page_size: 100 };
        let (batch, total) =
            domain::ports::TaskStore::list_tasks(store, user, Default::default(), request).await.expect("tasks");
        tasks.extend(batch);
        if u64::try_from(tasks.len()).unwrap_or(u64::MAX) >= total {
            return tasks;
        }
    }
    tasks
}

/// The books of `user` read straight from the database (the servers stopped or idle): every task
/// and ledger entry, with balance = Σ ledger checked.
pub fn books(
    rt: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    user: &str,
) -> (Vec<domain::Task>, Vec<domain::LedgerEntry>) {
    rt.block_on(async {
        let store = store::Store::open(&sandbox.database_url()).await.expect("open the store");
        let books = read_books(&store, &domain::UserId(user.to_owned())).await;
        store.close().await.expect("close the store");
        books
    })
}

/// [`books`] once no task of `user` is running any more (polled, at most `limit`).
pub fn books_when_settled(
    rt: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    user: &str,
    limit: Duration,
) -> (Vec<domain::Task>, Vec<domain::LedgerEntry>) {
    let deadline = Instant::now() + limit;
    let user = domain::UserId(user.to_owned());
    loop {
        let settled = rt.block_on(async {
            let store = store::Store::open(&sandbox.database_url()).await.expect("open the store");
            let tasks = all_tasks(&store, &user).await;
            let open = tasks.iter().filter(|t| !t.status.is_terminal()).count();
            let books = if open == 0 {
                Some(read_books(&store, &user).await)
            } else {
                assert!(Instant::now() < deadline, "{open} tasks still running after {limit:?}: {tasks:?}");
                None
            };
            store.close().await.expect("close the store");
            books
        });
        if let Some(books) = settled {
            return books;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `VmRSS` and `VmHWM` (peak) of process `pid`, in KiB.
pub fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/<pid>/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
