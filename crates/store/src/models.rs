//! `ModelStore`: the catalog as operators configure it, immutable price versions, and switches.

use std::collections::BTreeMap;

use async_trait::async_trait;
use domain::ports::{BadValue, ModelStore, StoreError};
use domain::{ModelAlias, ModelRecord, ModelSeed, PriceSheet, PricingVersion, Rate, Timestamp};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseTransaction, EntityTrait, QueryFilter, QueryOrder,
    TransactionTrait,
};
use serde_json::{Value, json};

use crate::entities::{model_aliases, models, pricing_versions, settings};
use crate::{Store, backend_err, is_unique_violation};

const MAINTENANCE: &str = "maintenance";

/// The stored form of a price sheet (this crate's own; the wire form belongs to `api`).
fn sheet_to_text(sheet: &PriceSheet) -> String {
    let map: serde_json::Map<String, Value> = sheet
        .rates
        .iter()
        .map(|(k, r)| {
            (k.clone(), json!({"amount_microusd": r.amount_microusd, "denominator": r.denominator, "unit": r.unit}))
        })
        .collect();
    Value::Object(map).to_string()
}

fn sheet_from_text(text: &str) -> Result<PriceSheet, StoreError> {
    let bad = |what: &str| StoreError::corrupt("price sheet", BadValue(format!("no valid {what}")));
    let value: Value = serde_json::from_str(text).map_err(|e| StoreError::corrupt("price sheet", e))?;
    let object = value.as_object().ok_or_else(|| bad("object"))?;
    let mut rates = BTreeMap::new();
    for (name, rate) in object {
        let int = |k: &str| rate.get(k).and_then(Value::as_i64).ok_or_else(|| bad(k));
        let unit = rate.get("unit").and_then(Value::as_str).ok_or_else(|| bad("unit"))?;
        rates.insert(
            name.clone(),
            Rate { amount_microusd: int("amount_microusd")?, denominator: int("denominator")?, unit: unit.to_owned() },
        );
    }
    Ok(PriceSheet { rates })
}

fn version_from_row(row: pricing_versions::Model) -> Result<PricingVersion, StoreError> {
    Ok(PricingVersion {
        sheet: sheet_from_text(&row.rates)?,
        model: row.model,
        version: row.version,
        created_at: Timestamp(row.created_at),
    })
}

fn record_from_row(row: models::Model, pricing: Option<PricingVersion>) -> Result<ModelRecord, StoreError> {
    Ok(ModelRecord {
        kind: row.kind.parse().map_err(|e| StoreError::corrupt(format!("kind of model {}", row.name), e))?,
        name: row.name,
        enabled: row.enabled,
        concurrency_limit: row.concurrency_limit,
        definition: row.definition,
        pricing,
    })
}

fn check_limit(limit: i64) -> Result<(), StoreError> {
    if (1..=100_000).contains(&limit) {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!("concurrency limit {limit} is outside 1..100000")))
    }
}

/// Appends the next price version of `model` and makes it active.
async fn add_version(
    txn: &DatabaseTransaction,
    model: &str,
    sheet: &PriceSheet,
    now: i64,
) -> Result<PricingVersion, StoreError> {
    let last = pricing_versions::Entity::find()
        .filter(pricing_versions::Column::Model.eq(model))
        .order_by_desc(pricing_versions::Column::Version)
        .one(txn)
        .await
        .map_err(backend_err)?;
    let version = last.map_or(1, |v| v.version + 1);
    let row = pricing_versions::ActiveModel {
        model: Set(model.to_owned()),
        version: Set(version),
        rates: Set(sheet_to_text(sheet)),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(txn)
    .await
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::Conflict(format!("another price change for {model} happened at the same time"))
        } else {
            backend_err(e)
        }
    })?;
    models::Entity::update_many()
        .col_expr(models::Column::ActivePricingVersion, Expr::value(version))
        .col_expr(models::Column::UpdatedAt, Expr::value(now))
        .filter(models::Column::Name.eq(model))
        .exec(txn)
        .await
        .map_err(backend_err)?;
    version_from_row(row)
}

