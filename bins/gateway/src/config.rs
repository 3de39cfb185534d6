//! Configuration: an optional TOML file, then `GATEWAY_*` environment variables, which win.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// A value that must never reach a log: it prints as `*****`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret text, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "*****" })
    }
}

/// The gateway's settings. Field names are the environment names without `GATEWAY_`, lowercased.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    pub listen: String,
    /// `sqlite://…` or `postgres://…`.
    pub database_url: String,
    /// The upstream platform's base URL, or `sim` for the built-in simulator.
    pub upstream_url: String,
    /// Key for the upstream platform.
    pub upstream_api_key: Secret,
    /// The speech service's origin.
    pub speech_url: String,
    /// Key for the speech service.
    pub speech_api_key: Secret,
    /// The message-compatible base of the platform.
    pub messages_url: String,
    /// Whole-call read timeout for synchronous upstream calls.
    pub upstream_timeout_ms: u64,
    /// Connect timeout for upstream calls.
    pub upstream_connect_timeout_ms: u64,
    /// Where stored media lives.
    pub media_dir: String,
    /// Public base URL of this gateway (for signed media links); empty: `http://<listen address>`.
    pub public_url: String,
    /// Hosts or CIDRs that media import and webhooks may reach although not public.
    pub egress_allow: Vec<String>,
    /// Extra PEM roots for outgoing https.
    pub extra_ca_file: String,
    /// Video worker poll interval.
    pub task_poll_interval_ms: u64,
    /// Video task deadline: seconds, or with a unit (`90s`, `30m`, `48h`, `2d`).
    pub task_deadline: String,
    /// First webhook retry delay.
    pub webhook_retry_base_ms: u64,
    /// How long a worker's claim on a task or webhook delivery lasts: after a crash, another
    /// process (or the restarted one) takes the work over once it runs out.
    pub task_lease_ms: u64,
    /// Whether per-model and per-user concurrency caps are enforced (`true`; `false` only for a
    /// trusted single tenant or a benchmark).
    pub caps: bool,
    /// The longest a call waits in the fair queue for a concurrency slot before answering 429.
    pub queue_wait_ms: u64,
    /// How long a replica's lease on concurrency slots lives unless renewed: after a crash its
    /// slots come back within this time.
    pub cap_lease_ms: u64,
    /// How long a replica's liveness lease lives unless renewed (every third of it): once it has
    /// run out, another replica refunds the synchronous calls the dead one was running.
    pub replica_lease_ms: u64,
    /// Asset control plane origin.
    pub assets_url: String,
    /// Asset control plane access key.
    pub assets_access_key: Secret,
    /// Asset control plane secret key.
    pub assets_secret_key: Secret,
    /// Asset control plane region (in the request signatures).
    pub assets_region: String,
    /// The key signed media links are made with; empty: one generated once and kept in the database,
    /// so that every replica shares it.
    pub media_link_secret: Secret,
    /// Bytes of large request bodies buffered at once, across all requests.
    pub body_budget_bytes: u64,
    /// Bytes of large request bodies one user may have buffered at once.
    pub body_budget_user_bytes: u64,
    /// A request body must keep up with this many bytes per second after the grace period (0: no pace).
    pub body_min_rate_bytes: u64,
    /// The time every request body gets before its pace is checked.
    pub body_grace_ms: u64,
    /// A request's header block must arrive within this time of its first byte.
    pub header_read_timeout_ms: u64,
    /// A connection with nothing in flight and nothing received for this long is closed.
    pub idle_timeout_ms: u64,
    /// HTTP/2 keep-alive: a PING after this much silence, the connection closed if unanswered as long.
    pub http2_keepalive_ms: u64,
    /// Connections served at once; more wait in the kernel's accept queue.
    pub max_connections: u64,
    /// Opening balance of the first-run demo user, in USD.
    pub demo_balance: String,
    /// Log filter, such as `info` or `info,store=debug`.
    pub log: String,
    /// `text` (default, for a terminal) or `json` (one object per line, for a log pipeline).
    pub log_format: String,
    // The video worker and its outbound calls (issue 19 §4).
    /// Connect timeout for media imports and webhooks.
    pub egress_connect_timeout_ms: u64,
    /// Whole-call timeout of one webhook delivery attempt.
    pub webhook_timeout_ms: u64,
    /// Whole-call timeout of one media import (all redirects and the body).
    pub media_import_timeout_ms: u64,
    /// The slowest a media import may come in, in bytes per second averaged over
    /// `media_import_rate_window_ms`, once `media_import_rate_grace_ms` have passed; 0: no floor.
    pub media_import_min_rate_bytes: u64,
    /// The window the media import rate is averaged over.
    pub media_import_rate_window_ms: u64,
    /// Time from the start of a media import before its rate is first judged.
    pub media_import_rate_grace_ms: u64,
    /// Most video task steps (import, asset registration, submission, poll) a process runs at once.
    pub worker_task_slots: u64,
    /// Most webhook deliveries a process runs at once.
    pub worker_delivery_slots: u64,
    /// Most task steps, and most webhook deliveries, of one user a process runs at once.
    pub worker_user_slots: u64,
    // Operations ("ops"): retention of the tables that only grow, and who may read `/metrics`.
    /// How long an `Idempotency-Key` is remembered (a duration such as `24h`): a retry after it runs
    /// again, and the prune deletes the claim. Longer than the upstream timeout plus five minutes.
    pub idempotency_ttl: String,
    /// How long ended webhook deliveries and their attempts are kept (a duration such as `30d`).
    pub webhook_retention: String,
    /// How long the owner of a response id (`previous_response_id`) is remembered (`30d`).
    pub response_retention: String,
    /// How often each `serve` process prunes the tables above (a duration such as `10m`).
    pub prune_interval: String,
    /// Most rows one prune batch deletes (one short transaction), 1 to 10,000.
    pub prune_batch: u64,
    /// When set, `GET /metrics` requires `Authorization: Bearer <this token>` (else 401).
    pub metrics_token: Secret,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: "127.0.0.1:8080".into(),
            database_url: "sqlite://data/gateway.db?mode=rwc".into(),
            upstream_url: "sim".into(),
            upstream_api_key: Secret::default(),
            speech_url: "sim".into(),
            speech_api_key: Secret::default(),
            messages_url: "sim".into(),
            upstream_timeout_ms: 600_000,
            upstream_connect_timeout_ms: 5_000,
            media_dir: "data/media".into(),
            public_url: String::new(),
            egress_allow: Vec::new(),
            extra_ca_file: String::new(),
            task_poll_interval_ms: 5_000,
            task_deadline: "48h".into(),
            webhook_retry_base_ms: 10_000,
            task_lease_ms: 120_000,
            caps: true,
            queue_wait_ms: 5_000,
            cap_lease_ms: 15_000,
            replica_lease_ms: 30_000,
            assets_url: "sim".into(),
            assets_access_key: Secret::default(),
            assets_secret_key: Secret::default(),
            assets_region: "cn-beijing".into(),
            media_link_secret: Secret::default(),
            body_budget_bytes: 1024 * 1024 * 1024,
            body_budget_user_bytes: 640 * 1024 * 1024,
            body_min_rate_bytes: 32 * 1024,
            body_grace_ms: 10_000,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 75_000,
            http2_keepalive_ms: 20_000,
            max_connections: 8192,
            demo_balance: "100".into(),
            log: "info".into(),
            log_format: "text".into(),
            egress_connect_timeout_ms: 5_000,
            webhook_timeout_ms: 10_000,
            media_import_timeout_ms: 300_000,
            media_import_min_rate_bytes: 65_536,
            media_import_rate_window_ms: 10_000,
            media_import_rate_grace_ms: 10_000,
            worker_task_slots: 64,
            worker_delivery_slots: 64,
            worker_user_slots: 4,
            idempotency_ttl: "24h".into(),
            webhook_retention: "30d".into(),
            response_retention: "30d".into(),
            prune_interval: "10m".into(),
            prune_batch: 500,
            metrics_token: Secret::default(),
        }
    }
}

