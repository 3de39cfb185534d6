//! The `billing::Ledger` port on the database: every balance movement is one transaction made of
//! a conditional update of the balance and an appended ledger entry.

use async_trait::async_trait;
use billing::{Ledger, LedgerError, Reservation, Settlement};
use domain::{BillingStatus, LedgerEntry, LedgerKind, TaskId, Timestamp, UsdAmount, UserId};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseTransaction, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, TransactionTrait,
};

use crate::entities::{ledger_entries, reservations, users};
use crate::{Store, is_unique_violation};

fn db_err(e: DbErr) -> LedgerError {
    LedgerError::Backend(e.to_string())
}

fn entry_from_row(row: ledger_entries::Model) -> Result<LedgerEntry, LedgerError> {
    Ok(LedgerEntry {
        id: row.id,
        user_id: UserId(row.user_id),
        task_id: row.task_id.map(TaskId),
        kind: row.kind.parse().map_err(|e| LedgerError::Backend(format!("ledger entry {}: {e}", row.id)))?,
        amount: UsdAmount::from_micros(row.amount_micros),
        balance_after: UsdAmount::from_micros(row.balance_after_micros),
        description: row.description,
        created_at: Timestamp(row.created_at),
    })
}

/// One ledger movement to append inside a transaction.
struct Movement<'a> {
    user: &'a str,
    task: Option<&'a str>,
    kind: LedgerKind,
    amount: i64,
    balance_after: i64,
    description: String,
    now: i64,
}

async fn append(txn: &DatabaseTransaction, m: Movement<'_>) -> Result<LedgerEntry, LedgerError> {
    let row = ledger_entries::ActiveModel {
        user_id: Set(m.user.to_owned()),
        task_id: Set(m.task.map(str::to_owned)),
        kind: Set(m.kind.as_str().to_owned()),
        amount_micros: Set(m.amount),
        balance_after_micros: Set(m.balance_after),
        description: Set(m.description),
        created_at: Set(m.now),
        ..Default::default()
    }
    .insert(txn)
    .await
    .map_err(db_err)?;
    entry_from_row(row)
}

/// Adds `delta` (any sign) to the balance unconditionally; returns the new balance.
async fn add_to_balance(txn: &DatabaseTransaction, user: &str, delta: i64) -> Result<i64, LedgerError> {
    let rows = users::Entity::update_many()
        .col_expr(users::Column::BalanceMicros, Expr::col(users::Column::BalanceMicros).add(delta))
        .filter(users::Column::Id.eq(user))
        .exec_with_returning(txn)
        .await
        .map_err(db_err)?;
    rows.first().map(|u| u.balance_micros).ok_or_else(|| LedgerError::UnknownUser(UserId(user.to_owned())))
}

impl Store {
    /// Ends a reservation exactly once: `reserved` → `status`, charging `actual`.
    async fn finish(
        &self,
        task: &TaskId,
        status: BillingStatus,
        actual: Option<UsdAmount>,
    ) -> Result<Settlement, LedgerError> {
        if actual.is_some_and(UsdAmount::is_negative) {
            return Err(LedgerError::InvalidAmount("a charge cannot be negative".into()));
        }
        let now = self.now();
        let txn = self.db.begin().await.map_err(db_err)?;
        let claimed = reservations::Entity::update_many()
            .col_expr(reservations::Column::Status, Expr::value(status.as_str()))
            .col_expr(reservations::Column::UpdatedAt, Expr::value(now))
            .filter(reservations::Column::TaskId.eq(task.as_str()))
            .filter(reservations::Column::Status.eq(BillingStatus::Reserved.as_str()))
            .exec_with_returning(&txn)
            .await
            .map_err(db_err)?;
        let Some(held) = claimed.into_iter().next() else {
            let row = reservations::Entity::find_by_id(task.as_str()).one(&txn).await.map_err(db_err)?;
            return Err(match row {
                None => LedgerError::UnknownReservation(task.clone()),
                Some(r) => LedgerError::AlreadyFinished {
                    task: task.clone(),
                    status: r.status.parse().unwrap_or(BillingStatus::Settled),
                },
            });
        };
        let actual = actual.unwrap_or(UsdAmount::ZERO);
        let back = held.amount_micros.checked_sub(actual.micros()).ok_or(LedgerError::Overflow)?;
        let balance_after = add_to_balance(&txn, &held.user_id, back).await?;
        reservations::Entity::update_many()
            .col_expr(reservations::Column::ActualMicros, Expr::value(actual.micros()))
            .col_expr(reservations::Column::BalanceAfterMicros, Expr::value(balance_after))
            .filter(reservations::Column::TaskId.eq(task.as_str()))
            .exec(&txn)
            .await
            .map_err(db_err)?;
        let (kind, description) = match status {
            BillingStatus::Refunded => (LedgerKind::Refund, format!("refund of {}", UsdAmount::from_micros(back))),
            _ => (
                LedgerKind::Settle,
                format!("charged {actual} of {} reserved", UsdAmount::from_micros(held.amount_micros)),
            ),
        };
        append(
            &txn,
            Movement {
                user: &held.user_id,
                task: Some(task.as_str()),
                kind,
                amount: back,
                balance_after,
                description,
                now,
            },
        )
        .await?;
        txn.commit().await.map_err(db_err)?;
        Ok(Settlement {
            task_id: task.clone(),
            user_id: UserId(held.user_id),
            status,
            reserved: UsdAmount::from_micros(held.amount_micros),
            actual,
            balance_after: UsdAmount::from_micros(balance_after),
        })
    }
}

