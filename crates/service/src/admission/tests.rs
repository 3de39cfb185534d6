//! Admission against real lease rows (SQLite, and PostgreSQL when `TEST_DATABASE_URL` is set): caps
//! hold within one replica and across two, waiters are served round-robin across users, a call that
//! waits in vain gets 429 with `Retry-After`, and a dead replica's slots come back at expiry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use domain::{SystemClock, UsdAmount, UserId};

use super::{Admission, AdmissionSettings, Permit};
use crate::{Gateway, NewUserRequest, Ports, ServiceError};

const MODEL: &str = "LangA-V4-flash";

/// A fresh database (SQLite always, PostgreSQL in a private schema when configured).
async fn stores() -> Vec<(String, store::Store)> {
    let dir = std::env::temp_dir().join(format!("gw-admission-{}", uuid::Uuid::new_v4().simple()));
    let mut out = vec![(
        "sqlite".to_owned(),
        store::Store::open(&format!("sqlite://{}/gw.db?mode=rwc", dir.display())).await.expect("sqlite store"),
    )];
    if let Some(schema) = testkit::pg::Schema::from_env("gw_adm").await {
        out.push(("postgres".to_owned(), store::Store::open(&schema.url).await.expect("pg store")));
    }
    out
}

/// A gateway on `store` with the catalog loaded, `MODEL` capped at `model_cap`.
async fn gateway(store: &store::Store, model_cap: i64) -> Gateway {
    let gateway = Gateway::new(Ports::from_store(store.clone(), Arc::new(SystemClock)));
    gateway.seed_catalog(&catalog::Catalog::builtin().expect("catalog")).await.expect("seed");
    gateway.set_model(MODEL, None, Some(model_cap)).await.expect("cap the model");
    gateway
}

async fn user(gateway: &Gateway, cap: i64) -> UserId {
    let name = format!("u{}", uuid::Uuid::new_v4().simple());
    let req = NewUserRequest {
        name: name.clone(),
        email: format!("{name}@example.com"),
        role: "user".into(),
        balance: UsdAmount::from_micros(1_000_000),
        concurrency_limit: cap,
        media_quota_bytes: 0,
    };
    gateway.create_user(req).await.expect("user").user.id
}

fn settings(queue_wait: Duration) -> AdmissionSettings {
    AdmissionSettings {
        queue_wait,
        lease_ttl: Duration::from_secs(3),
        tick: Duration::from_millis(20),
        idle_release: Duration::from_millis(200),
        ..AdmissionSettings::default()
    }
}

fn admission(store: &store::Store, replica: &str, queue_wait: Duration) -> Admission {
    Admission::new(settings(queue_wait), replica.to_owned(), Arc::new(store.clone()), Arc::new(SystemClock))
}

