//! Per-key limits set by operators (issue 25): an expiry time, a model allow-list and a spend
//! budget (total or per UTC day, week or month); the rate limits are in `key_rates.rs`, and a
//! change to any of them is a [`KeyLimitsChange`].

use std::fmt;
use std::str::FromStr;

use crate::{ModelKind, Timestamp, UnknownName, UsdAmount};

/// How often a key's spend budget starts over: never, or at each UTC day, week (Monday) or month.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetPeriod {
    /// One budget for the key's whole life.
    Total,
    /// Resets at 00:00 UTC.
    Day,
    /// Resets on Mondays at 00:00 UTC.
    Week,
    /// Resets on the first of each month at 00:00 UTC.
    Month,
}

impl BudgetPeriod {
    /// Every period.
    pub const ALL: [BudgetPeriod; 4] =
        [BudgetPeriod::Total, BudgetPeriod::Day, BudgetPeriod::Week, BudgetPeriod::Month];

    /// The name (`total`, `day`, `week`, `month`), as stored and as the CLI takes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Total => "total",
            BudgetPeriod::Day => "day",
            BudgetPeriod::Week => "week",
            BudgetPeriod::Month => "month",
        }
    }

    /// The start of the period `now` falls in (the epoch for `Total`, which never resets).
    pub fn start(self, now: Timestamp) -> Timestamp {
        match self {
            BudgetPeriod::Total => Timestamp(0),
            BudgetPeriod::Day => now.utc_day_start(),
            BudgetPeriod::Week => now.utc_week_start(),
            BudgetPeriod::Month => now.utc_month_start(),
        }
    }
}

impl FromStr for BudgetPeriod {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BudgetPeriod::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownName { what: "budget period (total, day, week or month)", value: s.to_owned() })
    }
}

impl fmt::Display for BudgetPeriod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The most a key may spend in each of its periods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyBudget {
    /// The limit (≥ 0).
    pub limit: UsdAmount,
    /// When it starts over.
    pub period: BudgetPeriod,
}

/// One entry of a key's model allow-list: every model of a kind, or one model by public name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ModelRule {
    /// Every model of this kind (`language`, `image`, `audio`, `video`).
    Kind(ModelKind),
    /// The model with this public name.
    Name(String),
}

/// The models a key may reach; a key without one reaches every model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelAllowList(Vec<ModelRule>);

/// An allow-list text that cannot be read (empty, or with an empty entry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a model allow-list is a comma-separated list of model names or kinds, not {0:?}")]
pub struct BadAllowList(pub String);

impl ModelAllowList {
    /// Reads the comma-separated form: an entry that is a kind's name is that kind, any other is a
    /// model name (whether it exists is the caller's check). Entries are trimmed; duplicates go.
    pub fn parse(text: &str) -> Result<ModelAllowList, BadAllowList> {
        let mut rules: Vec<ModelRule> = Vec::new();
        for entry in text.split(',').map(str::trim) {
            if entry.is_empty() {
                return Err(BadAllowList(text.to_owned()));
            }
            let rule = entry.parse::<ModelKind>().map_or_else(|_| ModelRule::Name(entry.to_owned()), ModelRule::Kind);
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
        Ok(ModelAllowList(rules))
    }

    /// The entries, in the order given.
    pub fn rules(&self) -> &[ModelRule] {
        &self.0
    }

    /// Each entry as written (a kind's name or a model's), in the order given: the wire's array.
    pub fn entries(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|rule| match rule {
                ModelRule::Kind(k) => k.as_str().to_owned(),
                ModelRule::Name(n) => n.clone(),
            })
            .collect()
    }

    /// Whether model `name` of `kind` is on the list.
    pub fn allows(&self, name: &str, kind: ModelKind) -> bool {
        self.0.iter().any(|rule| match rule {
            ModelRule::Kind(k) => *k == kind,
            ModelRule::Name(n) => n == name,
        })
    }
}

impl fmt::Display for ModelAllowList {
    /// The comma-separated form [`ModelAllowList::parse`] reads (also the stored form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, rule) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match rule {
                ModelRule::Kind(k) => f.write_str(k.as_str())?,
                ModelRule::Name(n) => f.write_str(n)?,
            }
        }
        Ok(())
    }
}

