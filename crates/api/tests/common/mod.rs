//! Test harness: the real server on `127.0.0.1:0` over a fresh SQLite file (and a private PostgreSQL
//! schema when `TEST_DATABASE_URL` is set), accounts made through `service::Gateway`, and a small
//! hyper HTTP/1.1 client.

// Each test crate uses its own subset of the helpers, which fail the test by panicking.
#![allow(dead_code, clippy::panic)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use domain::ports::TaskStore;
use domain::{
    BillingStatus, ModelKind, Scope, SystemClock, Task, TaskBilling, TaskId, TaskStatus, Timestamp, UsdAmount, User,
    UserId,
};
use http::Method;
use serde_json::Value;
use service::{CreatedKey, Gateway, NewUserRequest, Ports};
use store::Store;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub mod history;
pub mod video;

/// How long any single network step of a test may take before the test fails.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// A database to run the checks against.
#[derive(Debug, Clone)]
pub enum Db {
    /// A fresh SQLite file in a fresh temporary folder.
    Sqlite,
    /// A fresh schema of the PostgreSQL database named by this URL.
    Postgres(String),
}

/// SQLite always; PostgreSQL too when `TEST_DATABASE_URL` is set.
pub fn databases() -> Vec<Db> {
    let mut dbs = vec![Db::Sqlite];
    if let Ok(url) = std::env::var("TEST_DATABASE_URL")
        && !url.trim().is_empty()
    {
        dbs.push(Db::Postgres(url));
    }
    dbs
}

/// A name no other test, test process or earlier run uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{prefix}{}_{}_{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A private schema on the shared PostgreSQL database `base` and a URL whose connections use it.
///
/// Models, prices and the maintenance switch are global rows, so tests that change them must not share
/// tables with other tests; user and task ids are unique anyway. Nothing is ever dropped.
async fn private_postgres_url(base: &str) -> String {
    testkit::pg::Schema::create(base, "gw_it_api").await.url
}

/// A running gateway: its address, the use cases behind it, and the store they share.
pub struct Server {
    /// `sqlite` or `postgres`, for assertion messages.
    pub label: &'static str,
    /// Where it listens.
    pub addr: SocketAddr,
    /// The same use cases the server runs, for setting up accounts.
    pub gateway: Gateway,
    /// The store behind them.
    pub store: Store,
    /// The store's database URL (a test may reach under the store, to corrupt a row on purpose).
    pub url: String,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    dir: Option<PathBuf>,
}

impl Server {
    /// Opens (and migrates) the database, seeds the catalog and starts serving on `127.0.0.1:0`.
    pub async fn start(db: &Db) -> Server {
        Server::launch(db, None).await
    }

    /// The shared start: store, gateway (with `chat` when given), catalog, server.
    async fn launch(db: &Db, chat: Option<upstream::HttpUpstream>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        Server::launch_on(db, listener, |ports, _| match chat {
            Some(chat) => Gateway::new(ports.with_upstream(std::sync::Arc::new(chat))),
            None => Gateway::new(ports),
        })
        .await
    }

    /// Starts serving on `listener` with the use cases `wire` makes from the store's ports (it also
    /// gets a scratch folder that lives as long as the server).
    pub async fn launch_on(
        db: &Db,
        listener: TcpListener,
        wire: impl FnOnce(Ports, &std::path::Path) -> Gateway,
    ) -> Server {
        let dir = std::env::temp_dir().join(unique("gw-api-it-"));
        std::fs::create_dir_all(&dir).expect("create the temp dir");
        let (label, url) = match db {
            Db::Sqlite => ("sqlite", format!("sqlite://{}?mode=rwc", dir.join("gw.db").display())),
            Db::Postgres(base) => ("postgres", private_postgres_url(base).await),
        };
        let store = Store::open(&url).await.expect("open and migrate the store");
        let db_url = url.clone();
        let gateway = wire(Ports::from_store(store.clone(), std::sync::Arc::new(SystemClock)), &dir);
        let catalog = catalog::Catalog::builtin().expect("builtin catalog");
        let added = gateway.seed_catalog(&catalog).await.expect("seed the catalog");
        assert_eq!(added, 15, "{label}: a fresh database gets all fifteen catalog models");
        let addr = listener.local_addr().expect("local addr");
        let (tx, rx) = oneshot::channel::<()>();
        let state = api::AppState::new(gateway.clone());
        let task = tokio::spawn(api::serve(listener, state, async {
            // A sent signal or a dropped sender both stop the server.
            let _ = rx.await;
        }));
        Server { label, addr, gateway, store, url: db_url, shutdown: Some(tx), task: Some(task), dir: Some(dir) }
    }

