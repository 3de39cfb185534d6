//! Configuration: an optional TOML file, then `GATEWAY_*` environment variables, which win.
//!
//! Each setting is declared once, in [`settings!`]: its doc, its name (the file key; the variable is
//! `GATEWAY_` and the name in capitals), its type and its default. `figment` layers the file over
//! the defaults and the environment over the file, and serde reads the result into [`Config`], so
//! an unknown key or variable, a value of the wrong type, a duration or log filter that does not
//! parse and a number outside its range are each a start-up error that names the setting. Every
//! duration is a [`Span`]; a default the crates also need is their `DEFAULT`, named here, so each
//! value is written once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use api::Limits;
use domain::UsdAmount;
use figment::value::{Dict, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::Deserialize;
use service::{AdmissionSettings, VideoSettings};
use store::PrunePolicy;
use tracing_subscriber::filter::Targets;

pub use self::values::{LogFormat, MediaLinks, ModelAliasSetting, Secret, UpstreamEndpoint, UpstreamPool};
use self::values::{
    Span, at_least, database_url, ip_list, list, log_filter, media_location, socket_address, span_at_least, usd, within,
};

pub mod declared;
pub mod table;
mod values;

use self::declared::PREFIX;

/// Declares the settings once: the struct (`pub` fields with their docs and serde attributes), its
/// `Default`, where the gateway's defaults are set, and [`Config::declared`], from which the
/// README's table is printed (`gateway settings --markdown`). A default the crates also need
/// without a configuration is their `DEFAULT` (`api::Limits::DEFAULT`, …), named here rather than
/// written twice. A field's doc comes first, then its serde attributes.
macro_rules! settings {
    ($(#[$outer:meta])* pub struct $name:ident {
        $($(#[doc = $doc:literal])* $(#[serde($($serde:tt)*)])* $field:ident: $ty:ty = $default:expr,)*
    }) => {
        $(#[$outer])*
        pub struct $name {
            $($(#[doc = $doc])* $(#[serde($($serde)*)])* pub $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> $name {
                $name { $($field: $default,)* }
            }
        }

        impl $name {
            /// Every setting as declared: its name, doc, kind of value and default, in order.
            pub fn declared() -> Vec<declared::Declared> {
                let defaults = $name::default();
                vec![$(declared::Declared {
                    name: stringify!($field),
                    doc: &[$($doc),*],
                    kind: <$ty as declared::Shown>::KIND,
                    default: declared::Shown::shown(&defaults.$field),
                    file_only: <$ty as declared::Shown>::FILE_ONLY,
                },)*]
            }
        }
    };
}

settings! {
    /// The gateway's settings. Field names are the environment names without `GATEWAY_`, lowercased.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    pub struct Config {
        /// Address to listen on.
        #[serde(deserialize_with = "socket_address")]
        listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8080)),
        /// `sqlite://…` or `postgres://…`.
        #[serde(deserialize_with = "database_url")]
        database_url: String = "sqlite://data/gateway.db?mode=rwc".into(),
        /// The upstream platform's base URL, or `sim` for the built-in simulator; several,
        /// comma-separated, spread calls over them and fail over between them.
        upstream_url: String = "sim".into(),
        /// Key for the upstream platform: one for every URL, or one per URL in the same order
        /// (another count stops the start with exit 64).
        upstream_api_key: Secret = Secret::default(),
        /// The speech service's origin (or several, comma-separated).
        speech_url: String = "sim".into(),
        /// Key for the speech service (one, or one per origin).
        speech_api_key: Secret = Secret::default(),
        /// The message-compatible base of the platform (or several, comma-separated; they take
        /// the platform's keys: one, or one per base).
        messages_url: String = "sim".into(),
        /// Upstream endpoints in full, in the configuration file only (`[[upstream_endpoints]]`
        /// with `name`, `pool`, `url`, `keys`, and optionally `weight`, `priority`,
        /// `max_in_flight`, `rpm`, `models`): a pool given here replaces that pool's URL and key
        /// settings.
        upstream_endpoints: Vec<UpstreamEndpoint> = Vec::new(),
        /// Model aliases, in the configuration file only (`[[model_aliases]]` with `name` and
        /// `models`, 1 to 4 of one kind): set at every start as `gateway admin alias set` sets
        /// them; a chat, message or response call naming one falls back from each model to the
        /// next.
        model_aliases: Vec<ModelAliasSetting> = Vec::new(),
        /// Whole-call read timeout for synchronous upstream calls.
        upstream_timeout: Span = Span::secs(600),
        /// Connect timeout for upstream calls.
        upstream_connect_timeout: Span = Span::secs(5),
        /// Where stored media lives when `media_store` is not set.
        media_dir: String = "data/media".into(),
        // Media storage shared by replicas (issue 21).
        /// Where uploaded and imported media is kept: `file:<dir>`, or `s3://<bucket>/<prefix>` on
        /// S3 or a compatible server (credentials from `AWS_ACCESS_KEY_ID` and
        /// `AWS_SECRET_ACCESS_KEY`, and `AWS_SESSION_TOKEN`); empty: `file:` and `media_dir`. Checked
        /// at start by writing, reading and deleting a probe object (exit 64 when that fails).
        #[serde(deserialize_with = "media_location")]
        media_store: Option<media::MediaLocation> = None,
        /// An S3-compatible server's URL (requests are path-style then); empty: AWS.
        s3_endpoint: String = String::new(),
        /// The region S3 requests are signed for.
        s3_region: String = "us-east-1".into(),
        /// Whether `s3_endpoint` may be plain `http://` (a local test server).
        s3_allow_http: bool = false,
        /// How the upstream fetches stored media: `gateway` (signed `/media/` links any replica
        /// serves) or `presigned` (the object store's own pre-signed URLs).
        media_links: MediaLinks = MediaLinks::Gateway,
        /// How long uploaded and imported media is kept after its task ended (a duration such as
        /// `24h`); the media sweep then deletes it and gives its bytes back to the quota. Media
        /// stored for a request that never created its task goes after a day.
        media_retention: Span = Span(VideoSettings::DEFAULT.media_retention),
        /// How often the media sweep runs (one replica at a time).
        media_sweep_interval: Span = Span::minutes(5),
        /// Public base URL of this gateway (for signed media links); empty: `http://<listen address>`.
        public_url: String = String::new(),
        /// Hosts or CIDRs that media import and webhooks may reach although not public (in the
        /// environment: comma-separated).
        #[serde(deserialize_with = "list")]
        egress_allow: Vec<String> = Vec::new(),
        /// Extra PEM roots for outgoing https.
        extra_ca_file: String = String::new(),
        /// Video worker poll interval.
        task_poll_interval: Span = Span(VideoSettings::DEFAULT.poll_interval),
        /// Video task deadline: seconds, or with a unit (`90s`, `30m`, `48h`, `2d`).
        task_deadline: Span = Span(VideoSettings::DEFAULT.deadline),
        /// First webhook retry delay.
        webhook_retry_base: Span = Span(VideoSettings::DEFAULT.webhook_retry_base),
        /// How long a worker's claim on a task or webhook delivery lasts: after a crash, another
        /// process (or the restarted one) takes the work over once it runs out. At least a second.
        #[serde(deserialize_with = "span_at_least::<1000, _>")]
        task_lease: Span = Span(VideoSettings::DEFAULT.lease),
        /// Whether per-model and per-user concurrency caps are enforced (`true`; `false` only for a
        /// trusted single tenant or a benchmark).
        caps: bool = AdmissionSettings::DEFAULT.enabled,
        /// The longest a call waits in the fair queue for a concurrency slot before answering 429.
        #[serde(deserialize_with = "span_at_least::<0, _>")]
        queue_wait: Span = Span(AdmissionSettings::DEFAULT.queue_wait),
        /// How long a replica's lease on concurrency slots lives unless renewed: after a crash its
        /// slots come back within this time. At least a second.
        #[serde(deserialize_with = "span_at_least::<1000, _>")]
        cap_lease: Span = Span(AdmissionSettings::DEFAULT.lease_ttl),
        /// How long a replica's liveness lease lives unless renewed (every third of it): once it has
        /// run out, another replica refunds the synchronous calls the dead one was running. At least
        /// a second.
        #[serde(deserialize_with = "span_at_least::<1000, _>")]
        replica_lease: Span = Span::secs(30),
        /// Asset control plane origin.
        assets_url: String = "sim".into(),
        /// Asset control plane access key.
        assets_access_key: Secret = Secret::default(),
        /// Asset control plane secret key.
        assets_secret_key: Secret = Secret::default(),
        /// Asset control plane region (in the request signatures).
        assets_region: String = "cn-beijing".into(),
        /// The key signed media links are made with; empty: one generated once and kept in the
        /// database, so that every replica shares it.
        media_link_secret: Secret = Secret::default(),
        /// Bytes of large request bodies (over 1 MiB) buffered at once across all requests, counted
        /// as they arrive; past it a large body waits up to 10 s, then gets 503 `server_busy`.
        body_budget_bytes: u64 = api::body::DEFAULT_BODY_BUDGET_BYTES,
        /// Bytes of large request bodies one user may have buffered at once.
        body_budget_user_bytes: u64 = api::body::DEFAULT_USER_BODY_BYTES,
        /// A request body must keep up with this many bytes per second after the grace period,
        /// averaged over a sliding window as long as the grace, else 408 `request_timeout` (0: no
        /// pace).
        body_min_rate_bytes: u64 = Limits::DEFAULT.body_min_rate,
        /// The time every request body gets before its pace is checked, and the window the pace is
        /// averaged over.
        #[serde(deserialize_with = "span_at_least::<0, _>")]
        body_grace: Span = Span(Limits::DEFAULT.body_grace),
        /// A request body that brings no byte for this long is cut with 408, however much came
        /// before (0: no such bound): a body sent fast and then held open keeps nobody's room.
        #[serde(deserialize_with = "span_at_least::<0, _>")]
        body_stall: Span = Span(Limits::DEFAULT.body_stall),
        /// A request's header block must arrive within this time of its first byte.
        header_read_timeout: Span = Span(Limits::DEFAULT.header_read_timeout),
        /// A connection with nothing in flight and nothing received for this long is closed, as is
        /// one whose client took none of an answer ready for it (it stopped reading, or an HTTP/2
        /// window of 0) for this long.
        idle_timeout: Span = Span(Limits::DEFAULT.idle_timeout),
        /// HTTP/2 keep-alive: a PING after this much silence, the connection closed if unanswered as
        /// long.
        http2_keepalive: Span = Span(Limits::DEFAULT.http2_keepalive),
        /// Connections served at once; more wait in the kernel's accept queue.
        #[serde(deserialize_with = "at_least::<1, _, _>")]
        max_connections: usize = Limits::DEFAULT.max_connections,
        /// Connections one client address may hold at once; past it a new one is closed at once.
        /// The address is the TCP peer (not `X-Forwarded-For`); trusted proxies are not capped.
        /// 256: far above what one client's pool opens (browsers 6 per host, SDK pools 10 to 100),
        /// room for an office or a carrier NAT behind one address, and 1/32 of the default
        /// `max_connections`, so one address cannot take them all.
        #[serde(deserialize_with = "at_least::<1, _, _>")]
        max_connections_per_ip: usize = Limits::DEFAULT.max_connections_per_ip,
        /// Opening balance of the first-run demo user, in USD.
        #[serde(deserialize_with = "usd")]
        demo_balance: UsdAmount = UsdAmount::from_micros(100_000_000),
        /// Log filter, such as `info` or `info,store=debug`.
        #[serde(deserialize_with = "log_filter")]
        log: Targets = Targets::new().with_default(tracing::Level::INFO),
        /// `text` (for a terminal) or `json` (one object per line on stderr, for a log pipeline). A
        /// request's line carries `request_id`, `method`, `path`, `status` and `micros`, and for a
        /// billable call `user_id`, `model`, `task_id` and `billed_usd`. Keys and secrets never
        /// appear.
        log_format: LogFormat = LogFormat::Text,
        // The video worker and its outbound calls (issue 19 §4).
        /// Connect timeout for media imports and webhooks.
        egress_connect_timeout: Span = Span::secs(5),
        /// Whole-call timeout of one webhook delivery attempt.
        webhook_timeout: Span = Span::secs(10),
        /// Whole-call timeout of one media import (all redirects and the body).
        media_import_timeout: Span = Span::secs(300),
        /// The slowest a media import may come in, in bytes per second averaged over
        /// `media_import_rate_window`, once `media_import_rate_grace` has passed; 0: no floor.
        media_import_min_rate_bytes: u64 = 65_536,
        /// The window the media import rate is averaged over (at least 100 ms).
        #[serde(deserialize_with = "span_at_least::<100, _>")]
        media_import_rate_window: Span = Span::secs(10),
        /// Time from the start of a media import before its rate is first judged.
        #[serde(deserialize_with = "span_at_least::<0, _>")]
        media_import_rate_grace: Span = Span::secs(10),
        /// Most video task steps (import, asset registration, submission, poll) a process runs at
        /// once.
        #[serde(deserialize_with = "at_least::<1, _, _>")]
        worker_task_slots: usize = VideoSettings::DEFAULT.task_slots,
        /// Most webhook deliveries a process runs at once.
        #[serde(deserialize_with = "at_least::<1, _, _>")]
        worker_delivery_slots: usize = VideoSettings::DEFAULT.delivery_slots,
        /// Most task steps, and most webhook deliveries, of one user a process runs at once.
        #[serde(deserialize_with = "at_least::<1, _, _>")]
        worker_user_slots: usize = VideoSettings::DEFAULT.user_slots,
        // Operations ("ops"): retention of the tables that only grow, and who may read `/metrics`.
        /// How long an `Idempotency-Key` is remembered (a duration such as `24h`): a retry after it
        /// runs again, and the prune deletes the claim. Longer than the upstream timeout plus five
        /// minutes.
        idempotency_ttl: Span = Span(PrunePolicy::DEFAULT.idempotency_ttl),
        /// How long ended webhook deliveries and their attempts are kept (a duration such as `30d`).
        webhook_retention: Span = Span(PrunePolicy::DEFAULT.webhook_retention),
        /// How long the owner of a response id (`previous_response_id`) is remembered (`30d`).
        response_retention: Span = Span(PrunePolicy::DEFAULT.response_retention),
        /// How often each `serve` process prunes the tables above (a duration such as `10m`).
        prune_interval: Span = Span::minutes(10),
        /// Most rows one prune batch deletes (one short transaction), 1 to 10,000.
        #[serde(deserialize_with = "within::<1, 10_000, _, _>")]
        prune_batch: u64 = PrunePolicy::DEFAULT.batch,
        /// When set, `GET /metrics` requires `Authorization: Bearer <this token>` (else 401); empty:
        /// `/metrics` is open, so keep it off the public listener.
        metrics_token: Secret = Secret::default(),
        /// Stripe secret API key (`sk_…`) for self-serve top-ups; with `stripe_webhook_secret`,
        /// `POST /api/v1/topups/checkout` creates Checkout Sessions. Empty: top-ups answer 503
        /// `payments_not_configured`.
        stripe_secret_key: Secret = Secret::default(),
        /// The signing secret (`whsec_…`) of the Stripe webhook endpoint pointed at
        /// `/api/v1/stripe/webhook` (subscribe it to `checkout.session.completed`).
        stripe_webhook_secret: Secret = Secret::default(),
        /// Stripe's API origin (a local server in tests).
        stripe_api_base: String = "https://api.stripe.com".into(),
        /// The smallest self-serve top-up, in USD.
        #[serde(deserialize_with = "usd")]
        topup_min_usd: UsdAmount = UsdAmount::from_micros(5_000_000),
        /// The largest self-serve top-up, in USD.
        #[serde(deserialize_with = "usd")]
        topup_max_usd: UsdAmount = UsdAmount::from_micros(1_000_000_000),
        /// Where a payer lands after paying; empty: the console's billing page
        /// (`<public_url>/console/#/billing?paid=1`).
        topup_success_url: String = String::new(),
        /// Where a payer lands after giving up; empty: the console's billing page (`…?cancelled=1`).
        topup_cancel_url: String = String::new(),
        /// Load balancers in front of the gateway (CIDR networks or addresses; in the environment:
        /// comma-separated): a request from one of them is taken to come from the address it puts
        /// in `X-Forwarded-For` (keys' `--allow-ip` lists are checked against that). Empty: the
        /// connection's peer is the client, and `X-Forwarded-For` is ignored.
        #[serde(deserialize_with = "ip_list")]
        trusted_proxies: domain::IpAllowList = domain::IpAllowList::default(),
    }
}

/// A configuration that cannot be used; the message names the setting.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(pub String);

/// The name the environment's layer goes by in errors.
const ENVIRONMENT: &str = "the environment";

impl Config {
    /// The connection and request-body limits of the HTTP edge.
    pub fn limits(&self) -> api::Limits {
        api::Limits {
            header_read_timeout: self.header_read_timeout.0,
            idle_timeout: self.idle_timeout.0,
            http2_keepalive: self.http2_keepalive.0,
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
            body_min_rate: self.body_min_rate_bytes,
            body_grace: self.body_grace.0,
            body_stall: self.body_stall.0,
        }
    }

    /// The budget large request bodies share.
    pub fn body_budget(&self) -> api::BodyBudget {
        api::BodyBudget::new(self.body_budget_bytes).with_user_share(self.body_budget_user_bytes)
    }

    /// The `GATEWAY_*` variables of this process (an error names one whose value is not UTF-8).
    pub fn environment() -> Result<BTreeMap<String, String>, ConfigError> {
        let mut env = BTreeMap::new();
        for (name, value) in std::env::vars_os() {
            let Some(name) = name.to_str().filter(|n| n.starts_with(PREFIX)).map(str::to_owned) else { continue };
            let value = value.into_string().map_err(|_| ConfigError(format!("{name}: the value is not UTF-8")))?;
            env.insert(name, value);
        }
        Ok(env)
    }

    /// Loads `path` (or `gateway.toml` when present and no path is given), then applies `env` (the
    /// `GATEWAY_*` variables; every one must name a setting).
    pub fn load(path: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
        let default_path = Path::new("gateway.toml");
        let file = match path {
            Some(p) => Some(p),
            None if default_path.exists() => Some(default_path),
            None => None,
        };
        let mut figment = Figment::new();
        if let Some(p) = file {
            figment = figment.merge(Layer::file(p)?);
        }
        let from_env = Layer::environment(env)?;
        let config: Config = figment.merge(from_env).extract_lossy().map_err(|e| explain(e, env))?;
        config.check()?;
        Ok(config)
    }

    /// What no single setting can check: the idempotency window against the upstream timeout.
    fn check(&self) -> Result<(), ConfigError> {
        let stale = self.upstream_timeout.0.saturating_add(Duration::from_secs(300));
        if self.idempotency_ttl.0 <= stale {
            return Err(ConfigError(format!(
                "idempotency_ttl: {} s must be longer than upstream_timeout plus five minutes ({} s), \
                 or a retry could run a request whose first run is still going",
                self.idempotency_ttl.0.as_secs(),
                stale.as_secs()
            )));
        }
        Ok(())
    }
}

/// One layer of settings (the file, or the environment) for `figment`.
struct Layer {
    name: String,
    values: Dict,
}

impl Layer {
    /// The TOML file at `path`.
    fn file(path: &Path) -> Result<Layer, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
        let table =
            toml::from_str::<toml::Table>(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        let values = Value::serialize(&table)
            .ok()
            .and_then(Value::into_dict)
            .ok_or_else(|| ConfigError(format!("{}: not a table of settings", path.display())))?;
        Ok(Layer { name: path.display().to_string(), values })
    }

    /// The `GATEWAY_*` variables in `env`, as text: each is read as its setting's type (a number,
    /// `true`/`false`, a duration, a comma-separated list).
    fn environment(env: &BTreeMap<String, String>) -> Result<Layer, ConfigError> {
        let mut values = Dict::new();
        for (name, value) in env {
            let key = name
                .strip_prefix(PREFIX)
                .ok_or_else(|| ConfigError(format!("{name}: not a {PREFIX}* variable")))?
                .to_ascii_lowercase();
            values.insert(key, Value::from(value.clone()));
        }
        Ok(Layer { name: ENVIRONMENT.to_owned(), values })
    }
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.clone())
    }

    fn data(&self) -> Result<figment::value::Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.values.clone()))
    }
}