/// A configuration that cannot be used; the message names the setting.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(pub String);

/// The environment variables read, each overriding the file's value.
const ENV_KEYS: &[&str] = &[
    "listen",
    "database_url",
    "upstream_url",
    "upstream_api_key",
    "speech_url",
    "speech_api_key",
    "messages_url",
    "upstream_timeout_ms",
    "upstream_connect_timeout_ms",
    "media_dir",
    "public_url",
    "egress_allow",
    "extra_ca_file",
    "task_poll_interval_ms",
    "task_deadline",
    "webhook_retry_base_ms",
    "task_lease_ms",
    "caps",
    "queue_wait_ms",
    "cap_lease_ms",
    "replica_lease_ms",
    "assets_url",
    "assets_access_key",
    "assets_secret_key",
    "assets_region",
    "media_link_secret",
    "body_budget_bytes",
    "body_budget_user_bytes",
    "body_min_rate_bytes",
    "body_grace_ms",
    "header_read_timeout_ms",
    "idle_timeout_ms",
    "http2_keepalive_ms",
    "max_connections",
    "demo_balance",
    "log",
    "log_format",
    "egress_connect_timeout_ms",
    "webhook_timeout_ms",
    "media_import_timeout_ms",
    "media_import_min_rate_bytes",
    "media_import_rate_window_ms",
    "media_import_rate_grace_ms",
    "worker_task_slots",
    "worker_delivery_slots",
    "worker_user_slots",
    "idempotency_ttl",
    "webhook_retention",
    "response_retention",
    "prune_interval",
    "prune_batch",
    "metrics_token",
];