    /// A second replica on this server's database (its own store, gateway and listener on
    /// `127.0.0.1:0`), with the use cases `wire` makes from its store's ports.
    pub async fn replica(&self, wire: impl FnOnce(Ports) -> Gateway) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let store = Store::connect(&self.url).await.expect("connect the second replica");
        let gateway = wire(Ports::from_store(store.clone(), std::sync::Arc::new(SystemClock)));
        let addr = listener.local_addr().expect("local addr");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(api::serve(listener, api::AppState::new(gateway.clone()), async {
            let _ = rx.await;
        }));
        let (label, url) = (self.label, self.url.clone());
        Server { label, addr, gateway, store, url, shutdown: Some(tx), task: Some(task), dir: None }
    }

    /// Triggers the shutdown future and checks that `serve` returns `Ok` promptly; cleans up.
    pub async fn stop(mut self) {
        self.trigger_shutdown();
        self.wait_stopped().await;
    }

    /// Fires the shutdown future without waiting.
    pub fn trigger_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Waits (bounded) for `serve` to return after [`Server::trigger_shutdown`], then closes the store
    /// and removes the temporary folder.
    pub async fn wait_stopped(&mut self) {
        let task = self.task.take().expect("server still running");
        let returned = tokio::time::timeout(STEP_TIMEOUT, task).await;
        let outcome = returned.unwrap_or_else(|_| panic!("{}: serve did not return after shutdown", self.label));
        outcome.expect("serve task panicked").expect("serve returned an error");
        self.store.clone().close().await.expect("close the store");
        self.remove_dir();
    }

    fn remove_dir(&mut self) {
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// A user with `balance` (a decimal such as `12.5`) created through the use cases.
    pub async fn user(&self, balance: &str) -> User {
        self.user_with(balance, 8, 1 << 20).await.user
    }

    /// A user with `balance`, a concurrency limit and a media quota; also its webhook secret.
    pub async fn user_with(
        &self,
        balance: &str,
        concurrency_limit: i64,
        media_quota_bytes: i64,
    ) -> service::CreatedUser {
        let name = unique("user_");
        self.gateway
            .create_user(NewUserRequest {
                name: name.clone(),
                email: format!("{name}@example.com"),
                role: "user".into(),
                balance: UsdAmount::parse_decimal(balance).expect("balance"),
                concurrency_limit,
                media_quota_bytes,
            })
            .await
            .expect("create user")
    }

    /// A new operator: a user with role `admin` and no balance, and a key of it with `scopes`.
    pub async fn admin(&self, scopes: &[Scope]) -> (User, String) {
        let name = unique("admin_");
        let user = self
            .gateway
            .create_user(NewUserRequest {
                name: name.clone(),
                email: format!("{name}@example.com"),
                role: domain::Role::Admin.as_str().into(),
                balance: domain::UsdAmount::ZERO,
                concurrency_limit: 8,
                media_quota_bytes: 0,
            })
            .await
            .expect("admin")
            .user;
        let key = self.key(&user.id, scopes).await.secret;
        (user, key)
    }

    /// A key for `user` carrying `scopes`.
    pub async fn key(&self, user: &UserId, scopes: &[Scope]) -> CreatedKey {
        self.key_with(user, scopes, domain::KeyLimits::default()).await
    }

    /// A key for `user` carrying `scopes` and `limits`.
    pub async fn key_with(&self, user: &UserId, scopes: &[Scope], limits: domain::KeyLimits) -> CreatedKey {
        self.gateway.create_key(user, scopes.to_vec(), "test", limits).await.expect("create key")
    }

    /// A key for `user` carrying `scopes` and limited to `rpm` requests and `tpm` tokens per minute
    /// (0: no limit of that kind).
    pub async fn key_with_rates(&self, user: &UserId, scopes: &[Scope], rpm: u32, tpm: u32) -> CreatedKey {
        let rates = domain::KeyRates { rpm: std::num::NonZeroU32::new(rpm), tpm: std::num::NonZeroU32::new(tpm) };
        self.key_with(user, scopes, domain::KeyLimits { rates, ..domain::KeyLimits::default() }).await
    }

    /// Stores `task` through the store's `TaskStore` port.
    pub async fn insert_task(&self, task: Task) {
        TaskStore::insert_task(&self.store, task).await.expect("insert task");
    }

    /// `GET path`, with `Authorization: Bearer key` when a key is given.
    pub async fn get(&self, path: &str, key: Option<&str>) -> Reply {
        let auth = key.map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
        self.request(Method::GET, path, &headers).await
    }

    /// One request on a fresh HTTP/1.1 connection.
    pub async fn request(&self, method: Method, path: &str, headers: &[(&str, &str)]) -> Reply {
        testkit::http::fetch(self.addr, method, path, headers, &[]).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // On a failed assertion: stop the server (a dropped sender completes the shutdown future)
        // and remove the SQLite folder.
        self.shutdown.take();
        self.remove_dir();
    }
}

