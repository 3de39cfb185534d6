//! The management API's requests: typed bodies (the one place each shape lives; `/openapi.json`
//! derives their schemas from these types) and the list queries (`page`, `page_size`, `q`, and
//! the usage report's `group_by`, `from` and `to`).

use domain::ports::PageRequest;
use domain::{UsageGroup, UtcDay};
use schemars::JsonSchema;
use serde::Deserialize;
use validator::Validate;

use crate::shape::{self, present};
use crate::{ValidationError, parse_page, parse_page_size};

/// The longest range `GET /api/v1/usage` reports: 366 days, both ends included.
pub const USAGE_MAX_DAYS: i64 = 366;

/// The default range of `GET /api/v1/usage`: the last 30 days, today included.
pub const USAGE_DEFAULT_DAYS: i64 = 30;

/// Reads a management body of type `T` and checks its rules.
pub fn manage_body<'de, T: Deserialize<'de> + Validate>(body: &'de [u8]) -> Result<T, ValidationError> {
    let value: T = shape::parse_body(body)?;
    value.validate().map_err(|e| ValidationError::Invalid(shape::validator_message(&e)))?;
    Ok(value)
}

/// A list field written either as a JSON array of strings or as one comma-separated string
/// (`["LangA-V4-flash", "image"]` or `"LangA-V4-flash,image"`); answers always use the array.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(untagged)]
pub enum ListText {
    /// `["a", "b"]`.
    List(Vec<String>),
    /// `"a,b"`.
    Text(String),
}

impl ListText {
    /// The comma-separated form the allow-list parsers read (an empty array reads as an empty
    /// entry, which they refuse).
    pub fn joined(&self) -> String {
        match self {
            ListText::List(items) => items.join(","),
            ListText::Text(text) => text.clone(),
        }
    }
}

impl<'de> Deserialize<'de> for ListText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ListText, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ListText;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of strings or a comma-separated string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ListText, E> {
                Ok(ListText::Text(v.to_owned()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<ListText, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    if items.len() == 256 {
                        return Err(serde::de::Error::invalid_length(257, &"at most 256 entries"));
                    }
                    items.push(item);
                }
                Ok(ListText::List(items))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// `POST /api/v1/keys`: a key for the caller's own account. No additional properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct NewKeyBody {
    /// A label, 1..100 characters.
    #[validate(length(min = 1, max = 100))]
    pub name: String,
    /// The scopes, at least one, each carried by the key that makes the request (a key never
    /// grants more than its creator's key has): `models:read`, `task:read`, `task:write`,
    /// `video:create`, `image:create`, `language:create`, `audio:create`, `overview:read`,
    /// `keys:manage`, `billing:manage`, `admin`.
    #[validate(length(min = 1, max = 16))]
    pub scopes: Vec<String>,
    /// RFC 3339 time from which the key is refused as expired: in the future, and no later than
    /// the calling key's own expiry (which it inherits when absent).
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Model names and kinds the key may reach (an array, or one comma-separated string), within
    /// the calling key's list (which it inherits when absent).
    #[serde(default)]
    pub models: Option<ListText>,
    /// The most the key may spend per `budget_period`, USD as a decimal string, at most the
    /// calling key's budget. Whatever it is, the new key's calls also count against the budget of
    /// the calling key and of every key above it.
    #[serde(default)]
    pub budget_usd: Option<String>,
    /// `total` (the default), `day`, `week` or `month`, in UTC; only with `budget_usd`.
    #[serde(default)]
    pub budget_period: Option<String>,
    /// Generation calls per UTC minute, at most the calling key's (which it inherits when absent).
    #[serde(default)]
    #[validate(range(min = 1, max = 4_294_967_295_i64))]
    pub rpm: Option<i64>,
    /// Language tokens per UTC minute, at most the calling key's (which it inherits when absent).
    #[serde(default)]
    #[validate(range(min = 1, max = 4_294_967_295_i64))]
    pub tpm: Option<i64>,
    /// Client networks (CIDR) or addresses (an array, or one comma-separated string), each inside
    /// the calling key's list (which it inherits when absent).
    #[serde(default)]
    pub allow_ips: Option<ListText>,
}

impl NewKeyBody {
    /// The limits it asks for, read by the same parser as an operator's key limits.
    pub fn limits(&self) -> Result<domain::KeyLimits, ValidationError> {
        let asked = KeyLimitsBody {
            expires_at: self.expires_at.clone(),
            models: self.models.clone(),
            budget_usd: self.budget_usd.clone(),
            budget_period: self.budget_period.clone(),
            rpm: self.rpm,
            tpm: self.tpm,
            allow_ips: self.allow_ips.clone(),
            clear: None,
        };
        if asked.expires_at.is_none()
            && asked.models.is_none()
            && asked.budget_usd.is_none()
            && asked.budget_period.is_none()
            && asked.rpm.is_none()
            && asked.tpm.is_none()
            && asked.allow_ips.is_none()
        {
            return Ok(domain::KeyLimits::default());
        }
        let change = asked.change()?;
        Ok(domain::KeyLimits {
            expires_at: change.expires_at.flatten(),
            models: change.models.flatten(),
            budget: change.budget.flatten(),
            rates: domain::KeyRates { rpm: change.rpm.flatten(), tpm: change.tpm.flatten() },
            allow_ips: change.allow_ips.flatten(),
        })
    }
}

/// `POST /api/v1/admin/users`. No additional properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct NewUserBody {
    /// Display name, 1..200 characters.
    #[validate(length(min = 1, max = 200))]
    pub name: String,
    /// Contact address.
    #[validate(length(min = 3, max = 320))]
    pub email: String,
    /// `user` (default) or `admin`.
    #[serde(default, deserialize_with = "present")]
    pub role: Option<String>,
    /// Opening balance in USD as a decimal string such as `"25"` or `"12.50"` (default `"0"`).
    #[serde(default, deserialize_with = "present")]
    pub balance: Option<String>,
    /// Most concurrent calls, 1..100000 (default 16).
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 1, max = 100_000))]
    pub concurrency_limit: Option<i64>,
    /// Media quota in bytes (default 1 GiB).
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 0))]
    pub media_quota_bytes: Option<i64>,
}