impl Config {
    /// The connection and request-body limits of the HTTP edge.
    pub fn limits(&self) -> api::Limits {
        api::Limits {
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            http2_keepalive: Duration::from_millis(self.http2_keepalive_ms),
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            body_min_rate: self.body_min_rate_bytes,
            body_grace: Duration::from_millis(self.body_grace_ms),
        }
    }

    /// The budget large request bodies share.
    pub fn body_budget(&self) -> api::BodyBudget {
        api::BodyBudget::new(self.body_budget_bytes).with_user_share(self.body_budget_user_bytes)
    }

    /// Loads `path` (or `gateway.toml` when present and no path is given), then applies `env`.
    pub fn load(path: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
        let default_path = Path::new("gateway.toml");
        let file = match path {
            Some(p) => Some(p),
            None if default_path.exists() => Some(default_path),
            None => None,
        };
        let mut table = match file {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).map_err(|e| ConfigError(format!("cannot read {}: {e}", p.display())))?;
                toml::from_str::<toml::Table>(&text).map_err(|e| ConfigError(format!("{}: {e}", p.display())))?
            }
            None => toml::Table::new(),
        };
        let defaults = Config::default();
        for key in ENV_KEYS {
            let Some(value) = env.get(&format!("GATEWAY_{}", key.to_ascii_uppercase())) else { continue };
            table.insert((*key).to_owned(), env_value(key, value, &defaults)?);
        }
        let config: Config =
            toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| ConfigError(e.message().to_owned()))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        self.listen
            .parse::<std::net::SocketAddr>()
            .map_err(|_| ConfigError(format!("listen: {:?} is not an address such as 127.0.0.1:8080", self.listen)))?;
        if !(self.database_url.starts_with("sqlite:") || self.database_url.starts_with("postgres")) {
            return Err(ConfigError("database_url must start with sqlite: or postgres://".into()));
        }
        self.deadline()?;
        for (name, value) in [
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("http2_keepalive_ms", self.http2_keepalive_ms),
            ("max_connections", self.max_connections),
        ] {
            if value == 0 {
                return Err(ConfigError(format!("{name} must be at least 1")));
            }
        }
        domain::UsdAmount::parse_decimal(&self.demo_balance).map_err(|e| ConfigError(format!("demo_balance: {e}")))?;
        if !["text", "json"].contains(&self.log_format.as_str()) {
            return Err(ConfigError(format!("log_format: {:?} is neither text nor json", self.log_format)));
        }
        self.check_ops()
    }

    /// The retention and prune settings.
    fn check_ops(&self) -> Result<(), ConfigError> {
        let stale = Duration::from_millis(self.upstream_timeout_ms).saturating_add(Duration::from_secs(300));
        if self.idempotency_ttl()? <= stale {
            return Err(ConfigError(format!(
                "idempotency_ttl: {:?} must be longer than upstream_timeout_ms plus five minutes ({} s), \
                 or a retry could run a request whose first run is still going",
                self.idempotency_ttl,
                stale.as_secs()
            )));
        }
        self.webhook_retention()?;
        self.response_retention()?;
        self.prune_interval()?;
        if !(1..=10_000).contains(&self.prune_batch) {
            return Err(ConfigError(format!("prune_batch: {} is not between 1 and 10000", self.prune_batch)));
        }
        Ok(())
    }

    /// How long an `Idempotency-Key` claim lives.
    pub fn idempotency_ttl(&self) -> Result<Duration, ConfigError> {
        setting_duration("idempotency_ttl", &self.idempotency_ttl)
    }

    /// How long ended webhook deliveries are kept.
    pub fn webhook_retention(&self) -> Result<Duration, ConfigError> {
        setting_duration("webhook_retention", &self.webhook_retention)
    }

    /// How long response owners are kept.
    pub fn response_retention(&self) -> Result<Duration, ConfigError> {
        setting_duration("response_retention", &self.response_retention)
    }

    /// How often the prune runs.
    pub fn prune_interval(&self) -> Result<Duration, ConfigError> {
        setting_duration("prune_interval", &self.prune_interval)
    }

    /// The video task deadline.
    pub fn deadline(&self) -> Result<Duration, ConfigError> {
        parse_duration(&self.task_deadline).ok_or_else(|| {
            ConfigError(format!(
                "task_deadline: {:?} is not a duration such as 90s, 30m, 48h or 2d",
                self.task_deadline
            ))
        })
    }
}

