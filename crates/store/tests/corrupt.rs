//! Stored values no type accepts (written under the store, as no code path writes them) read back
//! as `StoreError::Corrupt`: never a default, never the caller's `Invalid`. SQLite always;
//! PostgreSQL (a private schema) when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use billing::CallBook;
use common::{TestDb, name, new_task, usd, user_with};
use domain::ports::{AccountStore, StoreError, TaskStore};

/// Asserts that `read` is `Corrupt` about `what`.
fn assert_corrupt<T: std::fmt::Debug>(read: Result<T, StoreError>, what: &str, db: &str) {
    match read {
        Err(StoreError::Corrupt { what: got, .. }) => assert_eq!(got, what, "{db}"),
        other => panic!("{db}: {what}: expected Corrupt, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unknown_stored_role_is_corrupt() {
    for db in TestDb::all("corrupt_role").await {
        let store = db.open().await;
        let user = user_with(&store, usd(0)).await;
        let sql = "UPDATE users SET role = $1 WHERE id = $2";
        assert_eq!(testkit::books::execute_under_the_store(&db.url, sql, &["root", user.as_str()]).await, 1);
        assert_corrupt(store.user(&user).await, &format!("role of user {user}"), name(&store));
        db.cleanup().await;
    }
}

#[tokio::test]
async fn unknown_stored_task_fields_are_corrupt() {
    for db in TestDb::all("corrupt_task_fields").await {
        let store = db.open().await;
        let user = user_with(&store, usd(10_000)).await;
        for (column, value, what) in [
            ("input_mode", "file", "input mode"),
            ("media_type", "images", "media type"),
            ("ratio", "2:1", "ratio"),
            ("resolution", "8k", "resolution"),
            ("pricing_version_id", "m@1", "pricing version id"),
        ] {
            let task = new_task();
            store.open_call(common::call_task(&user, &task), usd(1_000)).await.expect("open");
            let sql = format!("UPDATE tasks SET {column} = $1 WHERE id = $2");
            assert_eq!(testkit::books::execute_under_the_store(&db.url, &sql, &[value, task.as_str()]).await, 1);
            assert_corrupt(store.task(&user, &task).await, &format!("{what} of task {task}"), name(&store));
        }
        db.cleanup().await;
    }
}
