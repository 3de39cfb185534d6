//! The video setting: a gateway whose video ports reach the upstream simulator (on a clock the test
//! moves), a local media store in the server's scratch folder, links signed for the server's own
//! address, and the egress guard trusting the test CA; plus an https receiver on 127.0.0.1 that serves
//! media samples and takes webhooks. The worker does not run by itself: tests call [`VideoEnv::tick`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use service::{Gateway, VideoPorts, VideoSettings};
use tokio::net::TcpListener;

use super::{Db, Env, Reply, STEP_TIMEOUT, Server, unique};

/// Pacing for tests: every pass finds the claimed tasks due again at once.
pub fn test_settings() -> VideoSettings {
    VideoSettings {
        poll_interval: Duration::from_millis(1),
        max_poll_interval: Duration::from_millis(1),
        webhook_retry_base: Duration::from_millis(1),
        max_webhook_delay: Duration::from_millis(1),
        asset_poll: Duration::from_millis(1),
        asset_wait: Duration::from_secs(30),
        ..VideoSettings::default()
    }
}

/// A gateway with video tasks, a simulator, a receiver, one user with a key and a webhook secret: an
/// [`Env`] (reached through it: `env.server`, `env.key`, `env.assert_ledger(…)`) and more.
pub struct VideoEnv {
    /// The gateway, its simulator (its clock moved by [`VideoEnv::tick`]), the user and its key.
    pub env: Env,
    /// The https receiver on 127.0.0.1.
    pub receiver: SocketAddr,
    /// What reached the receiver.
    pub log: Arc<testkit::Log>,
    /// The user's webhook signing secret.
    pub webhook_secret: String,
    /// This test's worker name.
    pub owner: String,
}

impl std::ops::Deref for VideoEnv {
    type Target = Env;

    fn deref(&self) -> &Env {
        &self.env
    }
}

impl VideoEnv {
    /// A gateway whose egress guard allows `allow` (`GATEWAY_EGRESS_ALLOW` syntax, empty for public
    /// addresses only), and a user with `balance`.
    pub async fn new(db: &Db, allow: &str, balance: &str) -> VideoEnv {
        let (ca, identity) = testkit::test_pki();
        let (receiver, log) = testkit::receiver("127.0.0.1:0", identity).await.expect("bind the receiver");
        let (sim_addr, sim) = sim::spawn_with(sim::SimOptions::manual()).await.expect("start the simulator");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let (connect, timeout) = (Duration::from_secs(2), Duration::from_secs(10));
        let upstream = upstream::HttpUpstream::new(upstream::UpstreamConfig::for_simulator(sim_addr, connect, timeout))
            .expect("upstream adapter");
        let assets =
            upstream::HttpAssetUpstream::new(upstream::AssetsConfig::for_simulator(sim_addr, connect, timeout))
                .expect("asset adapter");
        let egress = media::Egress::new(media::EgressConfig {
            allow: media::AllowList::parse(allow).expect("allow list"),
            extra_ca_pem: Some(ca),
            connect_timeout: connect,
            timeout,
            webhook_timeout: None,
            min_rate: None,
        })
        .expect("egress client");
        let media_root = std::env::temp_dir().join(unique("gw-media-"));
        let store = media::LocalMediaStore::new(&media_root).await.expect("media store");
        let server = Server::launch_on(db, listener, move |ports, _| {
            let upstream = Arc::new(upstream);
            let video = VideoPorts {
                upstream: upstream.clone(),
                assets: Arc::new(assets),
                media: Arc::new(store),
                outbound: Arc::new(egress),
                links: Arc::new(media::LinkSigner::new("test link secret", &format!("http://{addr}"))),
                wire: Arc::new(api::wire::WireTasks),
            };
            Gateway::new(ports.with_upstream(upstream).with_video(video)).with_video_settings(test_settings())
        })
        .await;
        let created = server.user_with(balance, 1000, 1 << 20).await;
        let scopes = [domain::Scope::VideoCreate, domain::Scope::TaskRead, domain::Scope::TaskWrite];
        let key = server.key(&created.user.id, &scopes).await.secret;
        VideoEnv {
            env: Env { server, sim, user: created.user, key },
            receiver,
            log,
            webhook_secret: created.webhook_secret,
            owner: unique("worker_"),
        }
    }

