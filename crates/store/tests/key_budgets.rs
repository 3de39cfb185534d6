//! Key budgets inside the reservation (issue 25): 200 calls at once through one key with a
//! $0.05 budget on a $100 balance, split over two replicas (two stores on one database, each with
//! its own writer), never take the key past its budget; the key's counters agree with what its
//! callers were charged and with the ledger; and a daily budget starts over at the UTC boundary.
//! SQLite always, PostgreSQL when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use billing::{CallBook, Expect, LedgerError};
use common::{TestDb, call_task, name, new_task, usd, user_with};
use domain::ports::AccountStore;
use domain::{
    ApiKey, ApiKeyId, BudgetKeys, BudgetPeriod, Clock, KeyBudget, KeySpend, Scope, TaskEvent, TaskStatus,
    TaskTransition, Timestamp, UserId,
};
use sea_orm::{ConnectionTrait, Database, Statement};
use store::Store;

/// The key's budget: $0.05.
const BUDGET: i64 = 50_000;

/// A key of `user` with `budget`, stored through the port.
async fn budget_key(store: &Store, user: &UserId, id: &str, budget: KeyBudget) -> ApiKeyId {
    let key = ApiKey {
        id: ApiKeyId(id.to_owned()),
        user_id: user.clone(),
        name: "budgeted".into(),
        hash: format!("hash-{id}"),
        prefix: "sk-gw-ab".into(),
        scopes: vec![Scope::LanguageCreate],
        revoked_at: None,
        created_at: Timestamp(1),
        expires_at: None,
        models: None,
        budget: Some(budget),
        spend: KeySpend::default(),
        rates: domain::KeyRates::default(),
        allow_ips: None,
        parent_id: None,
    };
    store.create_key(key).await.unwrap_or_else(|e| panic!("{}: key: {e}", name(store))).id
}

/// A call's task made with `key`, counted against its budget.
fn task_of(user: &UserId, key: &ApiKeyId) -> domain::Task {
    let mut task = call_task(user, &new_task());
    task.key_id = Some(key.clone());
    task.billing.budget_keys = BudgetKeys::new([key.clone()]);
    task
}

/// The key's counters as stored.
async fn spend_of(store: &Store, id: &str) -> KeySpend {
    let (key, _) = store.key_by_hash(&format!("hash-{id}")).await.expect("read key").expect("key");
    key.spend
}