/// `PATCH /api/v1/admin/users/{user_id}`: what to change; at least one field. No additional
/// properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct UserPatchBody {
    /// `true` refuses every key of the user (401) until set back to `false`.
    #[serde(default, deserialize_with = "present")]
    pub disabled: Option<bool>,
    /// Most concurrent calls, 1..100000.
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 1, max = 100_000))]
    pub concurrency_limit: Option<i64>,
    /// Media quota in bytes.
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 0))]
    pub media_quota_bytes: Option<i64>,
}

/// `POST /api/v1/admin/users/{user_id}/topup`. No additional properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct TopupBody {
    /// USD as a decimal string above zero, at most 6 decimals, such as `"25"` or `"0.000001"`.
    #[validate(length(min = 1, max = 32))]
    pub amount: String,
    /// The ledger entry's note, at most 500 characters (default `top-up`).
    #[serde(default, deserialize_with = "present")]
    #[validate(length(max = 500))]
    pub note: Option<String>,
}

/// `POST /api/v1/admin/vouchers`: a batch of codes. No additional properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct NewVouchersBody {
    /// What each code credits: USD as a decimal string above zero, at most 6 decimals, at most
    /// 100000.
    #[validate(length(min = 1, max = 32))]
    pub amount: String,
    /// How many codes, 1..10000.
    #[validate(range(min = 1, max = 10_000))]
    pub count: i64,
    /// RFC 3339 time from which the codes are refused (in the future); never when absent.
    #[serde(default, deserialize_with = "present")]
    pub expires_at: Option<String>,
    /// A note for operators, at most 500 characters.
    #[serde(default, deserialize_with = "present")]
    #[validate(length(max = 500))]
    pub note: Option<String>,
}

/// `POST /api/v1/topups/checkout`. No additional properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct CheckoutBody {
    /// USD as a decimal string with at most 2 decimals, within the operator's bounds (by default
    /// 5 to 1000), such as `"20.00"`.
    #[validate(length(min = 1, max = 32))]
    pub amount: String,
}

