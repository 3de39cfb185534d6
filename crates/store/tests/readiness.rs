//! Readiness: a migrated database is ready; one never migrated, or missing a migration of this
//! build, is not.

mod common;

use common::TestDb;
use domain::ports::Readiness;
use sea_orm::{ConnectionTrait, Database};
use store::Store;

#[tokio::test]
async fn only_a_fully_migrated_database_is_ready() {
    for db in TestDb::all("ready").await {
        let fresh = Store::connect(&db.url).await.expect("connect without migrating");
        assert!(fresh.pending_migrations().await.is_err(), "{}: never migrated", db.url);
        fresh.close().await.expect("close");

        let store = db.open().await;
        assert_eq!(store.pending_migrations().await.expect("ready"), 0, "{}", db.url);

        // An older binary's database: the newest migration is not recorded.
        let raw = Database::connect(db.url.as_str()).await.expect("raw connection");
        raw.execute_unprepared(
            "DELETE FROM schema_migrations WHERE version = (SELECT MAX(version) FROM schema_migrations)",
        )
        .await
        .expect("forget the newest migration");
        raw.close().await.expect("close");
        assert_eq!(store.pending_migrations().await.expect("reachable"), 1, "{}", db.url);
        store.close().await.expect("close");
        db.cleanup().await;
    }
}
