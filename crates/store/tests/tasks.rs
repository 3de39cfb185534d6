//! Task state changes through the store: compare-and-set on the current state through the
//! domain's transition table (`TaskStore::transition_task`, `finish_task`), and money-moving ends
//! with their task (`CallBook::close_task`), as the video worker will use them. SQLite always;
//! PostgreSQL (a private schema) when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use billing::{CallBook, LedgerError};
use common::{TestDb, new_task, usd, user_with};
use domain::ports::{StoreError, TaskOutcome, TaskStore, Via};
use domain::{
    BillingStatus, ModelKind, Task, TaskBilling, TaskEvent, TaskId, TaskStatus, TaskTransition, TaskUpdate, Timestamp,
    UsdAmount, UserId,
};

/// A video task (the ledger suite's running task with a video's fields).
fn video_task(user: &UserId, id: &TaskId, status: TaskStatus) -> Task {
    let base = billing::conformance::running_task(user, id, UsdAmount::ZERO, status);
    Task {
        model: "Videogen-2.0".into(),
        kind: ModelKind::Video,
        prompt: Some("a cat".into()),
        provider: "p".into(),
        duration: Some(5),
        resolution: Some(domain::Resolution::P720),
        ratio: Some(domain::Ratio::Wide),
        generate_audio: Some(true),
        billing: TaskBilling {
            pricing_version_id: Some(domain::PricingVersionId { model: "Videogen-2.0".into(), version: 1 }),
            ..base.billing
        },
        webhook_url: Some("https://example.com/hook".into()),
        ..base
    }
}

fn change(from: TaskStatus, event: TaskEvent) -> TaskTransition {
    TaskTransition::new(from, event)
}

async fn upstream_id(store: &store::Store, task: &TaskId) -> Option<String> {
    store.upstream_record(task).await.expect("read").and_then(|r| r.upstream_id)
}

#[tokio::test]
async fn a_finished_call_records_the_endpoint_and_attempts_that_served_it() {
    for db in TestDb::all("via").await {
        let store = db.open().await;
        let alice = user_with(&store, usd(10_000)).await;
        let t = new_task();
        let running = billing::conformance::running_task(&alice, &t, usd(1_000), TaskStatus::Processing);
        store.open_call(running, usd(1_000)).await.expect("open");
        assert_eq!(store.upstream_record(&t).await.map(|r| r.and_then(|r| r.via)), Ok(None), "nothing sent yet");
        let via = Via { endpoint: "platform-b".into(), attempts: 3 };
        let outcome = TaskOutcome {
            status: TaskStatus::Succeeded,
            usage_json: None,
            error_code: None,
            error_message: None,
            via: Some(via.clone()),
            served_by: None,
        };
        store.close_call(&t, &billing::Expect::of(&alice, usd(1_000)), Some(usd(400)), outcome).await.expect("close");
        let record = store.upstream_record(&t).await.expect("read").expect("task");
        assert_eq!((record.upstream_id, record.via), (None, Some(via)), "{}", common::name(&store));
    }
}

#[tokio::test]
async fn video_lifecycle_through_compare_and_set() {
    for db in TestDb::all("video").await {
        let store = db.open().await;
        let alice = user_with(&store, usd(10_000)).await;
        let t = new_task();
        store.open_call(video_task(&alice, &t, TaskStatus::Submitting), usd(4_000)).await.expect("open");
        // submitting → queued, recording the upstream id.
        let mut accepted = change(TaskStatus::Submitting, TaskEvent::Accepted);
        accepted.update.upstream_id = Some("cgt-123".into());
        let via = Via { endpoint: "platform-2".into(), attempts: 2 };
        accepted.update.via = Some(via.clone());
        assert_eq!(store.transition_task(&t, accepted.clone()).await, Ok(TaskStatus::Queued));
        assert_eq!(upstream_id(&store, &t).await, Some("cgt-123".into()));
        assert_eq!(store.upstream_record(&t).await.map(|r| r.and_then(|r| r.via)), Ok(Some(via.clone())));
        // The same change again: the task is no longer submitting.
        assert!(matches!(store.transition_task(&t, accepted).await, Err(StoreError::Conflict(_))));
        // queued → processing; then the table refuses cancel from processing, with or without money.
        assert_eq!(
            store.transition_task(&t, change(TaskStatus::Queued, TaskEvent::Started)).await,
            Ok(TaskStatus::Processing)
        );
        let cancel = change(TaskStatus::Processing, TaskEvent::Cancel);
        assert!(matches!(store.transition_task(&t, cancel.clone()).await, Err(StoreError::Conflict(_))));
        let refused = store.close_task(&t, &billing::Expect::of(&alice, usd(4_000)), None, cancel).await;
        assert_eq!(
            refused.map(drop),
            Err(LedgerError::TaskConflict {
                task: t.clone(),
                status: Some(TaskStatus::Processing),
                event: TaskEvent::Cancel
            })
        );
        // A terminal state without the money is refused while the hold is open.
        let failed = change(TaskStatus::Processing, TaskEvent::Failed);
        assert!(matches!(store.transition_task(&t, failed).await, Err(StoreError::Conflict(_))));
        // Success with its charge, output and last frame, in one step.
        let mut done = change(TaskStatus::Processing, TaskEvent::Succeeded);
        done.update = TaskUpdate {
            output_url: Some("https://cdn.example.com/v.mp4".into()),
            last_frame_url: Some("https://cdn.example.com/v.png".into()),
            usage_json: Some("{\"completion_tokens\":108900}".into()),
            ..TaskUpdate::default()
        };
        let settled = store
            .close_task(&t, &billing::Expect::of(&alice, usd(4_000)), Some(usd(3_500)), done)
            .await
            .expect("close");
        assert_eq!((settled.status, settled.balance_after), (BillingStatus::Settled, usd(6_500)));
        let row = store.task(&alice, &t).await.expect("read").expect("task");
        assert_eq!(row.status, TaskStatus::Succeeded, "{}", common::name(&store));
        assert_eq!(row.output_url.as_deref(), Some("https://cdn.example.com/v.mp4"));
        assert_eq!(row.last_frame_url.as_deref(), Some("https://cdn.example.com/v.png"));
        assert_eq!(row.billing.usage_json.as_deref(), Some("{\"completion_tokens\":108900}"));
        assert_eq!(row.billing.status, BillingStatus::Settled);
        assert!(row.completed_at.is_some() && row.updated_at == row.completed_at.unwrap_or(Timestamp(0)));
        assert_eq!(upstream_id(&store, &t).await, Some("cgt-123".into()), "later changes keep it");
        let record = store.upstream_record(&t).await.expect("read").expect("task");
        assert_eq!(record.via, Some(via), "and the endpoint it lives on");
        assert_eq!(store.upstream_record(&new_task()).await, Ok(None), "no such task");
        // Terminal states take no event at all.
        for event in [TaskEvent::Accepted, TaskEvent::Started, TaskEvent::Failed, TaskEvent::Expire] {
            let late = TaskTransition { from: None, event, update: TaskUpdate::default() };
            assert!(matches!(store.transition_task(&t, late).await, Err(StoreError::Conflict(_))), "{event:?}");
        }
        common::balance_is_ledger_sum(&store, &alice).await;
        db.cleanup().await;
    }
}