/// The duration setting `name`, or an error naming it.
fn setting_duration(name: &str, text: &str) -> Result<Duration, ConfigError> {
    parse_duration(text)
        .ok_or_else(|| ConfigError(format!("{name}: {text:?} is not a duration such as 90s, 30m, 48h or 2d")))
}

/// Turns an environment string into the TOML value of the setting's type.
fn env_value(key: &str, value: &str, defaults: &Config) -> Result<toml::Value, ConfigError> {
    let sample = toml::Value::try_from(defaults).map_err(|e| ConfigError(e.to_string()))?;
    match sample.get(key) {
        Some(toml::Value::Integer(_)) => {
            value.trim().parse::<i64>().ok().filter(|n| *n >= 0).map(toml::Value::Integer).ok_or_else(|| {
                ConfigError(format!("GATEWAY_{}: {value:?} is not a whole number", key.to_ascii_uppercase()))
            })
        }
        Some(toml::Value::Boolean(_)) => match value.trim().to_ascii_lowercase().as_str() {
            "true" | "on" | "1" => Ok(toml::Value::Boolean(true)),
            "false" | "off" | "0" => Ok(toml::Value::Boolean(false)),
            _ => Err(ConfigError(format!("GATEWAY_{}: {value:?} is not true or false", key.to_ascii_uppercase()))),
        },
        Some(toml::Value::Array(_)) => Ok(toml::Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_owned()))
                .collect(),
        )),
        _ => Ok(toml::Value::String(value.to_owned())),
    }
}

