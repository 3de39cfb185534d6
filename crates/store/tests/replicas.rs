//! Replica liveness leases: a running call whose runner holds a live lease is left alone; once the
//! lease has run out (or the replica retired, or never had one) the call is an orphan, found only
//! once it has not changed for the given age. Calls without a runner (video tasks) are never
//! orphans. On SQLite and, when `TEST_DATABASE_URL` is set, PostgreSQL, through the batched writer.

mod common;

use billing::CallBook;
use common::{TestDb, call_task, new_task, usd, user_with};
use domain::{CapLeases, Timestamp};

#[tokio::test]
async fn a_call_is_orphaned_only_when_its_runner_lease_has_run_out() {
    for db in TestDb::all("replicas").await {
        let store = db.open().await;
        let ctx = common::name(&store);
        let user = user_with(&store, usd(1_000)).await;
        let with_runner = |runner: Option<&str>| {
            let id = new_task();
            let mut task = call_task(&user, &id);
            task.runner = runner.map(str::to_owned);
            (id, task)
        };
        let (alive_call, alive_task) = with_runner(Some("replica_alive"));
        let (dead_call, dead_task) = with_runner(Some("replica_dead"));
        let (unknown_call, unknown_task) = with_runner(Some("replica_never_seen"));
        let (_video, video_task) = with_runner(None);
        for task in [alive_task, dead_task, unknown_task, video_task] {
            store.open_call(task, usd(1)).await.unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
        }
        store.heartbeat("replica_alive", Timestamp(1_000), Timestamp(10_000)).await.expect("heartbeat");
        store.heartbeat("replica_dead", Timestamp(1_000), Timestamp(5_000)).await.expect("heartbeat");

        // The calls last changed at 1 ms: none is older than `before` = 0, whatever its runner.
        let young = store.orphaned_calls(Timestamp(6_000), Timestamp(0), 10).await.expect("sweep");
        assert!(young.is_empty(), "{ctx}: {young:?}");
        // Far in the future: every lease has run out.
        let far = Timestamp(i64::MAX / 2);
        let mut all = store.orphaned_calls(far, far, 10).await.expect("sweep");
        all.sort();
        let mut expected = vec![alive_call.clone(), dead_call.clone(), unknown_call.clone()];
        expected.sort();
        assert_eq!(all, expected, "{ctx}: every call with a runner, never the video task");
        // At 6 s: the dead replica's lease ended at 5 s, the live one's lasts until 10 s.
        let now = Timestamp(6_000);
        let mut orphans = store.orphaned_calls(now, far, 10).await.expect("sweep");
        orphans.sort();
        let mut expected = vec![dead_call.clone(), unknown_call.clone()];
        expected.sort();
        assert_eq!(orphans, expected, "{ctx}: the live replica's call is left alone");
        // A renewed lease protects again; a retired replica's calls are orphans.
        store.heartbeat("replica_dead", now, Timestamp(20_000)).await.expect("heartbeat");
        store.retire("replica_alive").await.expect("retire");
        let mut orphans = store.orphaned_calls(now, far, 10).await.expect("sweep");
        orphans.sort();
        let mut expected = vec![alive_call, unknown_call];
        expected.sort();
        assert_eq!(orphans, expected, "{ctx}: after the renewal and the retirement");
        store.close().await.expect("close");
        db.cleanup().await;
    }
}
