//! The customer side of the management API: spend by day or model, the whole ledger page by
//! page, the caller's own keys (never granting more than the key that asks) and webhook secret.

use domain::ports::PageRequest;
use domain::{ApiKeyId, DailyModelSpend, KeyLimits, LedgerEntry, Scope, UsageGroup, UsageRow, UsdAmount, UtcDay};

use crate::admin::CreatedKey;
use crate::{Gateway, Principal, ServiceError};

/// One page of a list, with the page asked for and how many items there are in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The items of the page, newest first.
    pub items: Vec<T>,
    /// The page asked for.
    pub page: PageRequest,
    /// How many items the whole list holds.
    pub total: u64,
}

/// `GET /api/v1/usage`: settled spend in a range of UTC days, by day (every day present, zero
/// or not) or by model (models with spend only, largest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageReport {
    /// The query it answers.
    pub query: validation::UsageQuery,
    /// The groups.
    pub rows: Vec<UsageRow>,
}

impl UsageReport {
    /// Folds per-day-and-model sums into the report's groups.
    fn fold(query: validation::UsageQuery, spend: &[DailyModelSpend]) -> UsageReport {
        let rows = match query.group {
            UsageGroup::Day => (query.from.0..=query.to.0)
                .map(|day| {
                    let models: Vec<UsageRow> = spend
                        .iter()
                        .filter(|s| s.day == day)
                        .map(|s| UsageRow {
                            group: s.model.clone(),
                            spent: s.spent,
                            calls: s.calls,
                            models: Vec::new(),
                        })
                        .collect();
                    let (spent, calls) = models.iter().fold((0_i64, 0_i64), |(m, c), s| {
                        (m.saturating_add(s.spent.micros()), c.saturating_add(s.calls))
                    });
                    UsageRow { group: UtcDay(day).to_string(), spent: UsdAmount::from_micros(spent), calls, models }
                })
                .collect(),
            UsageGroup::Model => {
                let mut rows: Vec<UsageRow> = Vec::new();
                for s in spend {
                    match rows.iter_mut().find(|r| r.group == s.model) {
                        Some(row) => {
                            row.spent = UsdAmount::from_micros(row.spent.micros().saturating_add(s.spent.micros()));
                            row.calls = row.calls.saturating_add(s.calls);
                        }
                        None => rows.push(UsageRow {
                            group: s.model.clone(),
                            spent: s.spent,
                            calls: s.calls,
                            models: Vec::new(),
                        }),
                    }
                }
                rows.sort_by(|a, b| b.spent.cmp(&a.spent).then_with(|| a.group.cmp(&b.group)));
                rows
            }
        };
        UsageReport { query, rows }
    }
}

impl Gateway {
    /// The caller's settled spend as the query (`group_by`, `from`, `to`) asks.
    pub async fn usage<'a>(
        &self,
        who: &Principal,
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<UsageReport, ServiceError> {
        let query = validation::usage_query(params, UtcDay::of(self.ports.clock.now()))?;
        let to_ms = UtcDay(query.to.0 + 1).start().millis();
        let spend = self.ports.manage.daily_spend(&who.user_id, query.from.start().millis(), to_ms).await?;
        Ok(UsageReport::fold(query, &spend))
    }

    /// One page of the caller's ledger, newest first.
    pub async fn ledger_page<'a>(
        &self,
        who: &Principal,
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Page<LedgerEntry>, ServiceError> {
        let query = validation::list_query(params, false)?;
        let (items, total) = self.ports.manage.ledger_page(&who.user_id, query.page).await?;
        Ok(Page { items, page: query.page, total })
    }

