//! Stored values no type accepts (written under the store, as no code path writes them) read back
//! as `StoreError::Corrupt`: never a default, never the caller's `Invalid`. SQLite always;
//! PostgreSQL (a private schema) when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use common::{TestDb, name, usd, user_with};
use domain::ports::{AccountStore, StoreError};

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
