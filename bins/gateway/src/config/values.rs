//! The value types and readers of the settings: secrets that never print, durations with units,
//! ranges, comma-separated lists, the database URL, an amount in USD and the log filter. Each
//! refuses what it cannot read, so that serde's error names the setting.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use domain::UsdAmount;
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use tracing_subscriber::filter::Targets;

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

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "*****" })
    }
}

/// Which pool an upstream endpoint of the full form belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamPool {
    /// Chat, images, responses (and video tasks on the first one): a platform base URL.
    Platform,
    /// The speech service: an origin.
    Speech,
    /// Message-style chat: a message-compatible base.
    Messages,
}

/// One upstream endpoint in full (`[[upstream_endpoints]]` in the configuration file).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamEndpoint {
    /// Its name (logs, metrics, `admin upstream list`).
    pub name: String,
    /// Its pool.
    pub pool: UpstreamPool,
    /// Its base URL.
    pub url: String,
    /// Its keys: one, or several (a key pool sharing the endpoint's weight).
    pub keys: Vec<Secret>,
    /// Its share within its priority tier (at least 1).
    #[serde(default = "one")]
    pub weight: u32,
    /// Its tier: lower is tried first, higher is the fallback.
    #[serde(default)]
    pub priority: u32,
    /// Most attempts in flight on each of its keys at once in one replica; none: no limit.
    #[serde(default)]
    pub max_in_flight: Option<u64>,
    /// Most attempts started on each of its keys per minute in one replica; none: no limit.
    #[serde(default)]
    pub rpm: Option<u64>,
    /// The upstream model ids it serves (the catalog's `upstream.model_id`); none: every model
    /// of its pool.
    #[serde(default)]
    pub models: Option<Vec<String>>,
}

/// One model alias (`[[model_aliases]]` in the configuration file).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelAliasSetting {
    /// The name callers send as `model`.
    pub name: String,
    /// The models, in the order they are tried.
    pub models: Vec<String>,
}

fn one() -> u32 {
    1
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// For a terminal.
    Text,
    /// One JSON object per line, for a log pipeline.
    Json,
}

/// A duration, the one type of every duration setting: seconds, or with a unit (`250ms`, `90s`,
/// `30m`, `48h`, `2d`); at least a millisecond unless the setting says that 0 means "none".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span(pub Duration);

impl Span {
    /// `n` seconds.
    pub const fn secs(n: u64) -> Span {
        Span(Duration::from_secs(n))
    }

    /// `n` minutes.
    pub const fn minutes(n: u64) -> Span {
        Span(Duration::from_secs(n * 60))
    }
}

impl<'de> Deserialize<'de> for Span {
    /// A duration of at least a millisecond.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Span, D::Error> {
        span_at_least::<1, D>(d)
    }
}

/// Reads a duration: text with a unit (`250ms`, `90s`, `30m`, `48h`, `2d`), or a whole number
/// of seconds (text, or a number in the file).
struct DurationText;

impl de::Visitor<'_> for DurationText {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as 250ms, 90s, 30m, 48h or 2d")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        parse_duration(text)
            .ok_or_else(|| E::custom(format!("{text:?} is not a duration such as 250ms, 90s, 30m, 48h or 2d")))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Duration, E> {
        Ok(Duration::from_secs(n))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Duration, E> {
        u64::try_from(n).map(Duration::from_secs).map_err(|_| E::custom(format!("{n} is not a duration")))
    }
}

/// A duration of at least `MIN_MS` milliseconds (0: zero allowed, where it means "none").
pub(super) fn span_at_least<'de, const MIN_MS: u64, D: Deserializer<'de>>(d: D) -> Result<Span, D::Error> {
    let duration = d.deserialize_any(DurationText)?;
    if duration < Duration::from_millis(MIN_MS) {
        return Err(de::Error::custom(format!("{} ms is below the least, {MIN_MS} ms", duration.as_millis())));
    }
    Ok(Span(duration))
}