    /// A key for the caller's own account with `scopes`, each of which the calling key carries,
    /// and `asked` limits within the calling key's (see `lineage.rs`): a key never grants more
    /// than the key that made it. The new key is the calling key's child; its creation is audited.
    pub async fn create_own_key(
        &self,
        who: &Principal,
        name: &str,
        scopes: &[String],
        asked: KeyLimits,
    ) -> Result<CreatedKey, ServiceError> {
        let name = name.trim();
        if name.is_empty() {
            return Err(ServiceError::InvalidRequest("name must not be blank".into()));
        }
        let mut granted = Vec::with_capacity(scopes.len());
        for text in scopes {
            let scope: Scope = text.parse().map_err(|_| {
                let known = Scope::ALL.map(Scope::as_str).join(", ");
                ServiceError::InvalidRequest(format!("scopes: unknown scope {text:?} (one of {known})"))
            })?;
            if !who.scopes.contains(&scope) {
                return Err(ServiceError::InvalidRequest(format!(
                    "scopes: {scope} is not a scope of the key making this request, so it cannot grant it"
                )));
            }
            if !granted.contains(&scope) {
                granted.push(scope);
            }
        }
        granted.sort();
        let limits = self.child_limits(who, asked).await?;
        let created = self.issue_key(&who.user_id, granted, name, limits, Some(&who.key_id)).await?;
        let after = crate::audit::key_state(&created.key);
        self.record_audit(&Gateway::key_actor(who), "key.create", created.key.id.as_str(), None, Some(after)).await?;
        Ok(created)
    }

    /// Revokes one of the caller's keys (the one in use too: its next request is refused), and so
    /// every key it minted; another user's key is `NotFound`, like a missing one. Audited.
    pub async fn revoke_own_key(&self, who: &Principal, id: &str) -> Result<crate::KeyView, ServiceError> {
        let id = ApiKeyId(id.to_owned());
        let before = self.ports.accounts.keys_of_user(&who.user_id).await?.into_iter().find(|k| k.id == id);
        let Some(before) = before else {
            return Err(ServiceError::NotFound(format!("key {id}")));
        };
        if !who.ancestors.is_empty() && !self.descends_from(&before, &who.key_id).await? {
            return Err(ServiceError::InvalidRequest(format!(
                "key {id} was not minted by the key making this request, which may revoke only itself and the keys it minted"
            )));
        }
        let key = self.revoke_key(&id).await?;
        let (before, after) = (crate::audit::key_state(&before), crate::audit::key_state(&key));
        self.record_audit(&Gateway::key_actor(who), "key.revoke", id.as_str(), Some(before), Some(after)).await?;
        Ok(self.view_key(key, None))
    }

    /// Replaces the caller's webhook secret; the new one is returned, shown this once. Audited
    /// (without the secret).
    pub async fn rotate_own_webhook_secret(&self, who: &Principal) -> Result<String, ServiceError> {
        let secret = self.rotate_webhook_secret(&who.user_id).await?;
        let after = serde_json::json!({"rotated": true});
        self.record_audit(&Gateway::key_actor(who), "user.webhook_secret", who.user_id.as_str(), None, Some(after))
            .await?;
        Ok(secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend(day: i64, model: &str, micros: i64, calls: i64) -> DailyModelSpend {
        DailyModelSpend { day, model: model.into(), spent: UsdAmount::from_micros(micros), calls }
    }

    #[test]
    fn days_are_all_present_and_models_are_summed() {
        let query = validation::UsageQuery { group: UsageGroup::Day, from: UtcDay(10), to: UtcDay(13) };
        let rows = [spend(11, "a", 5, 1), spend(11, "b", 7, 2), spend(13, "a", 1, 1)];
        let report = UsageReport::fold(query, &rows);
        let days: Vec<(i64, i64)> = report.rows.iter().map(|r| (r.spent.micros(), r.calls)).collect();
        assert_eq!(days, vec![(0, 0), (12, 3), (0, 0), (1, 1)]);
        assert_eq!(report.rows[0].group, "1970-01-11");
        let parts: Vec<(&str, i64)> =
            report.rows[1].models.iter().map(|m| (m.group.as_str(), m.spent.micros())).collect();
        assert_eq!(parts, vec![("a", 5), ("b", 7)], "a day's spend by model");
        let by_model = UsageReport::fold(validation::UsageQuery { group: UsageGroup::Model, ..query }, &rows);
        let models: Vec<(&str, i64, i64)> =
            by_model.rows.iter().map(|r| (r.group.as_str(), r.spent.micros(), r.calls)).collect();
        assert_eq!(models, vec![("b", 7, 2), ("a", 6, 2)]);
    }
}