/// For a `*_ms` name of a duration setting (they were renamed when every duration became a
/// [`Span`]): what it is called now.
fn renamed(key: &str, env: bool) -> String {
    let Some(now) = key.strip_suffix("_ms") else { return String::new() };
    if !Config::declared().iter().any(|s| s.name == now && s.kind == "duration") {
        return String::new();
    }
    let name = if env { format!("{PREFIX}{}", now.to_ascii_uppercase()) } else { now.to_owned() };
    format!(" (it is {name} now, a duration such as 2000ms, 75s or 5m)")
}

/// The errors `figment` found, each naming its setting as it was written: `GATEWAY_<NAME>` when the
/// value came from the environment, `<name> (in <file>)` when from the file.
fn explain(error: figment::Error, env: &BTreeMap<String, String>) -> ConfigError {
    let from_env = |key: &str| env.contains_key(&format!("{PREFIX}{}", key.to_ascii_uppercase()));
    let mut lines = Vec::new();
    for e in error {
        let source = e.metadata.as_ref().map(|m| m.name.to_string()).unwrap_or_default();
        let line = match &e.kind {
            figment::error::Kind::UnknownField(key, _) if from_env(key) => {
                format!("{PREFIX}{}: no such setting{}", key.to_ascii_uppercase(), renamed(key, true))
            }
            figment::error::Kind::UnknownField(key, _) => {
                format!("{key} (in {source}): no such setting{}", renamed(key, false))
            }
            kind => {
                let key = e.path.join(".");
                if source == ENVIRONMENT {
                    format!("{PREFIX}{}: {kind}", key.to_ascii_uppercase())
                } else if source.is_empty() {
                    format!("{key}: {kind}")
                } else {
                    format!("{key} (in {source}): {kind}")
                }
            }
        };
        lines.push(line);
    }
    ConfigError(lines.join("; "))
}

#[cfg(test)]
mod tests;
