//! Read use cases: the model list, the account overview, the caller's keys and tasks.

use std::sync::Arc;

use catalog::ModelDef;
use domain::{ApiKey, KeyBudgetState, LedgerEntry, ModelRecord, Task, TaskId, TaskStats, UsdAmount, User};

use crate::{Gateway, OVERVIEW_LEDGER_ENTRIES, Principal, ServiceError};

/// A model as API users see it: the stored switches and price plus the catalog definition.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelView {
    /// Switches, cap and active price.
    pub record: ModelRecord,
    /// Limits, capabilities and options from the catalog (shared: every call of the model reads it).
    pub def: std::sync::Arc<ModelDef>,
}

/// What the chat hot path needs from the catalog.
#[derive(Debug, Clone)]
pub(crate) struct CatalogSnapshot {
    /// Enabled models.
    pub models: Arc<Vec<ModelView>>,
    /// Maintenance mode.
    pub maintenance: bool,
    /// The operators' model aliases.
    pub aliases: Arc<Vec<domain::ModelAlias>>,
    /// The models an operator switched off (a fallback moves past them).
    pub disabled: Arc<Vec<String>>,
}

/// Everything `GET /api/v1/overview` shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Overview {
    /// The caller.
    pub user: User,
    /// Task counts and spending.
    pub stats: TaskStats,
    /// The enabled models.
    pub routes: Vec<ModelView>,
    /// Newest ledger entries first.
    pub ledger: Vec<LedgerEntry>,
    /// Whether maintenance mode is on.
    pub maintenance: bool,
    /// The caller's keys with what each spent.
    pub keys: Vec<KeyView>,
}

/// One of the caller's keys: its settings, its budget as of now, and what it was charged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyView {
    /// The key as stored (never its secret).
    pub key: ApiKey,
    /// Its budget and counters as of now (a period that moved on shows nothing spent yet).
    pub budget: KeyBudgetState,
    /// What its budget still allows now; `None` without a budget.
    pub remaining: Option<UsdAmount>,
    /// The sum of its settled charges, all periods together.
    pub spent: UsdAmount,
    /// How many settled calls that is.
    pub calls: i64,
    /// The limits its requests are held to with its ancestors' (see `lineage.rs`).
    pub effective: EffectiveLimits,
}

/// A key's limits folded with those of the keys that minted it, as a request with it meets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveLimits {
    /// Whether requests with it are served: neither it nor any ancestor revoked or expired.
    pub active: bool,
    /// The earliest expiry of it and its ancestors.
    pub expires_at: Option<domain::Timestamp>,
    /// The lowest rates of it and its ancestors.
    pub rates: domain::KeyRates,
    /// The keys whose budgets its calls count against, nearest first.
    pub budget_keys: domain::BudgetKeys,
}

/// One page of the caller's tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPage {
    /// The tasks, newest first.
    pub tasks: Vec<Task>,
    /// The query that produced it.
    pub query: validation::TaskListQuery,
    /// How many tasks match the filter in all.
    pub total: u64,
}

impl Gateway {
    /// The enabled models with their active prices, by name.
    pub async fn list_models(&self) -> Result<Vec<ModelView>, ServiceError> {
        let records = self.ports.models.models().await?;
        records
            .into_iter()
            .filter(|r| r.enabled)
            .map(|record| {
                let def = ModelDef::from_definition(&record.definition)
                    .map_err(|e| ServiceError::Internal(format!("model {}: {e}", record.name)))?;
                Ok(ModelView { record, def: std::sync::Arc::new(def) })
            })
            .collect()
    }

    /// The aliases a model list shows, each with the first of its models that is enabled (an alias
    /// whose models are all switched off is not listed).
    pub async fn listed_aliases(
        &self,
        models: &[ModelView],
    ) -> Result<Vec<(domain::ModelAlias, ModelView)>, ServiceError> {
        let aliases = self.model_aliases().await?;
        Ok(aliases
            .into_iter()
            .filter_map(|alias| {
                let first = alias.models.iter().find_map(|name| models.iter().find(|m| &m.record.name == name))?;
                let first = first.clone();
                Some((alias, first))
            })
            .collect())
    }

    /// The operators' model aliases, by name.
    pub async fn model_aliases(&self) -> Result<Vec<domain::ModelAlias>, ServiceError> {
        Ok(self.ports.models.aliases().await?)
    }

    /// The enabled models and the maintenance flag, from the cache when fresh (hot path).
    pub(crate) async fn catalog_snapshot(&self) -> Result<CatalogSnapshot, ServiceError> {
        self.caches
            .catalog_or_load(async {
                let records = self.ports.models.models().await?;
                let disabled = records.iter().filter(|r| !r.enabled).map(|r| r.name.clone()).collect();
                Ok(CatalogSnapshot {
                    models: std::sync::Arc::new(self.list_models().await?),
                    maintenance: self.ports.models.maintenance().await?,
                    aliases: std::sync::Arc::new(self.ports.models.aliases().await?),
                    disabled: std::sync::Arc::new(disabled),
                })
            })
            .await
    }