#[tokio::test]
async fn cancel_only_while_queued_and_racing_changes_win_once() {
    for db in TestDb::all("cancel").await {
        let store = db.open().await;
        let alice = user_with(&store, usd(1_000)).await;
        let t = new_task();
        store.open_call(video_task(&alice, &t, TaskStatus::Queued), usd(300)).await.expect("open");
        // A cancel (with its refund) races a start: exactly one of them happens.
        let cancel = change(TaskStatus::Queued, TaskEvent::Cancel);
        let start = change(TaskStatus::Queued, TaskEvent::Started);
        let held = billing::Expect::of(&alice, usd(300));
        let (c, s) = tokio::join!(store.close_task(&t, &held, None, cancel), store.transition_task(&t, start));
        assert!(c.is_ok() != s.is_ok(), "{}: {c:?} / {s:?}", common::name(&store));
        let (task_state, hold, balance) = if c.is_ok() {
            (TaskStatus::Cancelled, BillingStatus::Refunded, usd(1_000))
        } else {
            (TaskStatus::Processing, BillingStatus::Reserved, usd(700))
        };
        assert_eq!(store.task_status(&t).await, Ok(Some(task_state)));
        assert_eq!(store.reservation_status(&t).await, Ok(Some(hold)));
        assert_eq!(common::balance_is_ledger_sum(&store, &alice).await, balance);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn unbilled_tasks_and_finish_task() {
    for db in TestDb::all("finish").await {
        let store = db.open().await;
        let alice = user_with(&store, usd(1_000)).await;
        let t = new_task();
        store.insert_task(video_task(&alice, &t, TaskStatus::Processing)).await.expect("insert");
        let ghost = new_task();
        let failed = TaskOutcome {
            status: TaskStatus::Failed,
            usage_json: None,
            error_code: Some("interrupted".into()),
            error_message: Some("gone".into()),
            via: None,
            served_by: None,
        };
        assert!(matches!(store.finish_task(&ghost, failed.clone()).await, Err(StoreError::NotFound(_))));
        let running = TaskOutcome { status: TaskStatus::Processing, ..failed.clone() };
        assert!(matches!(store.finish_task(&t, running).await, Err(StoreError::Invalid(_))));
        assert_eq!(store.finish_task(&t, failed.clone()).await, Ok(()));
        assert!(matches!(store.finish_task(&t, failed).await, Err(StoreError::Conflict(_))));
        let row = store.task(&alice, &t).await.expect("read").expect("task");
        assert_eq!((row.status, row.error_code.as_deref()), (TaskStatus::Failed, Some("interrupted")));
        assert_eq!(row.billing.status, BillingStatus::Unbilled);
        // An open hold keeps its task from a money-less end; the recovery order is refund, then finish.
        let held = new_task();
        store.open_call(video_task(&alice, &held, TaskStatus::Processing), usd(10)).await.expect("open");
        let outcome = TaskOutcome {
            status: TaskStatus::Failed,
            usage_json: None,
            error_code: None,
            error_message: None,
            via: None,
            served_by: None,
        };
        assert!(matches!(store.finish_task(&held, outcome.clone()).await, Err(StoreError::Conflict(_))));
        billing::Ledger::refund(&store, &held).await.expect("refund");
        assert_eq!(store.finish_task(&held, outcome).await, Ok(()));
        assert_eq!(common::balance_is_ledger_sum(&store, &alice).await, usd(1_000));
        db.cleanup().await;
    }
}