/// What a key's budget counters hold: `spent` is what the key's settlements charged since
/// `period_start`; `held` is what its open holds keep, whatever period they began in. The ledger
/// writer moves both in the commit that moves the balance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct KeySpend {
    /// The start of the period `spent` counts (Unix epoch for a `total` budget).
    pub period_start: Timestamp,
    /// Charged since `period_start`.
    pub spent: UsdAmount,
    /// Kept by open holds.
    pub held: UsdAmount,
}

/// The keys whose spend budgets one hold counts against: the key that made the call, then those
/// of its ancestors (the key that minted it, that key's own maker, …) that have a budget, nearest
/// first, each once. Empty: only the balance limits the hold. Stored as one text, the ids joined
/// by `,` (a key id never contains one), so that a reservation keeps the chain it was held on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct BudgetKeys(Vec<crate::ids::ApiKeyId>);

impl BudgetKeys {
    /// No key: only the balance.
    pub const NONE: BudgetKeys = BudgetKeys(Vec::new());

    /// The chain `keys`, nearest first; a repeated key is kept once.
    pub fn new(keys: impl IntoIterator<Item = crate::ids::ApiKeyId>) -> BudgetKeys {
        let mut chain: Vec<crate::ids::ApiKeyId> = Vec::new();
        for key in keys {
            if !chain.contains(&key) {
                chain.push(key);
            }
        }
        BudgetKeys(chain)
    }

    /// Whether no key's budget is involved.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The keys, nearest first.
    pub fn keys(&self) -> &[crate::ids::ApiKeyId] {
        &self.0
    }

    /// The stored text (`None` when empty).
    pub fn to_column(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| self.0.iter().map(crate::ids::ApiKeyId::as_str).collect::<Vec<_>>().join(","))
    }

    /// Reads the stored text back (`None` or empty: no key).
    pub fn from_column(text: Option<&str>) -> BudgetKeys {
        BudgetKeys::new(
            text.unwrap_or_default()
                .split(',')
                .filter(|id| !id.is_empty())
                .map(|id| crate::ids::ApiKeyId(id.to_owned())),
        )
    }
}

/// A key's budget with its counters, as the ledger plan decides on them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct KeyBudgetState {
    /// The limit and its period; `None` when the key has none (any more): its holds and ends still
    /// move the counters, nothing is refused.
    pub budget: Option<KeyBudget>,
    /// The counters.
    pub spend: KeySpend,
}

impl KeyBudgetState {
    /// The counters as of `now`: a period that has moved on starts over with nothing spent.
    pub fn at(self, now: Timestamp) -> KeyBudgetState {
        match self.budget {
            Some(b) if b.period.start(now) != self.spend.period_start => KeyBudgetState {
                spend: KeySpend { period_start: b.period.start(now), spent: UsdAmount::ZERO, held: self.spend.held },
                ..self
            },
            _ => self,
        }
    }

    /// What may still be held as of `now` (`limit − spent − held`, at least zero); `None` without a
    /// budget.
    pub fn remaining(self, now: Timestamp) -> Option<UsdAmount> {
        let now = self.at(now);
        let b = now.budget?;
        let used = now.spend.spent.micros().saturating_add(now.spend.held.micros());
        Some(UsdAmount::from_micros(b.limit.micros().saturating_sub(used).max(0)))
    }
}

/// A key's limits as set when it is created; each `None` is no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLimits {
    /// From this instant on the key is refused as expired.
    pub expires_at: Option<Timestamp>,
    /// The models it may reach.
    pub models: Option<ModelAllowList>,
    /// Its spend budget.
    pub budget: Option<KeyBudget>,
    /// Its requests- and tokens-per-minute limits.
    pub rates: crate::KeyRates,
    /// The client addresses it may be used from.
    pub allow_ips: Option<IpAllowList>,
}

/// The client addresses a key may be used from (and, for the HTTP edge, the proxies whose
/// `X-Forwarded-For` it believes): networks in CIDR form or single addresses, IPv4 or IPv6. An
/// IPv4 client seen as an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is matched as IPv4.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct IpAllowList(Vec<ipnet::IpNet>);

/// An address list that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a comma-separated list of addresses or CIDR networks (such as 203.0.113.0/24, 2001:db8::/32)")]
pub struct BadIpList(pub String);