/// Holds a permit for `hold`, counting how many are held at once in `now` / `max`.
async fn run_call(
    admission: Admission,
    user: UserId,
    hold: Duration,
    now: Arc<AtomicU32>,
    max: Arc<AtomicU32>,
) -> bool {
    match admission.admit(&user, MODEL).await {
        Ok(permit) => {
            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
            max.fetch_max(n, Ordering::SeqCst);
            tokio::time::sleep(hold).await;
            now.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
            true
        }
        Err(ServiceError::ConcurrencyLimitExceeded { .. }) => false,
        Err(e) => panic!("unexpected admission error {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_cap_holds_across_two_replicas_and_everyone_gets_through() {
    for (label, store) in stores().await {
        let gw = gateway(&store, 3).await;
        let users = [user(&gw, 100).await, user(&gw, 100).await];
        let replicas =
            [admission(&store, "r1", Duration::from_secs(20)), admission(&store, "r2", Duration::from_secs(20))];
        let (now, max) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..24usize {
            let admission = replicas[i % 2].clone();
            let user = users[(i / 2) % 2].clone();
            calls.spawn(run_call(admission, user, Duration::from_millis(30), Arc::clone(&now), Arc::clone(&max)));
        }
        let admitted = calls.join_all().await.into_iter().filter(|ok| *ok).count();
        assert_eq!(admitted, 24, "{label}: every call got a slot within the wait");
        let peak = max.load(Ordering::SeqCst);
        assert!((1..=3).contains(&peak), "{label}: at most 3 calls at once over both replicas, saw {peak}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_cap_holds_and_a_call_that_waits_in_vain_gets_429_with_retry_after() {
    for (label, store) in stores().await {
        let gw = gateway(&store, 1000).await;
        let u = user(&gw, 2).await;
        let adm = admission(&store, "r1", Duration::from_millis(300));
        let a = adm.admit(&u, MODEL).await.expect("first").expect("caps on");
        let b = adm.admit(&u, MODEL).await.expect("second").expect("caps on");
        match adm.admit(&u, MODEL).await {
            Err(ServiceError::ConcurrencyLimitExceeded { message, retry_after_secs }) => {
                assert!((1..=60).contains(&retry_after_secs), "{label}: Retry-After {retry_after_secs}");
                assert!(message.contains("at most 2"), "{label}: the message names the cap: {message}");
            }
            other => panic!("{label}: a third call over a cap of 2 must be refused, got {other:?}"),
        }
        assert_eq!(adm.model_load(MODEL), (2, 0), "{label}: the refused call left the queue");
        drop(a);
        let c = adm.admit(&u, MODEL).await.expect("a slot freed").expect("caps on");
        drop((b, c));
        assert_eq!(adm.model_load(MODEL), (0, 0), "{label}: every slot given back");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_round_robin_across_users() {
    for (label, store) in stores().await {
        let gw = gateway(&store, 1).await;
        let (heavy, light) = (user(&gw, 100).await, user(&gw, 100).await);
        let adm = admission(&store, "r1", Duration::from_secs(20));
        let first = adm.admit(&heavy, MODEL).await.expect("first").expect("caps on");
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut calls = tokio::task::JoinSet::new();
        let queue = |who: &'static str, user: UserId, calls: &mut tokio::task::JoinSet<()>| {
            let (adm, order) = (adm.clone(), Arc::clone(&order));
            calls.spawn(async move {
                let permit: Option<Permit> = adm.admit(&user, MODEL).await.expect("admitted");
                order.lock().expect("order").push(who);
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(permit);
            });
        };
        for _ in 0..6 {
            queue("heavy", heavy.clone(), &mut calls);
        }
        // Let the heavy user's six calls queue first.
        while adm.model_load(MODEL).1 < 6 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for _ in 0..2 {
            queue("light", light.clone(), &mut calls);
        }
        while adm.model_load(MODEL).1 < 8 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The light user's own slots come from the database (the manager leases them): until they
        // do, the light user cannot be served whatever its place in the ring, and a loaded machine
        // would see the heavy user served twice first.
        let light_scope = domain::CapScope::User(light.clone());
        let leased = tokio::time::timeout(Duration::from_secs(10), async {
            while !adm.loads().iter().any(|l| l.scope == light_scope && l.leased > 0) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        leased.await.expect("the light user's slots are leased within 10 s");
        drop(first);
        calls.join_all().await;
        let order = order.lock().expect("order").clone();
        let light_at: Vec<usize> = order.iter().enumerate().filter(|(_, w)| **w == "light").map(|(i, _)| i).collect();
        assert_eq!(light_at.len(), 2, "{label}: {order:?}");
        assert!(light_at[1] <= 3, "{label}: the light user's calls alternate with the heavy user's: {order:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_slots_come_back_at_expiry_and_a_closed_ones_at_once() {
    for (label, store) in stores().await {
        let gw = gateway(&store, 2).await;
        let u = user(&gw, 100).await;
        let dead = admission(&store, "dead", Duration::from_secs(5));
        let held = [dead.admit(&u, MODEL).await.expect("a"), dead.admit(&u, MODEL).await.expect("b")];
        // The replica "dies": its manager stops and its permits are never given back.
        std::mem::forget(held);
        drop(dead);
        let other = admission(&store, "other", Duration::from_millis(500));
        assert!(
            matches!(other.admit(&u, MODEL).await, Err(ServiceError::ConcurrencyLimitExceeded { .. })),
            "{label}: the dead replica's lease still counts before it expires"
        );
        let started = std::time::Instant::now();
        let permit = loop {
            match other.admit(&u, MODEL).await {
                Ok(permit) => break permit,
                Err(ServiceError::ConcurrencyLimitExceeded { .. }) => {
                    assert!(started.elapsed() < Duration::from_secs(8), "{label}: the slots never came back");
                }
                Err(e) => panic!("{label}: {e}"),
            }
        };
        assert!(permit.is_some(), "{label}");
        // A replica that shuts down gives its leases back at once.
        drop(permit);
        let closing = admission(&store, "closing", Duration::from_secs(5));
        let p = closing.admit(&u, MODEL).await.expect("closing admits");
        drop(p);
        closing.release_all().await.expect("release");
        let n = domain::CapLeases::leased_in_use(
            &store,
            &domain::CapScope::Model(MODEL.into()),
            domain::Clock::now(&SystemClock),
        )
        .await
        .expect("leased");
        assert!(n <= 2, "{label}: {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_replica_gives_slots_to_a_short_one() {
    for (label, store) in stores().await {
        let gw = gateway(&store, 3).await;
        let u = user(&gw, 100).await;
        let (busy, short) =
            (admission(&store, "busy", Duration::from_secs(20)), admission(&store, "short", Duration::from_secs(20)));
        let done = Arc::new(AtomicU32::new(0));
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..40 {
            let (busy, u, done) = (busy.clone(), u.clone(), Arc::clone(&done));
            calls.spawn(async move {
                let permit = busy.admit(&u, MODEL).await.expect("admitted");
                tokio::time::sleep(Duration::from_millis(40)).await;
                drop(permit);
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        while busy.model_load(MODEL).0 < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The busy replica holds every slot and always has waiters; the short one still gets a slot
        // long before that queue is empty (40 calls of 40 ms, 3 at a time, take over 500 ms).
        let permit = short.admit(&u, MODEL).await.expect("admitted").expect("caps on");
        let finished = done.load(Ordering::SeqCst);
        assert!(finished < 30, "{label}: the short replica waited until {finished} of 40 calls ended");
        drop(permit);
        calls.join_all().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_all_stops_the_manager_so_no_renewal_leases_again() {
    for (label, store) in stores().await {
        let gw = gateway(&store, 10).await;
        let u = user(&gw, 100).await;
        let adm = admission(&store, "stopping", Duration::from_millis(200));
        let scope = domain::CapScope::Model(MODEL.into());
        let in_use = || async {
            domain::CapLeases::leased_in_use(&store, &scope, domain::Clock::now(&SystemClock)).await.expect("leased")
        };
        // A call still running at shutdown keeps its permit.
        let running = adm.admit(&u, MODEL).await.expect("admitted").expect("caps on");
        assert!(adm.manager_running(), "{label}: the first call starts the manager");
        adm.release_all().await.expect("release");
        assert!(!adm.manager_running(), "{label}: the manager has stopped and was waited for");
        // Ten of the manager's ticks: a manager still running would lease the running call's slot again.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(in_use().await, 0, "{label}: no lease was taken after the give-back");
        drop(running);
        assert!(
            matches!(adm.admit(&u, MODEL).await, Err(ServiceError::ConcurrencyLimitExceeded { .. })),
            "{label}: nothing new is admitted after the give-back"
        );
        assert!(!adm.manager_running(), "{label}: a later call does not start the manager again");
    }
}
