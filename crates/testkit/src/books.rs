//! Accounts and books for tests: the one `NewUser` the tests create users from, and the check run
//! after a scenario that a user's balance equals the sum of its ledger entries.

use billing::Ledger;
use domain::{NewUser, UsdAmount, UserId};

/// A fresh user id, `usr_<uuid v7>`.
pub fn user_id() -> UserId {
    UserId(format!("usr_{}", uuid::Uuid::now_v7().simple()))
}

/// The user the tests create: `id` with an opening `balance`, the role `user`, a concurrency limit
/// of 10 and no media quota. Change a field with `NewUser { field, ..new_user(id, balance) }`.
pub fn new_user(id: &UserId, balance: UsdAmount) -> NewUser {
    NewUser {
        id: id.clone(),
        name: "t".into(),
        email: "t@example.com".into(),
        role: domain::Role::User,
        balance,
        concurrency_limit: 10,
        media_quota_bytes: 0,
    }
}

/// Balance = Σ ledger, read through the `Ledger` port (each entry's `balance_after` is also the
/// running sum, in id order: `billing::conformance::balance_is_ledger_sum`); returns the balance.
/// Fails the test, naming `context` (such as the database), when they differ.
pub async fn assert_balance_is_ledger_sum(ledger: &dyn Ledger, user: &UserId, context: &str) -> UsdAmount {
    billing::conformance::balance_is_ledger_sum(ledger, user)
        .await
        .unwrap_or_else(|e| panic!("{context}: balance = Σ ledger of {user:?}: {e}"))
}

/// Runs one statement (`$1`… placeholders, text values) on the database at `url`, under the store,
/// and returns the rows it changed: for a test that makes a stored row what no code path writes
/// (a corrupt record, an old timestamp).
pub async fn execute_under_the_store(url: &str, sql: &str, values: &[&str]) -> u64 {
    use sea_orm::{ConnectionTrait, Database, Statement};
    let conn = Database::connect(url).await.expect("connect under the store");
    let statement = Statement::from_sql_and_values(
        conn.get_database_backend(),
        sql,
        values.iter().map(|v| sea_orm::Value::from(*v)).collect::<Vec<_>>(),
    );
    let changed = conn.execute_raw(statement).await.expect("run the statement").rows_affected();
    conn.close().await.expect("close");
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use billing::{InMemoryLedger, LedgerError, Reservation, Settlement};
    use domain::{LedgerEntry, LedgerKind, TaskId};

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(future)
    }

    /// The in-memory ledger, with a balance one micro-USD off its entries.
    struct Drifted(InMemoryLedger);

    #[async_trait::async_trait]
    impl Ledger for Drifted {
        async fn credit(&self, u: &UserId, a: UsdAmount, k: LedgerKind, n: &str) -> Result<LedgerEntry, LedgerError> {
            self.0.credit(u, a, k, n).await
        }
        async fn redeem(&self, user: &UserId, code_hash: &str) -> Result<LedgerEntry, LedgerError> {
            self.0.redeem(user, code_hash).await
        }
        async fn pay(&self, user: &UserId, payment: &str, amount: UsdAmount) -> Result<LedgerEntry, LedgerError> {
            self.0.pay(user, payment, amount).await
        }
        async fn reserve(&self, user: &UserId, task: &TaskId, amount: UsdAmount) -> Result<Reservation, LedgerError> {
            self.0.reserve(user, task, amount).await
        }
        async fn settle(&self, task: &TaskId, actual: UsdAmount) -> Result<Settlement, LedgerError> {
            self.0.settle(task, actual).await
        }
        async fn refund(&self, task: &TaskId) -> Result<Settlement, LedgerError> {
            self.0.refund(task).await
        }
        async fn balance(&self, user: &UserId) -> Result<UsdAmount, LedgerError> {
            let balance = self.0.balance(user).await?;
            balance.checked_add(UsdAmount::from_micros(1)).map_err(|_| LedgerError::Overflow)
        }
        async fn entries(&self, user: &UserId, limit: u64) -> Result<Vec<LedgerEntry>, LedgerError> {
            self.0.entries(user, limit).await
        }
    }

    #[test]
    fn the_check_passes_on_consistent_books_and_fails_on_a_drifted_balance() {
        let ledger = InMemoryLedger::default();
        let user = user_id();
        ledger.open_account(&user).expect("account");
        block_on(async {
            ledger.credit(&user, UsdAmount::from_micros(700), LedgerKind::Topup, "").await.expect("credit");
            let balance = assert_balance_is_ledger_sum(&ledger, &user, "memory").await;
            assert_eq!(balance, UsdAmount::from_micros(700));
        });
        let drifted = Drifted(ledger);
        let check = || block_on(assert_balance_is_ledger_sum(&drifted, &user, "drifted"));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check));
        assert!(caught.is_err(), "a balance that is not the sum of the entries fails the check");
    }

    #[test]
    fn new_user_is_an_ordinary_user_with_the_balance() {
        let id = user_id();
        let user = new_user(&id, UsdAmount::from_micros(5));
        assert_eq!((user.id, user.balance, user.role), (id, UsdAmount::from_micros(5), domain::Role::User));
    }
}