/// A duration: a whole number and a unit (`ms`, `s`, `m`, `h`, `d`), or a whole number of seconds.
pub(super) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits.parse().ok()?;
    let seconds = match unit {
        "ms" => return Some(Duration::from_millis(n)),
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        "d" => n.checked_mul(86_400)?,
        _ => return None,
    };
    Some(Duration::from_secs(seconds))
}

/// A whole number of at least `MIN`.
pub(super) fn at_least<'de, const MIN: u64, D: Deserializer<'de>, T>(d: D) -> Result<T, D::Error>
where
    T: Deserialize<'de> + Copy + fmt::Display,
    u64: TryFrom<T>,
{
    within::<MIN, { u64::MAX }, D, T>(d)
}

/// A whole number from `MIN` to `MAX`.
pub(super) fn within<'de, const MIN: u64, const MAX: u64, D: Deserializer<'de>, T>(d: D) -> Result<T, D::Error>
where
    T: Deserialize<'de> + Copy + fmt::Display,
    u64: TryFrom<T>,
{
    let value = T::deserialize(d)?;
    if u64::try_from(value).is_ok_and(|v| (MIN..=MAX).contains(&v)) {
        Ok(value)
    } else if MAX == u64::MAX {
        Err(de::Error::custom(format!("{value} is less than {MIN}")))
    } else {
        Err(de::Error::custom(format!("{value} is not between {MIN} and {MAX}")))
    }
}

/// A list: an array in the file, or comma-separated text (the environment); blanks are dropped.
pub(super) fn list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct List;
    impl<'de> Visitor<'de> for List {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of strings, or comma-separated text")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<String>, E> {
            Ok(text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<String>()? {
                out.push(item);
            }
            Ok(out)
        }
    }
    d.deserialize_any(List)
}

/// An address to listen on, such as `127.0.0.1:8080`.
pub(super) fn socket_address<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(|_| de::Error::custom(format!("{text:?} is not an address such as 127.0.0.1:8080")))
}

/// `sqlite:…` or `postgres…`.
pub(super) fn database_url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let url = String::deserialize(d)?;
    if url.starts_with("sqlite:") || url.starts_with("postgres") {
        Ok(url)
    } else {
        Err(de::Error::custom("must start with sqlite: or postgres://"))
    }
}

/// `file:<dir>` or `s3://<bucket>/<prefix>`; empty: not set (the media directory then).
pub(super) fn media_location<'de, D: Deserializer<'de>>(d: D) -> Result<Option<media::MediaLocation>, D::Error> {
    let text = String::deserialize(d)?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    media::MediaLocation::parse(text.trim()).map(Some).map_err(de::Error::custom)
}

/// How the upstream reaches stored media.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaLinks {
    /// The gateway's own signed `/media/` links, which every replica serves from the store.
    Gateway,
    /// The media store's pre-signed URLs (an object store), so the bytes never pass through a
    /// replica; a store without them (a local directory) falls back to the gateway's links.
    Presigned,
}

/// An amount in USD, such as `100` or `12.50`.
pub(super) fn usd<'de, D: Deserializer<'de>>(d: D) -> Result<UsdAmount, D::Error> {
    let text = String::deserialize(d)?;
    UsdAmount::parse_decimal(&text).map_err(|e| de::Error::custom(format!("{text:?}: {e}")))
}

/// A log filter such as `info` or `info,store=debug`.
pub(super) fn log_filter<'de, D: Deserializer<'de>>(d: D) -> Result<Targets, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(|e| de::Error::custom(format!("{text:?} is not a filter such as info,store=debug: {e}")))
}

/// A list of networks and addresses (`domain::IpAllowList`), as a TOML list or comma-separated
/// text; empty is no entry.
pub(super) fn ip_list<'de, D: Deserializer<'de>>(d: D) -> Result<domain::IpAllowList, D::Error> {
    let items = list(d)?;
    if items.is_empty() {
        return Ok(domain::IpAllowList::default());
    }
    domain::IpAllowList::parse(&items.join(",")).map_err(de::Error::custom)
}
