//! Keys minted with keys: a key created through the API is the child of the key that made it. Its
//! limits are within its parent's when it is made ([`Gateway::child_limits`]), and every request
//! with it is also held to each ancestor's limits as they are now ([`Lineage`]): refused once an
//! ancestor is revoked or expired, within each ancestor's model and address lists, counted against
//! each rate-limited ancestor's rates (`rates.rs`: the keys a key mints share its rates), and its
//! holds count against every budgeted ancestor's budget in the same reservation that checks the
//! balance.

use domain::{
    ApiKey, ApiKeyId, BudgetKeys, IpAllowList, KeyBudget, KeyLimits, KeyRates, ModelAllowList, ModelKind, ModelRule,
    Timestamp,
};

use crate::{Gateway, Principal, ServiceError};

/// How many generations of keys may descend from an operator's key (the operator's key is the
/// first): a chain is read on every authentication that misses the key cache, one key a read.
pub const MAX_KEY_GENERATIONS: usize = 5;

/// An ancestor's limits that still bind a descendant's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ancestor {
    /// The ancestor key.
    pub id: ApiKeyId,
    /// Its model allow-list, if it has one.
    pub models: Option<ModelAllowList>,
    /// Its client address list, if it has one.
    pub allow_ips: Option<IpAllowList>,
    /// Its budget, if it has one.
    pub budget: Option<KeyBudget>,
    /// Its rate limits: the calls of every key it minted count against them too.
    pub rates: KeyRates,
}

/// What a key's ancestors impose, folded from the chain read at authentication.
#[derive(Debug, Default)]
pub(crate) struct Lineage {
    /// The ancestors, nearest first.
    pub(crate) ancestors: Vec<Ancestor>,
    /// The earliest expiry among them.
    pub(crate) expires_at: Option<Timestamp>,
    /// The lowest rates among them.
    pub(crate) rates: KeyRates,
    /// Whether one of them is revoked or gone.
    pub(crate) ended: bool,
}

/// The earlier of two optional instants (`None` is never).
fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The lower of two optional limits (`None` is no limit).
fn lowest<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The lower of each rate of `a` and `b`.
pub(crate) fn lowest_rates(a: KeyRates, b: KeyRates) -> KeyRates {
    KeyRates { rpm: lowest(a.rpm, b.rpm), tpm: lowest(a.tpm, b.tpm) }
}

/// The keys whose budgets a call with `key` counts against, given its ancestors.
pub(crate) fn budget_keys(key: &ApiKey, ancestors: &[Ancestor]) -> BudgetKeys {
    let own = key.budget.is_some().then(|| key.id.clone());
    BudgetKeys::new(own.into_iter().chain(ancestors.iter().filter(|a| a.budget.is_some()).map(|a| a.id.clone())))
}

/// Whether every model `rule` reaches is on `list` (`kind_of` names a model's kind).
fn rule_within(rule: &ModelRule, list: &ModelAllowList, kind_of: &dyn Fn(&str) -> Option<ModelKind>) -> bool {
    match rule {
        ModelRule::Kind(kind) => list.rules().contains(&ModelRule::Kind(*kind)),
        ModelRule::Name(name) => kind_of(name).is_some_and(|kind| list.allows(name, kind)),
    }
}

/// Whether every network of `child` lies inside one of `parent`'s.
fn networks_within(child: &IpAllowList, parent: &IpAllowList) -> bool {
    child.networks().iter().all(|net| parent.networks().iter().any(|outer| outer.contains(net)))
}