    /// `https://127.0.0.1:<receiver>/<path>`.
    pub fn https(&self, path: &str) -> String {
        format!("https://{}/{}", self.receiver, path.trim_start_matches('/'))
    }

    /// `POST /api/v1/tasks` with a JSON body and the user's key.
    pub async fn create(&self, body: &Value) -> Reply {
        self.server.post_json("/api/v1/tasks", Some(&self.key), body).await
    }

    /// `POST /api/v1/tasks` as multipart: the `request` field, then one `media` part per file
    /// (`(content type, bytes)`).
    pub async fn create_multipart(&self, request: &Value, files: &[(&str, Vec<u8>)]) -> Reply {
        let (content_type, body) = multipart(request, files);
        self.server.post("/api/v1/tasks", Some(&self.key), &content_type, &body).await
    }

    /// One worker pass, then the simulator's clock moves half a second.
    pub async fn tick(&self) -> service::TickReport {
        let report = tokio::time::timeout(STEP_TIMEOUT, self.server.gateway.video_tick(&self.owner))
            .await
            .expect("a worker pass timed out")
            .expect("worker pass");
        self.sim.advance(Duration::from_millis(500));
        report
    }

    /// Runs worker passes until task `id` is in status `status` (at most 200 passes); the task.
    pub async fn drive(&self, id: &str, status: &str) -> Value {
        for _ in 0..200 {
            self.tick().await;
            let task = self.task(id).await;
            if task["status"] == status {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("{}", self.ctx(&format!("task {id} never reached {status}: {}", self.task(id).await)));
    }

    /// Runs worker passes until one finds nothing to do (at most 50); every due webhook is then sent.
    pub async fn flush(&self) {
        for _ in 0..50 {
            if self.tick().await == service::TickReport::default() {
                return;
            }
        }
        panic!("{}", self.ctx("the worker kept finding work"));
    }

    /// The webhooks the receiver got for task `id`, in order, each checked against the user's secret;
    /// their `type`s.
    pub fn webhooks(&self, path: &str, id: &str) -> Vec<String> {
        let mut events = Vec::new();
        for seen in self.log.matching(&format!("POST {path}")) {
            let body: Value = serde_json::from_slice(&seen.body).expect("webhook body is JSON");
            if body["task"]["id"] != id {
                continue;
            }
            let timestamp: u64 = seen
                .header("x-svc-webhook-timestamp")
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{}", self.ctx("webhook without a timestamp")));
            let signature = seen.header("x-svc-webhook-signature").expect("webhook signature header");
            let expected = service::webhook_signature(&self.webhook_secret, timestamp, &seen.body).expect("sign");
            assert_eq!(signature, expected, "{}", self.ctx("the webhook signature verifies with the user's secret"));
            let kind = body["type"].as_str().expect("webhook type").to_owned();
            assert_eq!(
                kind,
                format!("task.{}", body["task"]["status"].as_str().unwrap_or("?")),
                "{}",
                self.ctx("type")
            );
            events.push(kind);
        }
        events
    }
}

/// A `multipart/form-data` body: its content type and bytes.
pub fn multipart(request: &Value, files: &[(&str, Vec<u8>)]) -> (String, Vec<u8>) {
    let boundary = "gw-test-boundary-7d1f0c";
    let mut body = Vec::new();
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{request}\r\n").as_bytes(),
    );
    for (i, (content_type, bytes)) in files.iter().enumerate() {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"media\"; filename=\"f{i}\"\r\n\
                 Content-Type: {content_type}\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}