/// `90`, `90s`, `30m`, `48h`, `2d`.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits.parse().ok()?;
    let seconds = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        "d" => n.checked_mul(86_400)?,
        _ => return None,
    };
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

impl serde::Serialize for Config {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Only used to learn each setting's type; secrets are written as empty strings.
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("listen", &self.listen)?;
        m.serialize_entry("database_url", &self.database_url)?;
        m.serialize_entry("upstream_timeout_ms", &self.upstream_timeout_ms)?;
        m.serialize_entry("upstream_connect_timeout_ms", &self.upstream_connect_timeout_ms)?;
        m.serialize_entry("egress_allow", &self.egress_allow)?;
        m.serialize_entry("task_poll_interval_ms", &self.task_poll_interval_ms)?;
        m.serialize_entry("webhook_retry_base_ms", &self.webhook_retry_base_ms)?;
        m.serialize_entry("task_lease_ms", &self.task_lease_ms)?;
        m.serialize_entry("caps", &self.caps)?;
        m.serialize_entry("queue_wait_ms", &self.queue_wait_ms)?;
        m.serialize_entry("cap_lease_ms", &self.cap_lease_ms)?;
        m.serialize_entry("replica_lease_ms", &self.replica_lease_ms)?;
        m.serialize_entry("body_budget_bytes", &self.body_budget_bytes)?;
        m.serialize_entry("body_budget_user_bytes", &self.body_budget_user_bytes)?;
        m.serialize_entry("body_min_rate_bytes", &self.body_min_rate_bytes)?;
        m.serialize_entry("body_grace_ms", &self.body_grace_ms)?;
        m.serialize_entry("header_read_timeout_ms", &self.header_read_timeout_ms)?;
        m.serialize_entry("idle_timeout_ms", &self.idle_timeout_ms)?;
        m.serialize_entry("http2_keepalive_ms", &self.http2_keepalive_ms)?;
        m.serialize_entry("max_connections", &self.max_connections)?;
        m.serialize_entry("egress_connect_timeout_ms", &self.egress_connect_timeout_ms)?;
        m.serialize_entry("webhook_timeout_ms", &self.webhook_timeout_ms)?;
        m.serialize_entry("media_import_timeout_ms", &self.media_import_timeout_ms)?;
        m.serialize_entry("media_import_min_rate_bytes", &self.media_import_min_rate_bytes)?;
        m.serialize_entry("media_import_rate_window_ms", &self.media_import_rate_window_ms)?;
        m.serialize_entry("media_import_rate_grace_ms", &self.media_import_rate_grace_ms)?;
        m.serialize_entry("worker_task_slots", &self.worker_task_slots)?;
        m.serialize_entry("worker_delivery_slots", &self.worker_delivery_slots)?;
        m.serialize_entry("worker_user_slots", &self.worker_user_slots)?;
        m.serialize_entry("prune_batch", &self.prune_batch)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn defaults_need_no_file() {
        let c = Config::load(None, &env(&[])).expect("defaults are valid");
        assert_eq!(c.listen, "127.0.0.1:8080");
        assert!(c.database_url.starts_with("sqlite://data/"));
        assert_eq!(c.upstream_url, "sim");
    }

