//! The `billing::Ledger` port on the database: every balance movement is one transaction made of
//! a conditional update of the balance and an appended ledger entry.

use async_trait::async_trait;
use billing::{CallBook, Ledger, LedgerError, Reservation, Settlement};
use domain::ports::TaskOutcome;
use domain::{BillingStatus, LedgerEntry, LedgerKind, Task, TaskId, Timestamp, UsdAmount, UserId};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseTransaction, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, TransactionTrait,
};

use crate::entities::{ledger_entries, reservations, users};
use crate::tasks::{finish_task_on, row_from_task};
use crate::writer::{End, Hold};
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
    /// Holds `amount` for `task` and, when given, stores `record` (the task itself), in one
    /// transaction whose first step is the conditional debit.
    async fn hold(
        &self,
        user: &UserId,
        task: &TaskId,
        amount: UsdAmount,
        record: Option<Task>,
    ) -> Result<Reservation, LedgerError> {
        if amount.is_negative() {
            return Err(LedgerError::InvalidAmount("a reservation cannot be negative".into()));
        }
        let now = self.now();
        if let Some(writer) = &self.writer {
            let hold = Hold { user: user.clone(), task: task.clone(), amount, record, now };
            return writer.hold(hold).await;
        }
        let _guard = self.write_guard().await;
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
        let duplicate = |e: DbErr| {
            if is_unique_violation(&e) { LedgerError::DuplicateReservation(task.clone()) } else { db_err(e) }
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
        .map_err(duplicate)?;
        let movement = Movement {
            user: user.as_str(),
            task: Some(task.as_str()),
            kind: LedgerKind::Reserve,
            amount: -amount.micros(),
            balance_after: debited.balance_micros,
            description: format!("hold of {amount}"),
            now,
        };
        append(&txn, movement).await?;
        if let Some(record) = record {
            row_from_task(record).insert(&txn).await.map_err(duplicate)?;
        }
        txn.commit().await.map_err(db_err)?;
        Ok(Reservation {
            task_id: task.clone(),
            user_id: user.clone(),
            amount,
            balance_after: UsdAmount::from_micros(debited.balance_micros),
        })
    }

    /// Ends the hold of `task` (by `user`, for `reserved`) exactly once: charges `charge`, or
    /// refunds when `None`, and moves the task to `outcome` when given, in one transaction.
    ///
    /// The balance is updated first and the reservation claimed second, conditional on it still
    /// being `reserved` with this user and amount; if the claim fails the transaction rolls back,
    /// so nothing moves. Lock order (user row, then reservation) is the same as in `hold`.
    async fn end(
        &self,
        task: &TaskId,
        user: &UserId,
        reserved: UsdAmount,
        charge: Option<UsdAmount>,
        outcome: Option<TaskOutcome>,
    ) -> Result<Settlement, LedgerError> {
        if charge.is_some_and(UsdAmount::is_negative) {
            return Err(LedgerError::InvalidAmount("a charge cannot be negative".into()));
        }
        let status = if charge.is_some() { BillingStatus::Settled } else { BillingStatus::Refunded };
        let actual = charge.unwrap_or(UsdAmount::ZERO);
        let back = billing::settle_delta(reserved, actual)?;
        let now = self.now();
        if let Some(writer) = &self.writer {
            let end = End { task: task.clone(), user: user.clone(), reserved, charge, outcome, now };
            return writer.end(end).await;
        }
        let _guard = self.write_guard().await;
        let txn = self.db.begin().await.map_err(db_err)?;
        let balance_after = add_to_balance(&txn, user.as_str(), back.micros()).await?;
        let claimed = reservations::Entity::update_many()
            .col_expr(reservations::Column::Status, Expr::value(status.as_str()))
            .col_expr(reservations::Column::ActualMicros, Expr::value(actual.micros()))
            .col_expr(reservations::Column::BalanceAfterMicros, Expr::value(balance_after))
            .col_expr(reservations::Column::UpdatedAt, Expr::value(now))
            .filter(reservations::Column::TaskId.eq(task.as_str()))
            .filter(reservations::Column::Status.eq(BillingStatus::Reserved.as_str()))
            .filter(reservations::Column::UserId.eq(user.as_str()))
            .filter(reservations::Column::AmountMicros.eq(reserved.micros()))
            .exec(&txn)
            .await
            .map_err(db_err)?;
        if claimed.rows_affected != 1 {
            txn.rollback().await.map_err(db_err)?;
            let row = reservations::Entity::find_by_id(task.as_str()).one(&self.db).await.map_err(db_err)?;
            return Err(match row {
                None => LedgerError::UnknownReservation(task.clone()),
                Some(r) if r.status != BillingStatus::Reserved.as_str() => LedgerError::AlreadyFinished {
                    task: task.clone(),
                    status: r.status.parse().unwrap_or(BillingStatus::Settled),
                },
                Some(_) => LedgerError::InvalidAmount(format!("the reservation of {task} has another user or amount")),
            });
        }
        let (kind, description) = match status {
            BillingStatus::Refunded => (LedgerKind::Refund, format!("refund of {back}")),
            _ => (LedgerKind::Settle, format!("charged {actual} of {reserved} reserved")),
        };
        let movement = Movement {
            user: user.as_str(),
            task: Some(task.as_str()),
            kind,
            amount: back.micros(),
            balance_after,
            description,
            now,
        };
        append(&txn, movement).await?;
        // The money step is what must happen exactly once; a task already terminal is only logged,
        // but a database error aborts the transaction (PostgreSQL would not commit it anyway).
        if let Some(outcome) = outcome {
            match finish_task_on(&txn, task, outcome, now).await {
                Ok(()) => {}
                Err(domain::ports::StoreError::Conflict(why)) => {
                    tracing::warn!(%task, why, "task not moved while ending its reservation");
                }
                Err(e) => return Err(LedgerError::Backend(e.to_string())),
            }
        }
        txn.commit().await.map_err(db_err)?;
        Ok(Settlement {
            task_id: task.clone(),
            user_id: user.clone(),
            status,
            reserved,
            actual,
            balance_after: UsdAmount::from_micros(balance_after),
        })
    }

    /// Ends a reservation known only by its task: looks up its user and amount first.
    async fn end_by_task(&self, task: &TaskId, charge: Option<UsdAmount>) -> Result<Settlement, LedgerError> {
        let row = reservations::Entity::find_by_id(task.as_str())
            .one(&self.db)
            .await
            .map_err(db_err)?
            .ok_or_else(|| LedgerError::UnknownReservation(task.clone()))?;
        self.end(task, &UserId(row.user_id), UsdAmount::from_micros(row.amount_micros), charge, None).await
    }
}

#[async_trait]
impl CallBook for Store {
    async fn open_call(&self, task: Task, hold: UsdAmount) -> Result<Reservation, LedgerError> {
        let (user, id) = (task.user_id.clone(), task.id.clone());
        self.hold(&user, &id, hold, Some(task)).await
    }

    async fn close_call(
        &self,
        task: &TaskId,
        user: &UserId,
        reserved: UsdAmount,
        charge: Option<UsdAmount>,
        outcome: TaskOutcome,
    ) -> Result<Settlement, LedgerError> {
        self.end(task, user, reserved, charge, Some(outcome)).await
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
        let _guard = self.write_guard().await;
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
        self.hold(user, task, amount, None).await
    }

    async fn settle(&self, task: &TaskId, actual: UsdAmount) -> Result<Settlement, LedgerError> {
        self.end_by_task(task, Some(actual)).await
    }

    async fn refund(&self, task: &TaskId) -> Result<Settlement, LedgerError> {
        self.end_by_task(task, None).await
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