impl IpAllowList {
    /// Reads `203.0.113.0/24, 198.51.100.7, 2001:db8::/32` (entries trimmed; a bare address is its
    /// own /32 or /128; host bits of a network are dropped). An empty list or entry is refused.
    pub fn parse(text: &str) -> Result<IpAllowList, BadIpList> {
        let mut nets: Vec<ipnet::IpNet> = Vec::new();
        for entry in text.split(',').map(str::trim) {
            let net = entry
                .parse::<ipnet::IpNet>()
                .map(|n| n.trunc())
                .or_else(|_| entry.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| BadIpList(text.to_owned()))?;
            if !nets.contains(&net) {
                nets.push(net);
            }
        }
        Ok(IpAllowList(nets))
    }

    /// The networks, in the order given.
    pub fn networks(&self) -> &[ipnet::IpNet] {
        &self.0
    }

    /// Whether the list has no entry (only [`IpAllowList::default`]).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `ip` is in one of the networks.
    pub fn allows(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        self.0.iter().any(|net| net.contains(&ip))
    }
}

impl IpAllowList {
    /// Each network as text (`203.0.113.0/24`), in the order given: the wire's array.
    pub fn entries(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

impl fmt::Display for IpAllowList {
    /// The comma-separated form [`IpAllowList::parse`] reads (also the stored form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, net) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{net}")?;
        }
        Ok(())
    }
}

/// A change to a key's limits: `None` leaves a setting as it is, `Some(None)` clears it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLimitsChange {
    /// New expiry time, or none.
    pub expires_at: Option<Option<Timestamp>>,
    /// New allow-list, or none (every model).
    pub models: Option<Option<ModelAllowList>>,
    /// New spend budget, or none (the balance is the only limit).
    pub budget: Option<Option<KeyBudget>>,
    /// New client address list, or none (any address).
    pub allow_ips: Option<Option<IpAllowList>>,
    /// New requests-per-minute limit, or none.
    pub rpm: Option<Option<std::num::NonZeroU32>>,
    /// New tokens-per-minute limit, or none.
    pub tpm: Option<Option<std::num::NonZeroU32>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kinds_and_names_and_round_trips() {
        let list = ModelAllowList::parse(" language ,Img-1,language,video").expect("list");
        assert_eq!(
            list.rules(),
            [ModelRule::Kind(ModelKind::Language), ModelRule::Name("Img-1".into()), ModelRule::Kind(ModelKind::Video)]
        );
        assert_eq!(list.to_string(), "language,Img-1,video");
        assert_eq!(ModelAllowList::parse(&list.to_string()), Ok(list));
    }

    #[test]
    fn ip_lists_parse_match_and_round_trip() {
        use std::net::IpAddr;
        let ip = |s: &str| s.parse::<IpAddr>().expect(s);
        let list = IpAllowList::parse(" 203.0.113.9/24, 198.51.100.7 ,2001:db8::/32").expect("list");
        assert_eq!(list.to_string(), "203.0.113.0/24,198.51.100.7/32,2001:db8::/32");
        assert_eq!(IpAllowList::parse(&list.to_string()), Ok(list.clone()));
        for inside in ["203.0.113.0", "203.0.113.255", "198.51.100.7", "2001:db8::1", "::ffff:203.0.113.5"] {
            assert!(list.allows(ip(inside)), "{inside}");
        }
        for outside in ["203.0.114.0", "203.0.112.255", "198.51.100.8", "2001:db9::1", "127.0.0.1", "::1"] {
            assert!(!list.allows(ip(outside)), "{outside}");
        }
        for bad in ["", "10.0.0.0/33", "10.0.0.0/8,", "localhost", "10.0.0.0/8,,::1"] {
            assert_eq!(IpAllowList::parse(bad), Err(BadIpList(bad.to_owned())), "{bad:?}");
        }
        assert!(!IpAllowList::default().allows(ip("127.0.0.1")), "an empty list allows nothing");
    }

    #[test]
    fn empty_entries_are_refused() {
        for bad in ["", ",", "a,,b", " , a"] {
            assert_eq!(ModelAllowList::parse(bad), Err(BadAllowList(bad.to_owned())), "{bad:?}");
        }
    }

    #[test]
    fn allows_by_kind_or_name() {
        let list = ModelAllowList::parse("image,LangA").expect("list");
        assert!(list.allows("AnyImage", ModelKind::Image));
        assert!(list.allows("LangA", ModelKind::Language));
        assert!(!list.allows("LangB", ModelKind::Language));
        assert!(!list.allows("Vid", ModelKind::Video));
    }
}