#[allow(unused_imports)] // each test binary uses some of them
pub use testkit::http::{Client, Reply, assert_envelope};

/// True when `text` matches `^-?\d+\.\d{6}$` (the interface's `UsdAmount`).
pub fn is_usd_amount(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let Some((whole, frac)) = digits.split_once('.') else { return false };
    !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.len() == 6
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// True for the RFC 3339 UTC form the gateway writes, such as `2026-11-21T22:28:43.123Z`.
pub fn is_date_time(text: &str) -> bool {
    let b = text.as_bytes();
    let digit_at = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    b.len() >= 20
        && [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18].into_iter().all(digit_at)
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && text.ends_with('Z')
}

/// A task of `user` in `status`, created at `created_millis`, with a few optional fields set.
pub fn task(user: &UserId, status: TaskStatus, created_millis: i64) -> Task {
    let now = Timestamp(created_millis);
    Task {
        id: TaskId(unique("task_")),
        user_id: user.clone(),
        key_id: None,
        model: "videogen-2-0".into(),
        kind: ModelKind::Video,
        status,
        prompt: Some("a red fox running through snow".into()),
        provider: "ark".into(),
        input_mode: Some(domain::InputMode::Text),
        media_type: None,
        media: Vec::new(),
        duration: Some(5),
        resolution: Some(domain::Resolution::P720),
        ratio: Some(domain::Ratio::Wide),
        generate_audio: Some(true),
        billing: TaskBilling {
            status: BillingStatus::Unbilled,
            pricing_version_id: Some(domain::PricingVersionId { model: "videogen-2-0".into(), version: 1 }),
            estimated: UsdAmount::ZERO,
            actual: None,
            balance_after: None,
            usage_json: None,
            budget_keys: domain::BudgetKeys::NONE,
            max_cost: None,
        },
        output_url: (status == TaskStatus::Succeeded).then(|| "https://cdn.example.com/out.mp4".to_owned()),
        last_frame_url: None,
        error_code: (status == TaskStatus::Failed).then(|| "upstream_failed".to_owned()),
        error_message: (status == TaskStatus::Failed).then(|| "the upstream job failed".to_owned()),
        webhook_url: None,
        created_at: now,
        updated_at: now,
        completed_at: status.is_terminal().then_some(now),
        runner: None,
        requested: None,
    }
}

/// The chat upstream's key in tests; the simulator accepts any non-empty one.
pub const SIM_API_KEY: &str = "k";

impl Server {
    /// Like [`Server::start`], with chat completions served by a fresh upstream simulator on
    /// `127.0.0.1:0`, reached with `timeout` per call (and per stream chunk). Keep the returned handle
    /// alive for as long as the server runs.
    pub async fn start_with_chat(db: &Db, timeout: Duration) -> (Server, sim::SimHandle) {
        let (sim_addr, sim) = sim::spawn().await.expect("start the upstream simulator");
        let config = upstream::UpstreamConfig {
            platform_key: SIM_API_KEY.into(),
            ..upstream::UpstreamConfig::for_simulator(sim_addr, Duration::from_secs(2), timeout)
        };
        let chat = upstream::HttpUpstream::new(config).expect("upstream adapter");
        (Server::launch(db, Some(chat)).await, sim)
    }

    /// `POST path` with `body` and `content_type`, `Authorization: Bearer key` when a key is given,
    /// on a fresh HTTP/1.1 connection; the whole reply.
    pub async fn post(&self, path: &str, key: Option<&str>, content_type: &str, body: &[u8]) -> Reply {
        self.post_with(path, key, content_type, &[], body).await
    }

    /// `post` with extra request headers.
    pub async fn post_with(
        &self,
        path: &str,
        key: Option<&str>,
        content_type: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        self.send(Method::POST, path, key, content_type, headers, body).await
    }

    /// `method path` with `body`, on a fresh HTTP/1.1 connection; the whole reply.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        content_type: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        let (parts, incoming, conn) = self.open_with_body(method, path, key, content_type, headers, body).await;
        let reply = Reply { path: path.to_owned(), ..Reply::read(parts, incoming).await };
        conn.abort();
        reply
    }

    /// `POST path` with a JSON `body`; the whole reply.
    pub async fn post_json(&self, path: &str, key: Option<&str>, body: &Value) -> Reply {
        let bytes = serde_json::to_vec(body).expect("serialize the body");
        self.post(path, key, "application/json", &bytes).await
    }

    /// `POST path` on a fresh connection; the response head, its unread body, and the connection task
    /// (abort it to close the connection).
    pub async fn post_streaming(
        &self,
        path: &str,
        key: Option<&str>,
        content_type: &str,
        body: &[u8],
    ) -> (http::response::Parts, hyper::body::Incoming, JoinHandle<Result<(), hyper::Error>>) {
        self.post_streaming_with(path, key, content_type, &[], body).await
    }

    /// `POST path` with JSON `body` and extra `headers`; the whole reply.
    pub async fn post_json_with(&self, path: &str, key: Option<&str>, headers: &[(&str, &str)], body: &Value) -> Reply {
        let bytes = serde_json::to_vec(body).expect("serialize the body");
        self.post_with(path, key, "application/json", headers, &bytes).await
    }

    /// Like `post_streaming`, with extra request headers.
    pub async fn post_streaming_with(
        &self,
        path: &str,
        key: Option<&str>,
        content_type: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (http::response::Parts, hyper::body::Incoming, JoinHandle<Result<(), hyper::Error>>) {
        self.open_with_body(Method::POST, path, key, content_type, headers, body).await
    }

    /// `method path` with a JSON `body` and the key; the whole reply.
    pub async fn send_json(&self, method: Method, path: &str, key: Option<&str>, body: &Value) -> Reply {
        let bytes = serde_json::to_vec(body).expect("serialize the body");
        self.send(method, path, key, "application/json", &[], &bytes).await
    }

    /// `method path` with a body, on a fresh connection; the response head, its unread body, and
    /// the connection task (abort it to close the connection).
    pub async fn open_with_body(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        content_type: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (http::response::Parts, hyper::body::Incoming, JoinHandle<Result<(), hyper::Error>>) {
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut all: Vec<(&str, &str)> = vec![("content-type", content_type)];
        if let Some(auth) = &auth {
            all.push(("authorization", auth));
        }
        all.extend_from_slice(headers);
        let mut client = Client::connect(self.addr).await;
        let (parts, incoming) = client.open(method, path, &all, body).await;
        let conn = client.into_connection();
        (parts, incoming, conn)
    }

    /// The user's balance as the ledger port reports it.
    pub async fn balance(&self, user: &UserId) -> UsdAmount {
        billing::Ledger::balance(&self.store, user).await.expect("balance")
    }

    /// All of the user's ledger entries (newest first) and their sum.
    pub async fn ledger(&self, user: &UserId) -> (Vec<domain::LedgerEntry>, UsdAmount) {
        let entries = billing::Ledger::entries(&self.store, user, 1_000_000).await.expect("ledger entries");
        let sum = UsdAmount::checked_sum(entries.iter().map(|e| e.amount)).expect("ledger sum fits");
        (entries, sum)
    }

    /// Asserts that the user's balance equals the sum of its ledger entries (`testkit`'s check,
    /// naming `context`); returns the balance and the number of entries.
    pub async fn assert_ledger(&self, user: &UserId, context: &str) -> (UsdAmount, usize) {
        let balance = testkit::assert_balance_is_ledger_sum(&self.store, user, context).await;
        (balance, self.ledger(user).await.0.len())
    }
}

/// A `UsdAmount` field of an answer, checked against `^-?\d+\.\d{6}$`.
pub fn amount(v: &Value, ctx: &str) -> UsdAmount {
    let text = v.as_str().unwrap_or_else(|| panic!("{ctx}: amount is not a string: {v}"));
    assert!(is_usd_amount(text), "{ctx}: {text:?} is not a UsdAmount");
    UsdAmount::parse_wire(text).unwrap_or_else(|e| panic!("{ctx}: {text}: {e}"))
}

/// A gateway with the upstream simulator behind it, one user and one key: the setting of the chat,
/// native, image, audio, reasoning and metrics tests (the video setting, [`video::VideoEnv`], is one
/// of these and more).
pub struct Env {
    /// The gateway.
    pub server: Server,
    /// The simulator (kept alive while the gateway runs).
    pub sim: sim::SimHandle,
    /// The user.
    pub user: User,
    /// The user's key secret.
    pub key: String,
}

impl Env {
    /// A gateway whose upstream calls time out after `timeout`, and a user with `balance` whose key
    /// carries `scopes`.
    pub async fn new(db: &Db, balance: &str, timeout: Duration, scopes: &[Scope]) -> Env {
        let (server, sim) = Server::start_with_chat(db, timeout).await;
        let user = server.user(balance).await;
        let key = server.key(&user.id, scopes).await.secret;
        Env { server, sim, user, key }
    }

    /// `what`, prefixed with the database's label.
    pub fn ctx(&self, what: &str) -> String {
        format!("{}: {what}", self.server.label)
    }

    /// `POST path` with JSON `body` and the user's key.
    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.server.post_json(path, Some(&self.key), body).await
    }

    /// The user's balance.
    pub async fn balance(&self) -> UsdAmount {
        self.server.balance(&self.user.id).await
    }

    /// `GET /api/v1/tasks/{id}`.
    pub async fn task(&self, id: &str) -> Value {
        let reply = self.server.get(&format!("/api/v1/tasks/{id}"), Some(&self.key)).await;
        assert_eq!(reply.status, 200, "{}: GET task {id}; {}", self.server.label, String::from_utf8_lossy(&reply.raw));
        reply.json
    }

    /// Polls the task (bounded, ≤ 5 s) until its billing is no longer `reserved`; the task.
    pub async fn settled_task(&self, id: &str) -> Value {
        for _ in 0..100 {
            let task = self.task(id).await;
            if task["billing"]["status"] != "reserved" {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{}: task {id} still has a reserved billing after 5 s", self.server.label);
    }

    /// Every task of the user, through every page of `GET /api/v1/tasks`.
    pub async fn tasks(&self) -> Vec<Value> {
        let mut all = Vec::new();
        for page in 1..=100 {
            let reply = self.server.get(&format!("/api/v1/tasks?page_size=100&page={page}"), Some(&self.key)).await;
            assert_eq!(reply.status, 200, "{}: list tasks; {}", self.server.label, String::from_utf8_lossy(&reply.raw));
            all.extend(reply.json["data"].as_array().cloned().unwrap_or_default());
            if reply.json["pagination"]["total_pages"].as_u64().is_none_or(|n| n <= page) {
                return all;
            }
        }
        panic!("{}: more than 100 pages of tasks", self.server.label);
    }

    /// The balance equals the sum of the ledger entries; returns the balance and the number of
    /// entries.
    pub async fn assert_ledger(&self, what: &str) -> (UsdAmount, usize) {
        self.server.assert_ledger(&self.user.id, &self.ctx(what)).await
    }

    /// The books after a scenario: the balance equals the sum of the ledger entries, and no task's
    /// billing is left `reserved`. Returns the balance, the number of ledger entries and of tasks.
    pub async fn assert_books(&self, what: &str) -> (UsdAmount, usize, usize) {
        let (balance, entries) = self.assert_ledger(what).await;
        let tasks = self.tasks().await;
        for t in &tasks {
            assert_ne!(t["billing"]["status"], "reserved", "{}: a task was left reserved: {t}", self.ctx(what));
        }
        (balance, entries, tasks.len())
    }
}

impl Server {
    /// Sends only the head of `POST path` declaring `Content-Length: length` (a JSON body) on a raw
    /// socket, and returns the first answer bytes the server writes without having read any body.
    pub async fn declare_body(&self, path: &str, key: &str, length: u64) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = TcpStream::connect(self.addr).await.expect("connect");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n\
             Content-Length: {length}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("write the head");
        let mut answer = vec![0u8; 4096];
        let n = tokio::time::timeout(STEP_TIMEOUT, stream.read(&mut answer))
            .await
            .expect("answered without the body")
            .expect("read");
        String::from_utf8_lossy(&answer[..n]).into_owned()
    }
}

/// Runs all `futures` concurrently on this task and returns their outputs in order.
pub async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut set = Vec::with_capacity(futures.len());
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut outputs: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if outputs[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => outputs[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("every future finished")).collect()
}