/// `PUT /api/v1/alerts`: the caller's low-balance alert. No additional properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct AlertBody {
    /// The threshold: USD as a decimal string above zero, at most 6 decimals, such as `"5.00"`;
    /// `null` switches the alert off. Required.
    #[serde(deserialize_with = "nullable")]
    #[schemars(required)]
    #[validate(length(min = 1, max = 32))]
    pub low_balance_usd: Option<String>,
    /// Where the `balance.low` event is posted (https, the egress rules of task webhooks); absent
    /// or `null`: no event (the console's banner only).
    #[serde(default)]
    #[validate(length(min = 1, max = 2048))]
    pub webhook_url: Option<String>,
}

/// For a required field that may be `null`: present is required, `null` is `None`.
fn nullable<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d)
}

/// `POST /api/v1/vouchers/redeem`. No additional properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct RedeemBody {
    /// The code as given (`GV-XXXX-…`; case, dashes and spaces do not matter).
    #[validate(length(min = 1, max = 100))]
    pub code: String,
}

/// `PATCH /api/v1/admin/models/{model}`: at least one field. No additional properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct ModelPatchBody {
    /// Listed and callable.
    #[serde(default, deserialize_with = "present")]
    pub enabled: Option<bool>,
    /// Platform-wide cap of in-flight calls, 1..100000.
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 1, max = 100_000))]
    pub concurrency_limit: Option<i64>,
}

/// `PUT /api/v1/admin/maintenance`. No additional properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceBody {
    /// `true`: every generation call answers 503 until set back to `false`.
    pub enabled: bool,
}

/// A limit of a key that `PATCH /api/v1/admin/keys/{key_id}` can remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyLimitName {
    /// The expiry: the key never expires.
    ExpiresAt,
    /// The model allow-list: every model.
    Models,
    /// The spend budget: only the balance limits the key.
    Budget,
    /// The requests-per-minute limit.
    Rpm,
    /// The tokens-per-minute limit.
    Tpm,
    /// The address list: any address.
    AllowIps,
}

/// `PATCH /api/v1/admin/keys/{key_id}`: the limits to set, and those to remove (`clear`); a
/// limit not named stays as it is. No additional properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct KeyLimitsBody {
    /// RFC 3339 time from which the key is refused as expired (in the future).
    #[serde(default, deserialize_with = "present")]
    pub expires_at: Option<String>,
    /// Model names and kinds (`language`, `image`, `audio`, `video`) the key may reach: an array,
    /// or one comma-separated string.
    #[serde(default, deserialize_with = "present")]
    pub models: Option<ListText>,
    /// The most the key may spend per `budget_period`, USD as a decimal string (at least zero).
    #[serde(default, deserialize_with = "present")]
    pub budget_usd: Option<String>,
    /// `total` (the default: never starts over), `day`, `week` (from Monday) or `month`, in UTC;
    /// only with `budget_usd`.
    #[serde(default, deserialize_with = "present")]
    pub budget_period: Option<String>,
    /// Generation calls per UTC minute.
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 1, max = 4_294_967_295_i64))]
    pub rpm: Option<i64>,
    /// Language tokens (prompt + completion) per UTC minute.
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 1, max = 4_294_967_295_i64))]
    pub tpm: Option<i64>,
    /// Client networks (CIDR) or addresses the key may be used from: an array, or one
    /// comma-separated string.
    #[serde(default, deserialize_with = "present")]
    pub allow_ips: Option<ListText>,
    /// Limits to remove.
    #[serde(default, deserialize_with = "present")]
    pub clear: Option<Vec<KeyLimitName>>,
}

