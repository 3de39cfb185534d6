//! Monthly statements, the gateway's revenue and the CSV exports' pages. A statement is folded and
//! checked by `domain::statement` (its rule: opening + credits − charges − held change = closing);
//! a statement whose figures break the rule is never served (500, logged). An export hands out its
//! rows a page at a time, each page read after the last row of the one before, so whoever writes
//! it holds one page at most.

use std::sync::Arc;

use domain::ports::StatementStore;
use domain::{EndedCall, Keyset, LedgerEntry, Revenue, Statement, UserId, UtcMonth};
use validation::DayRange;

use crate::{Gateway, Principal, ServiceError};

/// Rows an export reads from the database at a time.
pub const EXPORT_PAGE_ROWS: u64 = 1000;

/// A user's statement of one UTC month.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonthStatement {
    /// Whose.
    pub user: UserId,
    /// The month.
    pub month: UtcMonth,
    /// Whether the month has ended (a month in progress changes until it does).
    pub complete: bool,
    /// The figures.
    pub statement: Statement,
}

/// The gateway's revenue of one UTC month.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonthRevenue {
    /// The month.
    pub month: UtcMonth,
    /// Whether the month has ended.
    pub complete: bool,
    /// The figures.
    pub revenue: Revenue,
}

/// Where an export stands: its range and the last row it handed out.
struct Pages {
    store: Arc<dyn StatementStore>,
    user: UserId,
    range: DayRange,
    after: Keyset,
    done: bool,
}

impl Pages {
    fn new(store: Arc<dyn StatementStore>, user: UserId, range: DayRange) -> Pages {
        Pages { store, user, range, after: Keyset::start(range.start_ms()), done: false }
    }

    /// Marks the export done after a page of `rows` rows, which ended at `last`.
    fn advance(&mut self, rows: usize, last: Option<Keyset>) {
        self.done = u64::try_from(rows).unwrap_or(u64::MAX) < EXPORT_PAGE_ROWS;
        if let Some(last) = last {
            self.after = last;
        }
    }
}

/// The caller's ledger entries of a range of days, in time order, a page at a time.
pub struct LedgerExport(Pages);

impl LedgerExport {
    /// The days it covers.
    pub fn range(&self) -> DayRange {
        self.0.range
    }

    /// The next page of entries; `None` once every entry of the range was handed out.
    pub async fn next_page(&mut self) -> Result<Option<Vec<LedgerEntry>>, ServiceError> {
        let p = &mut self.0;
        if p.done {
            return Ok(None);
        }
        let (from, to) = (p.range.start_ms(), p.range.end_ms());
        let rows = p.store.ledger_rows(&p.user, from, to, p.after, EXPORT_PAGE_ROWS).await?;
        p.advance(rows.len(), rows.last().map(|e| Keyset { at: e.created_at.millis(), id: e.id }));
        Ok((!rows.is_empty()).then_some(rows))
    }
}

/// The caller's calls whose hold ended in a range of days, in the order they ended, a page at a
/// time.
pub struct UsageExport(Pages);

impl UsageExport {
    /// The days it covers.
    pub fn range(&self) -> DayRange {
        self.0.range
    }

    /// The next page of calls; `None` once every call of the range was handed out.
    pub async fn next_page(&mut self) -> Result<Option<Vec<EndedCall>>, ServiceError> {
        let p = &mut self.0;
        if p.done {
            return Ok(None);
        }
        let (from, to) = (p.range.start_ms(), p.range.end_ms());
        let rows = p.store.ended_calls(&p.user, from, to, p.after, EXPORT_PAGE_ROWS).await?;
        p.advance(rows.len(), rows.last().map(EndedCall::keyset));
        Ok((!rows.is_empty()).then_some(rows))
    }
}

impl Gateway {
    /// The caller's statement of `month` (`YYYY-MM`, UTC; not one that has not begun).
    pub async fn statement(&self, who: &Principal, month: &str) -> Result<MonthStatement, ServiceError> {
        self.statement_of_month(&who.user_id, month).await
    }

    /// Any user's statement of `month`, for operators (`gateway admin statement`); an unknown user
    /// is `NotFound`.
    pub async fn statement_for(&self, user: &UserId, month: &str) -> Result<MonthStatement, ServiceError> {
        if self.ports.accounts.user(user).await?.is_none() {
            return Err(ServiceError::NotFound(format!("user {user}")));
        }
        self.statement_of_month(user, month).await
    }

    async fn statement_of_month(&self, user: &UserId, month: &str) -> Result<MonthStatement, ServiceError> {
        let now = self.ports.clock.now();
        let month = validation::statement_month(month, now)?;
        let (from, to) = (month.start().millis(), month.end().millis());
        let figures = self.ports.statements.statement_figures(user, from, to).await?;
        let statement = Statement::from_figures(&figures).inspect_err(|e| {
            tracing::error!(user = %user, month = %month, error = %e, "a statement does not reconcile");
        })?;
        Ok(MonthStatement { user: user.clone(), month, complete: to <= now.millis(), statement })
    }

    /// The whole gateway's revenue of the query's `month` (default: the month in progress), for
    /// operators.
    pub async fn revenue<'a>(
        &self,
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<MonthRevenue, ServiceError> {
        let now = self.ports.clock.now();
        let month = validation::revenue_query(params, now)?;
        let (from, to) = (month.start().millis(), month.end().millis());
        let revenue = Revenue::from_figures(&self.ports.statements.revenue_figures(from, to).await?)?;
        Ok(MonthRevenue { month, complete: to <= now.millis(), revenue })
    }

    /// The caller's ledger export over the query's `from` and `to` (checked before anything is read).
    pub fn ledger_export<'a>(
        &self,
        who: &Principal,
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<LedgerExport, ServiceError> {
        let range = validation::export_range(params, domain::UtcDay::of(self.ports.clock.now()))?;
        Ok(LedgerExport(Pages::new(Arc::clone(&self.ports.statements), who.user_id.clone(), range)))
    }

    /// The caller's usage export over the query's `from` and `to` (checked before anything is read).
    pub fn usage_export<'a>(
        &self,
        who: &Principal,
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<UsageExport, ServiceError> {
        let range = validation::export_range(params, domain::UtcDay::of(self.ports.clock.now()))?;
        Ok(UsageExport(Pages::new(Arc::clone(&self.ports.statements), who.user_id.clone(), range)))
    }
}