impl Store {
    async fn model_record(&self, name: &str) -> Result<ModelRecord, StoreError> {
        self.models()
            .await?
            .into_iter()
            .find(|m| m.name == name)
            .ok_or_else(|| StoreError::NotFound(format!("model {name}")))
    }
}

#[async_trait]
impl ModelStore for Store {
    async fn seed_models(&self, seeds: Vec<ModelSeed>) -> Result<u64, StoreError> {
        let now = self.now();
        let mut added = 0;
        for seed in seeds {
            check_limit(seed.concurrency_limit)?;
            let txn = self.db.writes().begin().await.map_err(backend_err)?;
            let inserted = models::Entity::insert(models::ActiveModel {
                name: Set(seed.name.clone()),
                kind: Set(seed.kind.as_str().to_owned()),
                enabled: Set(seed.enabled),
                concurrency_limit: Set(seed.concurrency_limit),
                definition: Set(seed.definition.clone()),
                active_pricing_version: Set(None),
                created_at: Set(now),
                updated_at: Set(now),
            })
            .on_conflict(OnConflict::column(models::Column::Name).do_nothing().to_owned())
            .exec_without_returning(&txn)
            .await
            .map_err(backend_err)?;
            if inserted == 0 {
                // Known model: its definition (limits, capabilities, upstream profile) is the
                // binary's catalog and follows it; switches and prices are the operator's and stay.
                models::Entity::update_many()
                    .col_expr(models::Column::Definition, Expr::value(seed.definition.clone()))
                    .filter(models::Column::Name.eq(seed.name.as_str()))
                    .filter(models::Column::Definition.ne(seed.definition.as_str()))
                    .exec(&txn)
                    .await
                    .map_err(backend_err)?;
                txn.commit().await.map_err(backend_err)?;
                continue;
            }
            if let Some(sheet) = &seed.sheet {
                sheet.validate().map_err(|e| StoreError::Invalid(format!("model {}: {e}", seed.name)))?;
                add_version(&txn, &seed.name, sheet, now).await?;
            }
            txn.commit().await.map_err(backend_err)?;
            added += 1;
        }
        Ok(added)
    }

    async fn pricing_version(&self, name: &str, version: i64) -> Result<Option<PricingVersion>, StoreError> {
        let row = pricing_versions::Entity::find()
            .filter(pricing_versions::Column::Model.eq(name))
            .filter(pricing_versions::Column::Version.eq(version))
            .one(self.db.reads())
            .await
            .map_err(backend_err)?;
        row.map(version_from_row).transpose()
    }

    async fn models(&self) -> Result<Vec<ModelRecord>, StoreError> {
        let rows = models::Entity::find()
            .order_by_asc(models::Column::Name)
            .all(self.db.reads())
            .await
            .map_err(backend_err)?;
        let versions = pricing_versions::Entity::find().all(self.db.reads()).await.map_err(backend_err)?;
        let mut active: BTreeMap<String, pricing_versions::Model> = BTreeMap::new();
        for v in versions {
            if rows.iter().any(|m| m.name == v.model && m.active_pricing_version == Some(v.version)) {
                active.insert(v.model.clone(), v);
            }
        }
        rows.into_iter()
            .map(|row| {
                let pricing = active.remove(&row.name).map(version_from_row).transpose()?;
                record_from_row(row, pricing)
            })
            .collect()
    }

    async fn set_model(
        &self,
        name: &str,
        enabled: Option<bool>,
        concurrency_limit: Option<i64>,
    ) -> Result<ModelRecord, StoreError> {
        let mut update = models::Entity::update_many()
            .col_expr(models::Column::UpdatedAt, Expr::value(self.now()))
            .filter(models::Column::Name.eq(name));
        if let Some(on) = enabled {
            update = update.col_expr(models::Column::Enabled, Expr::value(on));
        }
        if let Some(limit) = concurrency_limit {
            check_limit(limit)?;
            update = update.col_expr(models::Column::ConcurrencyLimit, Expr::value(limit));
        }
        let done = update.exec(self.db.writes()).await.map_err(backend_err)?;
        if done.rows_affected == 0 {
            return Err(StoreError::NotFound(format!("model {name}")));
        }
        self.model_record(name).await
    }