impl KeyLimitsBody {
    /// The change it asks for, every value read by the same parser as the command line's flags;
    /// a limit both set and cleared, or nothing asked, is refused.
    pub fn change(self) -> Result<domain::KeyLimitsChange, ValidationError> {
        use domain::{BudgetPeriod, IpAllowList, KeyBudget, ModelAllowList, Timestamp, UsdAmount};
        let bad = |field: &str, e: &dyn std::fmt::Display| ValidationError::Invalid(format!("{field}: {e}"));
        let clear = self.clear.unwrap_or_default();
        let cleared = |name: KeyLimitName| clear.contains(&name);
        let both = [
            (KeyLimitName::ExpiresAt, self.expires_at.is_some(), "expires_at"),
            (KeyLimitName::Models, self.models.is_some(), "models"),
            (KeyLimitName::Budget, self.budget_usd.is_some(), "budget"),
            (KeyLimitName::Rpm, self.rpm.is_some(), "rpm"),
            (KeyLimitName::Tpm, self.tpm.is_some(), "tpm"),
            (KeyLimitName::AllowIps, self.allow_ips.is_some(), "allow_ips"),
        ];
        if let Some((_, _, field)) = both.iter().find(|(name, set, _)| *set && cleared(*name)) {
            return Err(ValidationError::Invalid(format!("{field} is both set and cleared")));
        }
        if self.budget_period.is_some() && self.budget_usd.is_none() {
            return Err(ValidationError::Invalid("budget_period needs a budget_usd".into()));
        }
        fn or_clear<T>(clear: &[KeyLimitName], name: KeyLimitName) -> Option<Option<T>> {
            if clear.contains(&name) { Some(None) } else { None }
        }
        let limit = |field: &str, n: Option<i64>| -> Result<Option<std::num::NonZeroU32>, ValidationError> {
            n.map(|n| {
                u32::try_from(n)
                    .ok()
                    .and_then(std::num::NonZeroU32::new)
                    .ok_or_else(|| bad(field, &"must be 1..4294967295"))
            })
            .transpose()
        };
        let budget = self
            .budget_usd
            .map(|usd| {
                let limit = UsdAmount::parse_decimal(&usd).map_err(|e| bad("budget_usd", &e))?;
                let period = self
                    .budget_period
                    .as_deref()
                    .map_or(Ok(BudgetPeriod::Total), str::parse)
                    .map_err(|e| bad("budget_period", &e))?;
                Ok::<_, ValidationError>(KeyBudget { limit, period })
            })
            .transpose()?;
        let change = domain::KeyLimitsChange {
            expires_at: match self.expires_at {
                Some(t) => Some(Some(t.parse::<Timestamp>().map_err(|e| bad("expires_at", &e))?)),
                None => or_clear(&clear, KeyLimitName::ExpiresAt),
            },
            models: match self.models {
                Some(m) => Some(Some(ModelAllowList::parse(&m.joined()).map_err(|e| bad("models", &e))?)),
                None => or_clear(&clear, KeyLimitName::Models),
            },
            budget: budget.map(Some).or_else(|| or_clear(&clear, KeyLimitName::Budget)),
            rpm: limit("rpm", self.rpm)?.map(Some).or_else(|| or_clear(&clear, KeyLimitName::Rpm)),
            tpm: limit("tpm", self.tpm)?.map(Some).or_else(|| or_clear(&clear, KeyLimitName::Tpm)),
            allow_ips: match self.allow_ips {
                Some(l) => Some(Some(IpAllowList::parse(&l.joined()).map_err(|e| bad("allow_ips", &e))?)),
                None => or_clear(&clear, KeyLimitName::AllowIps),
            },
        };
        if change == domain::KeyLimitsChange::default() {
            return Err(ValidationError::Invalid(
                "give at least one of expires_at, models, budget_usd, rpm, tpm, allow_ips or clear".into(),
            ));
        }
        Ok(change)
    }
}

/// A checked list query: the page and, where the list has one, the search text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Page and size (20, 50 or 100; default 20).
    pub page: PageRequest,
    /// `q`: text the id, name or email contains.
    pub search: Option<String>,
}