    /// The caller's account overview.
    pub async fn overview(&self, who: &Principal) -> Result<Overview, ServiceError> {
        let user = self.ports.accounts.user(&who.user_id).await?.ok_or(ServiceError::InvalidApiKey)?;
        let stats = self.ports.tasks.task_stats(&who.user_id).await?;
        let routes = self.list_models().await?;
        let ledger = self.ports.ledger.entries(&who.user_id, OVERVIEW_LEDGER_ENTRIES).await?;
        let maintenance = self.ports.models.maintenance().await?;
        let keys = self.my_keys(who).await?;
        Ok(Overview { user, stats, routes, ledger, maintenance, keys })
    }

    /// The caller's keys (revoked ones too), oldest first, with their limits, their budget's
    /// spend in the current period and what remains of it, and what each was charged in all.
    pub async fn my_keys(&self, who: &Principal) -> Result<Vec<KeyView>, ServiceError> {
        self.keys_of(&who.user_id).await
    }

    /// Every key of `user` as [`Gateway::my_keys`] shows them.
    pub(crate) async fn keys_of(&self, user: &domain::UserId) -> Result<Vec<KeyView>, ServiceError> {
        let keys = self.ports.accounts.keys_of_user(user).await?;
        let totals = self.ports.accounts.spend_by_key(user).await?;
        let effective: Vec<EffectiveLimits> = keys.iter().map(|key| self.effective(key, Some(&keys))).collect();
        Ok(keys
            .into_iter()
            .zip(effective)
            .map(|(key, effective)| {
                let total = totals.iter().find(|t| t.key == key.id);
                KeyView { effective, ..self.view_key(key, total) }
            })
            .collect())
    }

    /// `key`'s limits folded with its ancestors' among `all` (a user's keys: a key's ancestors
    /// are its owner's); a missing ancestor, or a chain past its bound, ends it. Without `all`,
    /// the key's own limits.
    fn effective(&self, key: &ApiKey, all: Option<&[ApiKey]>) -> EffectiveLimits {
        let now = self.ports.clock.now();
        let mut chain = vec![key];
        let mut ended = false;
        let mut next = all.and(key.parent_id.as_ref());
        while let Some(id) = next {
            match all.unwrap_or_default().iter().find(|k| k.id == *id) {
                Some(parent) if chain.len() < crate::MAX_KEY_GENERATIONS && !chain.iter().any(|k| k.id == *id) => {
                    chain.push(parent);
                    next = parent.parent_id.as_ref();
                }
                _ => {
                    ended = true;
                    break;
                }
            }
        }
        let expires_at = chain.iter().filter_map(|k| k.expires_at).min();
        let rates = chain.iter().fold(domain::KeyRates::default(), |r, k| crate::lineage::lowest_rates(r, k.rates));
        let budget_keys = domain::BudgetKeys::new(chain.iter().filter(|k| k.budget.is_some()).map(|k| k.id.clone()));
        let active = !ended && chain.iter().all(|k| k.revoked_at.is_none()) && expires_at.is_none_or(|t| now < t);
        EffectiveLimits { active, expires_at, rates, budget_keys }
    }

    /// `key` as of now, with its all-time `total` when known.
    pub fn view_key(&self, key: ApiKey, total: Option<&domain::ports::KeyTotal>) -> KeyView {
        let now = self.ports.clock.now();
        let budget = key.budget_state().at(now);
        KeyView {
            effective: self.effective(&key, None),
            remaining: budget.remaining(now),
            budget,
            spent: total.map_or(UsdAmount::ZERO, |t| t.spent),
            calls: total.map_or(0, |t| t.calls),
            key,
        }
    }

    /// One page of the caller's tasks; `params` are the decoded query parameters.
    pub async fn list_tasks<'a>(
        &self,
        who: &Principal,
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<TaskPage, ServiceError> {
        let query = validation::task_list_query(params)?;
        let (tasks, total) = self.ports.tasks.list_tasks(&who.user_id, query.filter, query.page).await?;
        Ok(TaskPage { tasks, query, total })
    }

    /// One of the caller's tasks; another user's task is `NotFound`, like a missing one.
    pub async fn task(&self, who: &Principal, id: &str) -> Result<Task, ServiceError> {
        let id = TaskId(id.to_owned());
        self.ports.tasks.task(&who.user_id, &id).await?.ok_or_else(|| ServiceError::NotFound(format!("task {id}")))
    }

    /// Any user's task `id` with what it recorded of its upstream side (the endpoint that served
    /// it and the attempts made), for operators (`gateway admin task show`).
    pub async fn task_for_operator(&self, id: &str) -> Result<(Task, domain::ports::UpstreamRecord), ServiceError> {
        let id = TaskId(id.to_owned());
        let missing = || ServiceError::NotFound(format!("task {id}"));
        let record = self.ports.tasks.upstream_record(&id).await?.ok_or_else(missing)?;
        let task = self.ports.tasks.task(&record.owner, &id).await?.ok_or_else(missing)?;
        Ok((task, record))
    }
}