impl Gateway {
    /// Reads `key`'s ancestors (at most [`MAX_KEY_GENERATIONS`]` − 1` of them) and folds what they
    /// impose. A chain longer than that, or one that loops, counts as ended.
    pub(crate) async fn lineage(&self, key: &ApiKey) -> Result<Lineage, ServiceError> {
        let mut lineage = Lineage::default();
        let mut next = key.parent_id.clone();
        while let Some(id) = next {
            if lineage.ancestors.len() + 1 >= MAX_KEY_GENERATIONS
                || id == key.id
                || lineage.ancestors.iter().any(|a| a.id == id)
            {
                lineage.ended = true;
                break;
            }
            let Some(parent) = self.ports.manage.key(&id).await? else {
                lineage.ended = true;
                break;
            };
            if parent.revoked_at.is_some() || parent.user_id != key.user_id {
                lineage.ended = true;
                break;
            }
            lineage.expires_at = earliest(lineage.expires_at, parent.expires_at);
            lineage.rates = lowest_rates(lineage.rates, parent.rates);
            next = parent.parent_id.clone();
            lineage.ancestors.push(Ancestor {
                id: parent.id,
                models: parent.models,
                allow_ips: parent.allow_ips,
                budget: parent.budget,
                rates: parent.rates,
            });
        }
        Ok(lineage)
    }

    /// Whether `key` is `ancestor` or one of the keys it minted (directly or not).
    pub(crate) async fn descends_from(&self, key: &ApiKey, ancestor: &ApiKeyId) -> Result<bool, ServiceError> {
        let mut next = Some(key.id.clone());
        let mut steps = 0;
        while let Some(id) = next {
            if id == *ancestor {
                return Ok(true);
            }
            steps += 1;
            if steps > MAX_KEY_GENERATIONS {
                break;
            }
            next = if id == key.id {
                key.parent_id.clone()
            } else {
                self.ports.manage.key(&id).await?.and_then(|k| k.parent_id)
            };
        }
        Ok(false)
    }

