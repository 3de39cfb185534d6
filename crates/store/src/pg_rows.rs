//! The planned rows of a batch as the column arrays of `pg_book`'s write statement (`$1`–`$56`), the
//! row counts it must write (`$57`–`$62`), the charges added to each user's running total
//! (`$63`), the bounds within which each balance may be found (`$64`–`$65`), and the user and
//! amount each ending reservation must have (`$66`–`$67`), the owner of each task that moves
//! (`$68`), the budget key of new and ending reservations (`$69`–`$70`), the key of new tasks
//! (`$71`), the keys' budget counters (`$72`–`$80`, as read and as written) and their count (`$81`),
//! the upstream endpoint and attempts of new tasks (`$82`–`$83`) and of moving ones (`$84`–`$85`),
//! the cost cap and what was asked for of new tasks (`$86`–`$87`), and the model that served a
//! moving one and its price version (`$88`–`$89`).

use billing::book::{Plan, Relies};
use domain::{ApiKeyId, TaskId, UsdAmount};
use sea_orm::sqlx::Postgres;
use sea_orm::sqlx::postgres::PgArguments;
use sea_orm::sqlx::query::Query;

type PgQuery<'q> = Query<'q, Postgres, PgArguments>;

/// Binds every array of the write statement, in parameter order.
pub(crate) fn bind_all<'q>(query: PgQuery<'q>, plan: &Plan) -> PgQuery<'q> {
    let query = bind_money(query, plan);
    let query = bind_new_tasks(query, plan);
    let query = bind_moves(query, plan)
        .bind(plan.now().millis())
        .bind(plan.new_tasks.iter().map(|n| n.task.runner.as_deref()).collect::<Vec<_>>());
    let query = bind_counts(query, plan);
    let query = query.bind(plan.reads.iter().map(|r| micros(r.spent)).collect::<Vec<_>>());
    let query = bind_bounds(query, plan);
    let e = &plan.ended_holds;
    let query = query
        .bind(e.iter().map(|r| r.user.as_str()).collect::<Vec<_>>())
        .bind(e.iter().map(|r| micros(r.amount)).collect::<Vec<_>>())
        .bind(plan.task_writes.iter().map(|m| m.owner.as_str()).collect::<Vec<_>>())
        .bind(plan.new_holds.iter().map(|h| h.budget.to_column()).collect::<Vec<_>>())
        .bind(e.iter().map(|r| r.budget.to_column()).collect::<Vec<_>>())
        .bind(plan.new_tasks.iter().map(|n| n.task.key_id.as_ref().map(ApiKeyId::as_str)).collect::<Vec<_>>());
    let query = bind_budgets(query, plan);
    let attempts = |via: Option<&domain::ports::Via>| via.map(|v| i32::try_from(v.attempts).unwrap_or(i32::MAX));
    let (n, w) = (&plan.new_tasks, &plan.task_writes);
    query
        .bind(n.iter().map(|n| n.via.as_ref().map(|v| v.endpoint.as_str())).collect::<Vec<_>>())
        .bind(n.iter().map(|n| attempts(n.via.as_ref())).collect::<Vec<_>>())
        .bind(w.iter().map(|m| m.update.via.as_ref().map(|v| v.endpoint.as_str())).collect::<Vec<_>>())
        .bind(w.iter().map(|m| attempts(m.update.via.as_ref())).collect::<Vec<_>>())
        .bind(n.iter().map(|n| n.task.billing.max_cost.map(UsdAmount::micros)).collect::<Vec<_>>())
        .bind(n.iter().map(|n| n.task.requested.as_deref()).collect::<Vec<_>>())
        .bind(w.iter().map(|m| m.update.served_by.as_ref().map(|(model, _)| model.as_str())).collect::<Vec<_>>())
        .bind(w.iter().map(|m| m.update.served_by.as_ref().map(|(_, price)| price.to_string())).collect::<Vec<_>>())
}