/// What the ledger charged the tasks made with `key`: minus the sum of their entries (a hold and
/// its settlement net to the charge; a refund nets to zero).
async fn ledger_charges_of(url: &str, key: &ApiKeyId) -> i64 {
    let raw = Database::connect(url).await.expect("raw connection");
    let backend = raw.get_database_backend();
    let sql = "SELECT CAST(COALESCE(-SUM(l.amount_micros), 0) AS BIGINT) AS charged FROM ledger_entries l \
               JOIN tasks t ON t.id = l.task_id WHERE t.key_id = $1";
    let row = raw
        .query_one_raw(Statement::from_sql_and_values(backend, sql, [key.as_str().into()]))
        .await
        .expect("sum")
        .expect("row");
    let charged: i64 = row.try_get("", "charged").expect("charged");
    raw.close().await.expect("close");
    charged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_calls_over_two_replicas_never_pass_a_keys_budget() {
    for db in TestDb::all("key_budget").await {
        let a = db.open().await;
        let b = Store::connect(&db.url).await.expect("second replica");
        let db_name = name(&a);
        let user = user_with(&a, usd(100_000_000)).await;
        let key =
            budget_key(&a, &user, "key_budget", KeyBudget { limit: usd(BUDGET), period: BudgetPeriod::Total }).await;
        let stores = Arc::new([a.clone(), b.clone()]);
        let start = Arc::new(tokio::sync::Barrier::new(200));
        let mut calls = Vec::new();
        for i in 0..200_i64 {
            let (stores, start, user, key) = (Arc::clone(&stores), Arc::clone(&start), user.clone(), key.clone());
            calls.push(tokio::spawn(async move {
                let (opener, closer) = (&stores[(i % 2) as usize], &stores[((i / 2) % 2) as usize]);
                let hold = 400 + (i * 37) % 300;
                let task = task_of(&user, &key);
                let id = task.id.clone();
                start.wait().await;
                match opener.open_call(task, usd(hold)).await {
                    Ok(_) => {
                        let charge = (i % 4 != 0).then(|| usd(hold - (i * 13) % hold));
                        let event = if charge.is_some() { TaskEvent::Succeeded } else { TaskEvent::Failed };
                        let held = Expect { budget: BudgetKeys::new([key.clone()]), ..Expect::of(&user, usd(hold)) };
                        let change = TaskTransition::new(TaskStatus::Processing, event);
                        let ended = closer.close_task(&id, &held, charge, change).await;
                        let ended = ended.unwrap_or_else(|e| panic!("close {id}: {e}"));
                        Some(ended.actual.micros())
                    }
                    Err(LedgerError::KeyBudgetExceeded { .. }) => None,
                    Err(e) => panic!("open {id}: {e}"),
                }
            }));
        }
        let mut charged = 0;
        let (mut granted, mut refused) = (0, 0);
        for call in calls {
            match call.await.expect("call") {
                Some(actual) => {
                    granted += 1;
                    charged += actual;
                }
                None => refused += 1,
            }
        }
        assert!(granted > 50 && refused > 0, "{db_name}: {granted} granted, {refused} refused");
        let spend = spend_of(&a, "key_budget").await;
        assert_eq!(spend.held, usd(0), "{db_name}: every hold ended");
        assert!(spend.spent <= usd(BUDGET), "{db_name}: the key spent {} of {BUDGET} micro-USD", spend.spent);
        assert_eq!(spend.spent, usd(charged), "{db_name}: the key's total is what its callers were charged");
        assert_eq!(ledger_charges_of(&db.url, &key).await, charged, "{db_name}: and what the ledger charged");
        let balance = common::balance_is_ledger_sum(&a, &user).await;
        assert_eq!(balance, usd(100_000_000 - charged), "{db_name}");
        // A refused call left nothing behind: no reservation, no task.
        let stats = domain::ports::TaskStore::task_stats(&a, &user).await.expect("stats");
        assert_eq!(stats.total, granted, "{db_name}: only granted calls stored a task");
        b.close().await.expect("close b");
        a.close().await.expect("close a");
        db.cleanup().await;
    }
}

/// A clock the test moves by hand.
#[derive(Debug)]
struct HandClock(AtomicI64);

impl Clock for HandClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

#[tokio::test]
async fn a_daily_budget_starts_over_at_the_utc_boundary() {
    for db in TestDb::all("key_budget_day").await {
        let midnight: Timestamp = "2026-11-27T00:00:00Z".parse().expect("time");
        let clock = Arc::new(HandClock(AtomicI64::new(midnight.millis() - 1)));
        let store = db.open().await.with_clock(clock.clone());
        let db_name = name(&store);
        let user = user_with(&store, usd(1_000_000)).await;
        let key =
            budget_key(&store, &user, "key_day", KeyBudget { limit: usd(1_000), period: BudgetPeriod::Day }).await;
        let open = |amount: i64| {
            let store = store.clone();
            let task = task_of(&user, &key);
            async move { store.open_call(task, usd(amount)).await.map(|r| r.task_id) }
        };
        let close = |id: domain::TaskId, hold: i64, charge: i64| {
            let (store, key, user) = (store.clone(), key.clone(), user.clone());
            async move {
                let held = Expect { budget: BudgetKeys::new([key]), ..Expect::of(&user, usd(hold)) };
                let change = TaskTransition::new(TaskStatus::Processing, TaskEvent::Succeeded);
                store.close_task(&id, &held, Some(usd(charge)), change).await.expect("close");
            }
        };
        // One millisecond before midnight: 700 spent, 200 held by an open call; 101 more is refused.
        let spent = open(700).await.expect("first call");
        close(spent, 700, 700).await;
        let open_across = open(200).await.expect("a call held across midnight");
        let refused = open(101).await;
        assert!(
            matches!(refused, Err(LedgerError::KeyBudgetExceeded { remaining, .. }) if remaining == usd(100)),
            "{db_name}: {refused:?}"
        );
        // At midnight the day's spend starts over; the open hold still counts.
        clock.0.store(midnight.millis(), Ordering::SeqCst);
        let fresh = open(800).await.expect("a new day's budget");
        assert!(matches!(open(1).await, Err(LedgerError::KeyBudgetExceeded { .. })), "{db_name}: 800 + 200 held");
        // The call held across midnight is charged to the new day.
        close(open_across, 200, 150).await;
        close(fresh, 800, 800).await;
        let spend = spend_of(&store, "key_day").await;
        assert_eq!((spend.period_start, spend.spent, spend.held), (midnight, usd(950), usd(0)), "{db_name}");
        common::balance_is_ledger_sum(&store, &user).await;
        store.close().await.expect("close");
        db.cleanup().await;
    }
}

/// Children minted from one budgeted key share its budget: 120 calls through ten children (each
/// with a budget of its own far above the parent's), opened and closed over two replicas, never
/// charge more than the parent's budget together, and every counter ends as the ledger says.
#[tokio::test]
async fn children_of_a_budgeted_key_share_its_budget_over_two_replicas() {
    const PARENT: i64 = 20_000;
    for db in TestDb::all("key_budget_chain").await {
        let a = db.open().await;
        let b = Store::connect(&db.url).await.expect("second replica");
        let db_name = name(&a);
        let user = user_with(&a, usd(100_000_000)).await;
        let total = BudgetPeriod::Total;
        let parent = budget_key(&a, &user, "key_parent", KeyBudget { limit: usd(PARENT), period: total }).await;
        let mut children = Vec::new();
        for c in 0..10 {
            let id = format!("key_child_{c}");
            children.push(budget_key(&a, &user, &id, KeyBudget { limit: usd(BUDGET * 10), period: total }).await);
        }
        let stores = Arc::new([a.clone(), b.clone()]);
        let start = Arc::new(tokio::sync::Barrier::new(120));
        let mut calls = Vec::new();
        for i in 0..120_i64 {
            let child = children[(i % 10) as usize].clone();
            let chain = BudgetKeys::new([child.clone(), parent.clone()]);
            let (stores, start, user) = (Arc::clone(&stores), Arc::clone(&start), user.clone());
            calls.push(tokio::spawn(async move {
                let (opener, closer) = (&stores[(i % 2) as usize], &stores[((i / 2) % 2) as usize]);
                let hold = 400 + (i * 37) % 300;
                let mut task = task_of(&user, &child);
                task.billing.budget_keys = chain.clone();
                let id = task.id.clone();
                start.wait().await;
                match opener.open_call(task, usd(hold)).await {
                    Ok(_) => {
                        let charge = (i % 4 != 0).then(|| usd(hold - (i * 13) % hold));
                        let event = if charge.is_some() { TaskEvent::Succeeded } else { TaskEvent::Failed };
                        let held = Expect { budget: chain, ..Expect::of(&user, usd(hold)) };
                        let change = TaskTransition::new(TaskStatus::Processing, event);
                        let ended = closer.close_task(&id, &held, charge, change).await;
                        Some(ended.unwrap_or_else(|e| panic!("close {id}: {e}")).actual.micros())
                    }
                    Err(LedgerError::KeyBudgetExceeded { limit, .. }) => {
                        assert_eq!(limit, usd(PARENT), "only the parent's budget can refuse");
                        None
                    }
                    Err(e) => panic!("open {id}: {e}"),
                }
            }));
        }
        let (mut charged, mut granted, mut refused) = (0, 0, 0);
        for call in calls {
            match call.await.expect("call") {
                Some(actual) => {
                    granted += 1;
                    charged += actual;
                }
                None => refused += 1,
            }
        }
        assert!(granted > 5 && refused > 0, "{db_name}: {granted} granted, {refused} refused");
        let spend = spend_of(&a, "key_parent").await;
        assert_eq!(spend.held, usd(0), "{db_name}: every hold ended");
        assert!(spend.spent <= usd(PARENT), "{db_name}: the children spent {} of {PARENT} micro-USD", spend.spent);
        assert_eq!(spend.spent, usd(charged), "{db_name}: the parent's total is what its children were charged");
        let mut children_spent = 0;
        for c in 0..10 {
            let child = spend_of(&a, &format!("key_child_{c}")).await;
            assert_eq!(child.held, usd(0), "{db_name}: child {c} holds nothing");
            children_spent += child.spent.micros();
        }
        assert_eq!(children_spent, charged, "{db_name}: each child counted its own calls");
        let balance = common::balance_is_ledger_sum(&a, &user).await;
        assert_eq!(balance, usd(100_000_000 - charged), "{db_name}");
        b.close().await.expect("close b");
        a.close().await.expect("close a");
        db.cleanup().await;
    }
}