    #[test]
    fn environment_wins_over_file() {
        let dir = std::env::temp_dir().join(format!("gw-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("gateway.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:9000\"\nupstream_timeout_ms = 5\n").expect("write");
        let c = Config::load(
            Some(&file),
            &env(&[("GATEWAY_LISTEN", "127.0.0.1:9001"), ("GATEWAY_EGRESS_ALLOW", "127.0.0.1, ::1")]),
        )
        .expect("valid");
        assert_eq!(c.listen, "127.0.0.1:9001");
        assert_eq!(c.upstream_timeout_ms, 5);
        assert_eq!(c.egress_allow, vec!["127.0.0.1".to_owned(), "::1".to_owned()]);
        std::fs::write(&file, "lisen = \"x\"\n").expect("write");
        assert!(Config::load(Some(&file), &env(&[])).is_err(), "unknown key accepted");
    }

    #[test]
    fn bad_values_are_refused() {
        for (k, v) in [
            ("GATEWAY_LISTEN", "nowhere"),
            ("GATEWAY_UPSTREAM_TIMEOUT_MS", "-1"),
            ("GATEWAY_TASK_DEADLINE", "2w"),
            ("GATEWAY_DATABASE_URL", "mysql://x"),
            ("GATEWAY_LOG_FORMAT", "xml"),
        ] {
            assert!(Config::load(None, &env(&[(k, v)])).is_err(), "{k}={v}");
        }
        let json = Config::load(None, &env(&[("GATEWAY_LOG_FORMAT", "json")])).expect("json logs");
        assert_eq!(json.log_format, "json");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("48h"), Some(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("2d"), Some(Duration::from_secs(172_800)));
        for bad in ["", "0", "h", "1.5h", "-1s", "10w"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn worker_and_egress_settings_come_from_the_environment() {
        let c = Config::load(
            None,
            &env(&[
                ("GATEWAY_WORKER_USER_SLOTS", "2"),
                ("GATEWAY_WEBHOOK_TIMEOUT_MS", "3000"),
                ("GATEWAY_MEDIA_IMPORT_MIN_RATE_BYTES", "0"),
            ]),
        )
        .expect("valid");
        assert_eq!((c.worker_user_slots, c.webhook_timeout_ms, c.media_import_min_rate_bytes), (2, 3_000, 0));
        assert_eq!((c.worker_task_slots, c.worker_delivery_slots), (64, 64));
        assert!(Config::load(None, &env(&[("GATEWAY_WORKER_TASK_SLOTS", "many")])).is_err());
    }

    #[test]
    fn retention_settings() {
        let c = Config::load(None, &env(&[])).expect("defaults are valid");
        assert_eq!(c.idempotency_ttl().ok(), Some(Duration::from_secs(86_400)));
        assert_eq!(c.webhook_retention().ok(), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(c.prune_interval().ok(), Some(Duration::from_secs(600)));
        assert_eq!(c.prune_batch, 500);
        let c = Config::load(None, &env(&[("GATEWAY_IDEMPOTENCY_TTL", "2d"), ("GATEWAY_PRUNE_BATCH", "50")]))
            .expect("valid");
        assert_eq!((c.idempotency_ttl().ok(), c.prune_batch), (Some(Duration::from_secs(172_800)), 50));
        for (k, v) in [
            ("GATEWAY_IDEMPOTENCY_TTL", "10m"),
            ("GATEWAY_WEBHOOK_RETENTION", "1w"),
            ("GATEWAY_PRUNE_INTERVAL", "0"),
            ("GATEWAY_PRUNE_BATCH", "0"),
            ("GATEWAY_PRUNE_BATCH", "10001"),
        ] {
            assert!(Config::load(None, &env(&[(k, v)])).is_err(), "{k}={v}");
        }
        let c = Config::load(None, &env(&[("GATEWAY_METRICS_TOKEN", "scrape-me")])).expect("valid");
        assert_eq!(c.metrics_token.expose(), "scrape-me");
        assert!(!format!("{c:?}").contains("scrape-me"), "the token never prints");
    }

    #[test]
    fn secrets_do_not_print() {
        let c = Config::load(None, &env(&[("GATEWAY_UPSTREAM_API_KEY", "topsecret")])).expect("valid");
        assert!(!format!("{c:?}").contains("topsecret"));
        assert_eq!(c.upstream_api_key.expose(), "topsecret");
    }
}
