//! The `billing::Ledger` and `billing::CallBook` ports on the database: every movement of money
//! (and every task state change) is an operation queued to the batched writer (`writer.rs`);
//! reads go through SeaORM.

use async_trait::async_trait;
use billing::book::{BookAnswer, BookOp};
use billing::{CallBook, Expect, Ledger, LedgerError, Reservation, Settlement};
use domain::{
    BillingStatus, LedgerEntry, LedgerKind, Task, TaskId, TaskStatus, TaskTransition, Timestamp, UsdAmount, UserId,
};
use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use crate::Store;
use crate::entities::{ledger_entries, reservations, tasks, users};

fn db_err(e: DbErr) -> LedgerError {
    LedgerError::Backend(e.to_string())
}

pub(crate) fn entry_from_row(row: ledger_entries::Model) -> Result<LedgerEntry, LedgerError> {
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

fn unexpected(answer: BookAnswer) -> LedgerError {
    LedgerError::Backend(format!("unexpected ledger answer {answer:?}"))
}

impl Store {
    /// Queues `op` on the writer and waits until its batch committed.
    pub(crate) async fn book(&self, op: BookOp) -> Result<BookAnswer, LedgerError> {
        self.writer.submit(op, self.clock.now()).await
    }

    async fn hold(&self, op: BookOp) -> Result<Reservation, LedgerError> {
        match self.book(op).await? {
            BookAnswer::Held(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    async fn end(&self, op: BookOp) -> Result<Settlement, LedgerError> {
        match self.book(op).await? {
            BookAnswer::Ended(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// Where the reservation of `task` stands, if it has one.
    pub async fn reservation_status(&self, task: &TaskId) -> Result<Option<BillingStatus>, LedgerError> {
        let row = reservations::Entity::find_by_id(task.as_str()).one(self.db.reads()).await.map_err(db_err)?;
        row.map(|r| r.status.parse().map_err(|e| LedgerError::Backend(format!("reservation of {task}: {e}"))))
            .transpose()
    }

    /// The state of `task`, whoever owns it, if it exists.
    pub async fn task_status(&self, task: &TaskId) -> Result<Option<TaskStatus>, LedgerError> {
        let row = tasks::Entity::find_by_id(task.as_str()).one(self.db.reads()).await.map_err(db_err)?;
        row.map(|t| t.status.parse().map_err(|e| LedgerError::Backend(format!("task {task}: {e}")))).transpose()
    }
}

#[async_trait]
impl CallBook for Store {
    async fn open_call(&self, task: Task, hold: UsdAmount) -> Result<Reservation, LedgerError> {
        let (user, id) = (task.user_id.clone(), task.id.clone());
        self.hold(BookOp::Hold { user, task: id, amount: hold, record: Some(Box::new(task)) }).await
    }

    async fn close_task(
        &self,
        task: &TaskId,
        held: &Expect,
        charge: Option<UsdAmount>,
        change: TaskTransition,
    ) -> Result<Settlement, LedgerError> {
        let expect = Some(held.clone());
        self.end(BookOp::End { task: task.clone(), expect, charge, then: Some(change) }).await
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
        match self.book(BookOp::Credit { user: user.clone(), amount, kind, note: note.to_owned() }).await? {
            BookAnswer::Credited(e) => Ok(e),
            other => Err(unexpected(other)),
        }
    }

    async fn pay(&self, user: &UserId, payment: &str, amount: UsdAmount) -> Result<LedgerEntry, LedgerError> {
        match self.book(BookOp::Pay { user: user.clone(), payment: payment.to_owned(), amount }).await? {
            BookAnswer::Credited(e) => Ok(e),
            other => Err(unexpected(other)),
        }
    }

    async fn redeem(&self, user: &UserId, code_hash: &str) -> Result<LedgerEntry, LedgerError> {
        match self.book(BookOp::Redeem { user: user.clone(), code_hash: code_hash.to_owned() }).await? {
            BookAnswer::Credited(e) => Ok(e),
            other => Err(unexpected(other)),
        }
    }

    async fn reserve(&self, user: &UserId, task: &TaskId, amount: UsdAmount) -> Result<Reservation, LedgerError> {
        self.hold(BookOp::Hold { user: user.clone(), task: task.clone(), amount, record: None }).await
    }

    async fn settle(&self, task: &TaskId, actual: UsdAmount) -> Result<Settlement, LedgerError> {
        self.end(BookOp::End { task: task.clone(), expect: None, charge: Some(actual), then: None }).await
    }

    async fn refund(&self, task: &TaskId) -> Result<Settlement, LedgerError> {
        self.end(BookOp::End { task: task.clone(), expect: None, charge: None, then: None }).await
    }

    async fn balance(&self, user: &UserId) -> Result<UsdAmount, LedgerError> {
        let row = users::Entity::find_by_id(user.as_str()).one(self.db.reads()).await.map_err(db_err)?;
        row.map(|u| UsdAmount::from_micros(u.balance_micros)).ok_or_else(|| LedgerError::UnknownUser(user.clone()))
    }

    async fn entries(&self, user: &UserId, limit: u64) -> Result<Vec<LedgerEntry>, LedgerError> {
        if users::Entity::find_by_id(user.as_str()).one(self.db.reads()).await.map_err(db_err)?.is_none() {
            return Err(LedgerError::UnknownUser(user.clone()));
        }
        ledger_entries::Entity::find()
            .filter(ledger_entries::Column::UserId.eq(user.as_str()))
            .order_by_desc(ledger_entries::Column::Id)
            .limit(limit)
            .all(self.db.reads())
            .await
            .map_err(db_err)?
            .into_iter()
            .map(entry_from_row)
            .collect()
    }
}