#[async_trait]
impl Ledger for Store {
    async fn credit(
        &self,
        user: &UserId,
        amount: UsdAmount,
        kind: LedgerKind,
        note: &str,
    ) -> Result<LedgerEntry, LedgerError> {
        billing::check_credit(kind, amount)?;
        let now = self.now();
        let txn = self.db.begin().await.map_err(db_err)?;
        let balance_after = add_to_balance(&txn, user.as_str(), amount.micros()).await?;
        let description = if note.is_empty() { kind.as_str().to_owned() } else { note.to_owned() };
        let entry = append(
            &txn,
            Movement {
                user: user.as_str(),
                task: None,
                kind,
                amount: amount.micros(),
                balance_after,
                description,
                now,
            },
        )
        .await?;
        txn.commit().await.map_err(db_err)?;
        Ok(entry)
    }

    async fn reserve(&self, user: &UserId, task: &TaskId, amount: UsdAmount) -> Result<Reservation, LedgerError> {
        if amount.is_negative() {
            return Err(LedgerError::InvalidAmount("a reservation cannot be negative".into()));
        }
        let now = self.now();
        let txn = self.db.begin().await.map_err(db_err)?;
        // The one conditional update that makes overdraft impossible under any concurrency.
        let debited = users::Entity::update_many()
            .col_expr(users::Column::BalanceMicros, Expr::col(users::Column::BalanceMicros).sub(amount.micros()))
            .filter(users::Column::Id.eq(user.as_str()))
            .filter(users::Column::BalanceMicros.gte(amount.micros()))
            .exec_with_returning(&txn)
            .await
            .map_err(db_err)?;
        let Some(debited) = debited.into_iter().next() else {
            let row = users::Entity::find_by_id(user.as_str()).one(&txn).await.map_err(db_err)?;
            return Err(match row {
                None => LedgerError::UnknownUser(user.clone()),
                Some(u) => LedgerError::InsufficientBalance {
                    needed: amount,
                    available: UsdAmount::from_micros(u.balance_micros),
                },
            });
        };
        reservations::ActiveModel {
            task_id: Set(task.0.clone()),
            user_id: Set(user.0.clone()),
            amount_micros: Set(amount.micros()),
            status: Set(BillingStatus::Reserved.as_str().to_owned()),
            actual_micros: Set(None),
            balance_after_micros: Set(debited.balance_micros),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) { LedgerError::DuplicateReservation(task.clone()) } else { db_err(e) }
        })?;
        append(
            &txn,
            Movement {
                user: user.as_str(),
                task: Some(task.as_str()),
                kind: LedgerKind::Reserve,
                amount: -amount.micros(),
                balance_after: debited.balance_micros,
                description: format!("hold of {amount}"),
                now,
            },
        )
        .await?;
        txn.commit().await.map_err(db_err)?;
        Ok(Reservation {
            task_id: task.clone(),
            user_id: user.clone(),
            amount,
            balance_after: UsdAmount::from_micros(debited.balance_micros),
        })
    }

    async fn settle(&self, task: &TaskId, actual: UsdAmount) -> Result<Settlement, LedgerError> {
        self.finish(task, BillingStatus::Settled, Some(actual)).await
    }

    async fn refund(&self, task: &TaskId) -> Result<Settlement, LedgerError> {
        self.finish(task, BillingStatus::Refunded, None).await
    }

    async fn balance(&self, user: &UserId) -> Result<UsdAmount, LedgerError> {
        let row = users::Entity::find_by_id(user.as_str()).one(&self.db).await.map_err(db_err)?;
        row.map(|u| UsdAmount::from_micros(u.balance_micros)).ok_or_else(|| LedgerError::UnknownUser(user.clone()))
    }

    async fn entries(&self, user: &UserId, limit: u64) -> Result<Vec<LedgerEntry>, LedgerError> {
        ledger_entries::Entity::find()
            .filter(ledger_entries::Column::UserId.eq(user.as_str()))
            .order_by_desc(ledger_entries::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await
            .map_err(db_err)?
            .into_iter()
            .map(entry_from_row)
            .collect()
    }
}