    /// The limits of a key that `parent` mints with `asked`: each limit not asked is the parent's
    /// own, and each one asked must be within every limit the parent is held to (its own and its
    /// ancestors'); anything more is refused with a message that names the limit.
    pub(crate) async fn child_limits(&self, parent: &Principal, asked: KeyLimits) -> Result<KeyLimits, ServiceError> {
        let refuse = |what: String| Err(ServiceError::InvalidRequest(what));
        if parent.ancestors.len() + 1 >= MAX_KEY_GENERATIONS {
            return refuse(format!(
                "this key is {} generations from an operator's key, and keys minted through the API stop at {MAX_KEY_GENERATIONS}",
                parent.ancestors.len() + 1
            ));
        }
        let KeyLimits { expires_at, models, budget, rates, allow_ips } = asked;
        let expires_at = match (expires_at, parent.expires_at) {
            (Some(asked), Some(own)) if asked > own => {
                return refuse(format!(
                    "expires_at: {asked} is later than the key making this request expires ({own})"
                ));
            }
            (asked, own) => asked.or(own),
        };
        let mut lists: Vec<&ModelAllowList> = parent.models.iter().collect();
        lists.extend(parent.ancestors.iter().filter_map(|a| a.models.as_ref()));
        let models = match models {
            Some(asked) => {
                let known = self.ports.models.models().await?;
                let kind_of = |name: &str| known.iter().find(|m| m.name == name).map(|m| m.kind);
                for rule in asked.rules() {
                    if lists.iter().any(|list| !rule_within(rule, list, &kind_of)) {
                        let what = match rule {
                            ModelRule::Kind(kind) => format!("every {kind} model"),
                            ModelRule::Name(name) => format!("model {name}"),
                        };
                        return refuse(format!("models: {what} is not allowed to the key making this request"));
                    }
                }
                Some(asked)
            }
            None => parent.models.clone(),
        };
        if let Some(asked) = budget {
            let tightest = parent
                .budget
                .iter()
                .chain(parent.ancestors.iter().filter_map(|a| a.budget.as_ref()))
                .min_by_key(|b| b.limit);
            if let Some(own) = tightest.filter(|own| asked.limit > own.limit) {
                return refuse(format!(
                    "budget_usd: {} is above the budget of the key making this request ({} per {})",
                    asked.limit, own.limit, own.period
                ));
            }
        }
        for (name, asked, own) in [("rpm", rates.rpm, parent.rates.rpm), ("tpm", rates.tpm, parent.rates.tpm)] {
            if let (Some(asked), Some(own)) = (asked, own)
                && asked > own
            {
                return refuse(format!("{name}: {asked} is above the key making this request ({own})"));
            }
        }
        let rates = KeyRates { rpm: rates.rpm.or(parent.rates.rpm), tpm: rates.tpm.or(parent.rates.tpm) };
        let mut nets: Vec<&IpAllowList> = parent.allow_ips.iter().collect();
        nets.extend(parent.ancestors.iter().filter_map(|a| a.allow_ips.as_ref()));
        let allow_ips = match allow_ips {
            Some(asked) => {
                if let Some(outer) = nets.iter().find(|outer| !networks_within(&asked, outer)) {
                    return refuse(format!(
                        "allow_ips: {asked} is not inside the addresses of the key making this request ({outer})"
                    ));
                }
                Some(asked)
            }
            None => parent.allow_ips.clone(),
        };
        Ok(KeyLimits { expires_at, models, budget, rates, allow_ips })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_and_rules_are_checked_for_containment() {
        let parent = IpAllowList::parse("10.0.0.0/8, 192.0.2.7").expect("list");
        assert!(networks_within(&IpAllowList::parse("10.1.0.0/16, 192.0.2.7/32").expect("list"), &parent));
        assert!(!networks_within(&IpAllowList::parse("10.0.0.0/7").expect("list"), &parent));
        assert!(!networks_within(&IpAllowList::parse("192.0.2.0/24").expect("list"), &parent));
        let list = ModelAllowList::parse("language, img-1").expect("list");
        let kind_of = |name: &str| match name {
            "chat-1" => Some(ModelKind::Language),
            "img-1" | "img-2" => Some(ModelKind::Image),
            _ => None,
        };
        assert!(rule_within(&ModelRule::Name("chat-1".into()), &list, &kind_of));
        assert!(rule_within(&ModelRule::Name("img-1".into()), &list, &kind_of));
        assert!(!rule_within(&ModelRule::Name("img-2".into()), &list, &kind_of));
        assert!(rule_within(&ModelRule::Kind(ModelKind::Language), &list, &kind_of));
        assert!(!rule_within(&ModelRule::Kind(ModelKind::Image), &list, &kind_of), "one image model is not all");
        assert!(!rule_within(&ModelRule::Name("unknown".into()), &list, &kind_of));
    }

    #[test]
    fn an_unknown_address_fails_every_address_list_and_an_ancestors_list_binds() {
        let mut who = Principal {
            user_id: domain::UserId("u".into()),
            key_id: ApiKeyId("k".into()),
            scopes: Vec::new(),
            expires_at: None,
            models: None,
            budget: None,
            rates: KeyRates::default(),
            allow_ips: None,
            role: domain::Role::User,
            ancestors: Vec::new(),
            budget_keys: BudgetKeys::NONE,
            max_cost: None,
        };
        let local: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
        assert!(who.may_connect_from(None), "a key without a list takes any caller");
        who.ancestors.push(Ancestor {
            id: ApiKeyId("p".into()),
            models: Some(ModelAllowList::parse("image").expect("list")),
            allow_ips: Some(IpAllowList::parse("10.0.0.0/8").expect("list")),
            budget: None,
            rates: KeyRates::default(),
        });
        assert!(!who.may_connect_from(None), "an unknown address fails an ancestor's list");
        assert!(!who.may_connect_from(Some(local)), "outside the ancestor's list");
        assert!(who.may_connect_from(Some("10.9.9.9".parse().expect("ip"))));
        assert!(!who.may_use("chat-1", ModelKind::Language), "outside the ancestor's models");
        assert!(who.may_use("img-1", ModelKind::Image));
    }

    #[test]
    fn the_tighter_of_two_limits_wins() {
        assert_eq!(earliest(Some(Timestamp(5)), Some(Timestamp(3))), Some(Timestamp(3)));
        assert_eq!(earliest(None, Some(Timestamp(3))), Some(Timestamp(3)));
        assert_eq!(lowest(Some(2), None), Some(2));
        assert_eq!(lowest::<u32>(None, None), None);
    }
}