/// Checks a list's query: `page` ≥ 1, `page_size` 20, 50 or 100, and `q` (at most 100
/// characters) where `searchable`. Unknown parameters and repeats are refused.
pub fn list_query<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
    searchable: bool,
) -> Result<ListQuery, ValidationError> {
    let (mut page, mut page_size, mut search) = (None, None, None);
    for (name, value) in params {
        let taken = match name {
            "page" => page.replace(parse_page(value)?).is_some(),
            "page_size" => page_size.replace(parse_page_size(value)?).is_some(),
            "q" if searchable => {
                if value.chars().count() > 100 {
                    return Err(ValidationError::Invalid("q must be at most 100 characters".into()));
                }
                search.replace(value.to_owned()).is_some()
            }
            other => return Err(ValidationError::Invalid(format!("unknown query parameter {other:?}"))),
        };
        if taken {
            return Err(ValidationError::Invalid(format!("query parameter {name:?} given more than once")));
        }
    }
    Ok(ListQuery { page: PageRequest { page: page.unwrap_or(1), page_size: page_size.unwrap_or(20) }, search })
}

/// A checked `GET /api/v1/usage` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageQuery {
    /// `day` (default) or `model`.
    pub group: UsageGroup,
    /// First day, included.
    pub from: UtcDay,
    /// Last day, included.
    pub to: UtcDay,
}

impl UsageQuery {
    /// How many days the range covers.
    pub const fn days(&self) -> i64 {
        self.to.0 - self.from.0 + 1
    }
}

/// Checks the usage query: `group_by` `day` or `model`, `from` and `to` as `YYYY-MM-DD` (UTC),
/// `from` ≤ `to`, at most [`USAGE_MAX_DAYS`] days. Without `to` the range ends `today`; without
/// `from` it covers [`USAGE_DEFAULT_DAYS`] days up to `to`.
pub fn usage_query<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
    today: UtcDay,
) -> Result<UsageQuery, ValidationError> {
    let (mut group, mut from, mut to) = (None, None, None);
    let day =
        |name: &str, value: &str| value.parse::<UtcDay>().map_err(|e| ValidationError::Invalid(format!("{name}: {e}")));
    for (name, value) in params {
        let taken = match name {
            "group_by" => {
                let g = match value {
                    "day" => UsageGroup::Day,
                    "model" => UsageGroup::Model,
                    other => {
                        return Err(ValidationError::Invalid(format!("group_by must be day or model, got {other:?}")));
                    }
                };
                group.replace(g).is_some()
            }
            "from" => from.replace(day(name, value)?).is_some(),
            "to" => to.replace(day(name, value)?).is_some(),
            other => return Err(ValidationError::Invalid(format!("unknown query parameter {other:?}"))),
        };
        if taken {
            return Err(ValidationError::Invalid(format!("query parameter {name:?} given more than once")));
        }
    }
    let (from, to) = day_range(from, to, today)?;
    Ok(UsageQuery { group: group.unwrap_or(UsageGroup::Day), from, to })
}