/// `$72`–`$81`: every key budget the batch changes: its key, the limit and period and counters
/// read (the guard), the counters written, and how many there are.
fn bind_budgets<'q>(query: PgQuery<'q>, plan: &Plan) -> PgQuery<'q> {
    let k = &plan.budgets;
    query
        .bind(k.iter().map(|b| b.key.as_str()).collect::<Vec<_>>())
        .bind(k.iter().map(|b| b.from.budget.map(|x| x.limit.micros())).collect::<Vec<_>>())
        .bind(k.iter().map(|b| b.from.budget.map(|x| x.period.as_str())).collect::<Vec<_>>())
        .bind(k.iter().map(|b| b.from.spend.period_start.millis()).collect::<Vec<_>>())
        .bind(k.iter().map(|b| micros(b.from.spend.spent)).collect::<Vec<_>>())
        .bind(k.iter().map(|b| micros(b.from.spend.held)).collect::<Vec<_>>())
        .bind(k.iter().map(|b| b.to.spend.period_start.millis()).collect::<Vec<_>>())
        .bind(k.iter().map(|b| micros(b.to.spend.spent)).collect::<Vec<_>>())
        .bind(k.iter().map(|b| micros(b.to.spend.held)).collect::<Vec<_>>())
        .bind(i64::try_from(k.len()).unwrap_or(i64::MAX))
}

/// `$57`–`$62`: how many rows each part of the statement must write.
fn bind_counts<'q>(query: PgQuery<'q>, plan: &Plan) -> PgQuery<'q> {
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    query
        .bind(count(plan.reads.len()))
        .bind(count(plan.new_holds.len()))
        .bind(count(plan.ended_holds.len()))
        .bind(count(plan.entries.len()))
        .bind(count(plan.new_tasks.len()))
        .bind(count(plan.task_writes.len()))
}

fn micros(a: UsdAmount) -> i64 {
    a.micros()
}

/// `$64`–`$65`: the lowest and the highest balance (inclusive) each user of `$1` may have when the
/// statement writes it, for the batch's decisions to hold ([`Relies`]).
fn bind_bounds<'q>(query: PgQuery<'q>, plan: &Plan) -> PgQuery<'q> {
    let bounds: Vec<(i64, i64)> = plan
        .reads
        .iter()
        .map(|r| match r.relies {
            Relies::Nothing => (i64::MIN, i64::MAX),
            Relies::AtLeast(least) => (least.micros(), i64::MAX),
            Relies::Exactly => (r.from.micros(), r.from.micros()),
        })
        .collect();
    query.bind(bounds.iter().map(|b| b.0).collect::<Vec<_>>()).bind(bounds.iter().map(|b| b.1).collect::<Vec<_>>())
}

/// `$1`–`$19`: every balance the batch read (sorted by user, so two writers update shared users in
/// one order), new and ended reservations, ledger entries.
fn bind_money<'q>(query: PgQuery<'q>, plan: &Plan) -> PgQuery<'q> {
    let b = &plan.reads;
    let h = &plan.new_holds;
    let e = &plan.ended_holds;
    let l = &plan.entries;
    query
        .bind(b.iter().map(|r| r.user.as_str()).collect::<Vec<_>>())
        .bind(b.iter().map(|r| micros(r.from)).collect::<Vec<_>>())
        .bind(b.iter().map(|r| micros(r.to)).collect::<Vec<_>>())
        .bind(h.iter().map(|r| r.task.as_str()).collect::<Vec<_>>())
        .bind(h.iter().map(|r| r.user.as_str()).collect::<Vec<_>>())
        .bind(h.iter().map(|r| micros(r.amount)).collect::<Vec<_>>())
        .bind(h.iter().map(|r| r.status.as_str()).collect::<Vec<_>>())
        .bind(h.iter().map(|r| r.actual.map(micros)).collect::<Vec<_>>())
        .bind(h.iter().map(|r| micros(r.balance_after)).collect::<Vec<_>>())
        .bind(e.iter().map(|r| r.task.as_str()).collect::<Vec<_>>())
        .bind(e.iter().map(|r| r.status.as_str()).collect::<Vec<_>>())
        .bind(e.iter().map(|r| micros(r.actual)).collect::<Vec<_>>())
        .bind(e.iter().map(|r| micros(r.balance_after)).collect::<Vec<_>>())
        .bind(l.iter().map(|r| r.user.as_str()).collect::<Vec<_>>())
        .bind(l.iter().map(|r| r.task.as_ref().map(TaskId::as_str)).collect::<Vec<_>>())
        .bind(l.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>())
        .bind(l.iter().map(|r| micros(r.amount)).collect::<Vec<_>>())
        .bind(l.iter().map(|r| micros(r.balance_after)).collect::<Vec<_>>())
        .bind(l.iter().map(|r| r.description.as_str()).collect::<Vec<_>>())
}