    async fn set_price(&self, name: &str, sheet: PriceSheet) -> Result<PricingVersion, StoreError> {
        sheet.validate().map_err(|e| StoreError::Invalid(e.to_string()))?;
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        if models::Entity::find_by_id(name).one(&txn).await.map_err(backend_err)?.is_none() {
            return Err(StoreError::NotFound(format!("model {name}")));
        }
        let version = add_version(&txn, name, &sheet, self.now()).await?;
        txn.commit().await.map_err(backend_err)?;
        Ok(version)
    }

    async fn maintenance(&self) -> Result<bool, StoreError> {
        let row = settings::Entity::find_by_id(MAINTENANCE).one(self.db.reads()).await.map_err(backend_err)?;
        Ok(row.is_some_and(|r| r.value == "on"))
    }

    async fn set_maintenance(&self, on: bool) -> Result<(), StoreError> {
        settings::Entity::insert(settings::ActiveModel {
            name: Set(MAINTENANCE.to_owned()),
            value: Set(if on { "on" } else { "off" }.to_owned()),
        })
        .on_conflict(OnConflict::column(settings::Column::Name).update_column(settings::Column::Value).to_owned())
        .exec_without_returning(self.db.writes())
        .await
        .map_err(backend_err)?;
        Ok(())
    }

    async fn aliases(&self) -> Result<Vec<ModelAlias>, StoreError> {
        let rows = model_aliases::Entity::find()
            .order_by_asc(model_aliases::Column::Name)
            .all(self.db.reads())
            .await
            .map_err(backend_err)?;
        Ok(rows
            .into_iter()
            .map(|r| ModelAlias { name: r.name, models: r.models.split(',').map(str::to_owned).collect() })
            .collect())
    }

    async fn set_alias(&self, alias: &ModelAlias) -> Result<(), StoreError> {
        model_aliases::Entity::insert(model_aliases::ActiveModel {
            name: Set(alias.name.clone()),
            models: Set(alias.models.join(",")),
            updated_at: Set(self.now()),
        })
        .on_conflict(
            OnConflict::column(model_aliases::Column::Name)
                .update_columns([model_aliases::Column::Models, model_aliases::Column::UpdatedAt])
                .to_owned(),
        )
        .exec_without_returning(self.db.writes())
        .await
        .map_err(backend_err)?;
        Ok(())
    }

    async fn delete_alias(&self, name: &str) -> Result<bool, StoreError> {
        let gone = model_aliases::Entity::delete_by_id(name).exec(self.db.writes()).await.map_err(backend_err)?;
        Ok(gone.rows_affected > 0)
    }
}

impl Store {
    /// The process-wide secret called `name`, shared by every replica of this database: the first
    /// caller's `candidate` is kept (insert if absent), and every later caller gets that one.
    pub async fn shared_secret(&self, name: &str, candidate: &str) -> Result<String, StoreError> {
        let setting = format!("secret:{name}");
        settings::Entity::insert(settings::ActiveModel {
            name: Set(setting.clone()),
            value: Set(candidate.to_owned()),
        })
        .on_conflict(OnConflict::column(settings::Column::Name).do_nothing().to_owned())
        .exec_without_returning(self.db.writes())
        .await
        .map_err(backend_err)?;
        let row = settings::Entity::find_by_id(setting).one(self.db.reads()).await.map_err(backend_err)?;
        row.map(|r| r.value).ok_or_else(|| StoreError::Backend(format!("the secret {name} vanished")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sheet_text_round_trips() {
        let mut sheet = PriceSheet::default();
        sheet.rates.insert(
            "input_tokens".into(),
            Rate { amount_microusd: 140_000, denominator: 1_000_000, unit: "token".into() },
        );
        assert_eq!(sheet_from_text(&sheet_to_text(&sheet)), Ok(sheet));
        assert!(sheet_from_text("[]").is_err());
    }
}