/// A range of UTC days as the usage report and the exports take it: without `to` it ends `today`;
/// without `from` it covers [`USAGE_DEFAULT_DAYS`] days up to `to`; `from` ≤ `to`, and at most
/// [`USAGE_MAX_DAYS`] days, both ends included.
pub(crate) fn day_range(
    from: Option<UtcDay>,
    to: Option<UtcDay>,
    today: UtcDay,
) -> Result<(UtcDay, UtcDay), ValidationError> {
    let to = to.unwrap_or(today);
    let from = from.unwrap_or(UtcDay(to.0 - (USAGE_DEFAULT_DAYS - 1)));
    if from > to {
        return Err(ValidationError::Invalid(format!("from ({from}) must not be after to ({to})")));
    }
    let days = to.0 - from.0 + 1;
    if days > USAGE_MAX_DAYS {
        return Err(ValidationError::Invalid(format!(
            "the range covers {days} days; at most {USAGE_MAX_DAYS} (from {from} to {to})"
        )));
    }
    Ok((from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(params: &[(&str, &str)]) -> Result<UsageQuery, ValidationError> {
        usage_query(params.iter().copied(), "2026-11-27".parse().expect("day"))
    }

    #[test]
    fn usage_ranges_and_their_edges() {
        let q = usage(&[]).expect("defaults");
        assert_eq!(
            (q.group, q.from.to_string(), q.to.to_string(), q.days()),
            (UsageGroup::Day, "2026-10-29".into(), "2026-11-27".into(), 30)
        );
        // 366 days is the most (2025-11-27..2026-11-27 is 366 days), 367 is one too many.
        assert_eq!(usage(&[("from", "2025-11-27"), ("to", "2026-11-27")]).map(|q| q.days()), Ok(366));
        assert!(usage(&[("from", "2025-11-26"), ("to", "2026-11-27")]).is_err());
        assert_eq!(usage(&[("from", "2026-11-27"), ("to", "2026-11-27")]).map(|q| q.days()), Ok(1));
        assert!(usage(&[("from", "2026-11-28"), ("to", "2026-11-27")]).is_err());
        assert_eq!(usage(&[("group_by", "model")]).map(|q| q.group), Ok(UsageGroup::Model));
        for bad in [("group_by", "week"), ("from", "2026-11-31"), ("to", "yesterday"), ("page", "1")] {
            assert!(usage(&[bad]).is_err(), "{bad:?}");
        }
        assert!(usage(&[("to", "2026-11-27"), ("to", "2026-11-27")]).is_err());
    }

    #[test]
    fn list_queries() {
        let q = list_query([("q", "ann"), ("page", "2"), ("page_size", "50")], true).expect("valid");
        assert_eq!((q.page.page, q.page.page_size, q.search.as_deref()), (2, 50, Some("ann")));
        assert!(list_query([("q", "ann")], false).is_err());
        assert!(list_query([("page_size", "10")], true).is_err());
        assert!(list_query([("page", "0")], true).is_err());
        assert!(list_query([("q", "x".repeat(101).as_str())], true).is_err());
        assert!(list_query([("q", "x".repeat(100).as_str())], true).is_ok());
    }

    #[test]
    fn key_limit_changes() {
        let change = |body: &str| manage_body::<KeyLimitsBody>(body.as_bytes()).and_then(KeyLimitsBody::change);
        let set =
            change(r#"{"rpm": 60, "budget_usd": "5", "budget_period": "day", "clear": ["models"]}"#).expect("valid");
        assert_eq!(set.rpm, Some(std::num::NonZeroU32::new(60)));
        assert_eq!(set.models, Some(None), "cleared");
        assert_eq!(set.budget.flatten().map(|b| b.period), Some(domain::BudgetPeriod::Day));
        assert_eq!(set.expires_at, None, "untouched");
        for bad in [
            r#"{}"#,
            r#"{"clear": []}"#,
            r#"{"rpm": 0}"#,
            r#"{"rpm": 4294967296}"#,
            r#"{"rpm": 5, "clear": ["rpm"]}"#,
            r#"{"budget_period": "day"}"#,
            r#"{"expires_at": "tomorrow"}"#,
            r#"{"clear": ["everything"]}"#,
        ] {
            assert!(change(bad).is_err(), "{bad}");
        }
        assert!(change(r#"{"rpm": 4294967295}"#).is_ok(), "the largest limit");
    }

    #[test]
    fn bodies_are_typed_and_checked() {
        let key: NewKeyBody = manage_body(br#"{"name":"ci","scopes":["task:read"]}"#).expect("valid");
        assert_eq!(key.scopes, vec!["task:read".to_owned()]);
        for bad in [
            &br#"{"name":"","scopes":["task:read"]}"#[..],
            br#"{"name":"a","scopes":[]}"#,
            br#"{"name":"a","scopes":["task:read"],"admin":true}"#,
            br#"[]"#,
        ] {
            assert!(manage_body::<NewKeyBody>(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let patch: UserPatchBody = manage_body(br#"{"concurrency_limit":100000}"#).expect("valid");
        assert_eq!(patch.concurrency_limit, Some(100_000));
        assert!(manage_body::<UserPatchBody>(br#"{"concurrency_limit":100001}"#).is_err());
        assert!(manage_body::<UserPatchBody>(br#"{"concurrency_limit":0}"#).is_err());
        assert!(manage_body::<UserPatchBody>(br#"{"disabled":null}"#).is_err());
        let note = "n".repeat(500);
        assert!(manage_body::<TopupBody>(format!(r#"{{"amount":"1","note":"{note}"}}"#).as_bytes()).is_ok());
        assert!(manage_body::<TopupBody>(format!(r#"{{"amount":"1","note":"{note}n"}}"#).as_bytes()).is_err());
    }
}