/// `$20`–`$44`: the columns of new task rows.
fn bind_new_tasks<'q>(query: PgQuery<'q>, plan: &Plan) -> PgQuery<'q> {
    let t = &plan.new_tasks;
    let text = |f: fn(&domain::Task) -> Option<&str>| t.iter().map(|n| f(&n.task)).collect::<Vec<_>>();
    query
        .bind(t.iter().map(|n| n.task.id.as_str()).collect::<Vec<_>>())
        .bind(t.iter().map(|n| n.task.user_id.as_str()).collect::<Vec<_>>())
        .bind(t.iter().map(|n| n.task.model.as_str()).collect::<Vec<_>>())
        .bind(t.iter().map(|n| n.task.kind.as_str()).collect::<Vec<_>>())
        .bind(t.iter().map(|n| n.task.status.as_str()).collect::<Vec<_>>())
        .bind(text(|t| t.prompt.as_deref()))
        .bind(t.iter().map(|n| n.task.provider.as_str()).collect::<Vec<_>>())
        .bind(text(|t| t.input_mode.map(domain::InputMode::as_str)))
        .bind(text(|t| t.media_type.map(domain::MediaType::as_str)))
        .bind(t.iter().map(|n| crate::tasks::media_column(&n.task.media)).collect::<Vec<_>>())
        .bind(t.iter().map(|n| n.task.duration).collect::<Vec<_>>())
        .bind(text(|t| t.resolution.map(domain::Resolution::as_str)))
        .bind(text(|t| t.ratio.map(domain::Ratio::as_str)))
        .bind(t.iter().map(|n| n.task.generate_audio).collect::<Vec<_>>())
        .bind(t.iter().map(|n| n.task.billing.pricing_version_id.as_ref().map(ToString::to_string)).collect::<Vec<_>>())
        .bind(text(|t| t.billing.usage_json.as_deref()))
        .bind(text(|t| t.output_url.as_deref()))
        .bind(text(|t| t.last_frame_url.as_deref()))
        .bind(text(|t| t.error_code.as_deref()))
        .bind(text(|t| t.error_message.as_deref()))
        .bind(text(|t| t.webhook_url.as_deref()))
        .bind(t.iter().map(|n| n.task.created_at.millis()).collect::<Vec<_>>())
        .bind(t.iter().map(|n| n.task.updated_at.millis()).collect::<Vec<_>>())
        .bind(t.iter().map(|n| n.task.completed_at.map(|c| c.millis())).collect::<Vec<_>>())
        .bind(t.iter().map(|n| n.upstream_id.as_deref()).collect::<Vec<_>>())
}

/// `$45`–`$54`: task state changes.
fn bind_moves<'q>(query: PgQuery<'q>, plan: &Plan) -> PgQuery<'q> {
    let w = &plan.task_writes;
    let text = |f: fn(&domain::TaskUpdate) -> Option<&str>| w.iter().map(|m| f(&m.update)).collect::<Vec<_>>();
    query
        .bind(w.iter().map(|m| m.task.as_str()).collect::<Vec<_>>())
        .bind(w.iter().map(|m| m.from.as_str()).collect::<Vec<_>>())
        .bind(w.iter().map(|m| m.to.as_str()).collect::<Vec<_>>())
        .bind(w.iter().map(|m| m.to.is_terminal()).collect::<Vec<_>>())
        .bind(text(|u| u.upstream_id.as_deref()))
        .bind(text(|u| u.output_url.as_deref()))
        .bind(text(|u| u.last_frame_url.as_deref()))
        .bind(text(|u| u.usage_json.as_deref()))
        .bind(text(|u| u.error_code.as_deref()))
        .bind(text(|u| u.error_message.as_deref()))
}
