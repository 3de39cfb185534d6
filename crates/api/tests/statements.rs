//! Statements and exports that reconcile (issue 39): random month histories written at chosen times
//! (credits of every kind: top-ups, adjustments of either sign, vouchers where they exist; calls
//! held and settled or refunded, holds across month boundaries and on them, calls left open), each
//! month's statement checked against the history to the micro-USD, its rule (opening + credits −
//! charges − held change = closing), its closing against the ledger's balance at the month's end,
//! the user's line of the gateway's revenue, and the CSV exports parsed with the `csv` crate and
//! summed to the statement. Then real calls through the simulator, the edges of the month and of the
//! export ranges, an export of more rows than a page, and one cut by a store failure. SQLite always,
//! PostgreSQL when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::history::History;
use common::{Env, Server, assert_envelope, databases};
use domain::{Clock, LedgerKind, Scope, SystemClock, TaskId, UsdAmount, UtcDay, UtcMonth};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

/// The months the histories fill, and the two before them (the second one empty).
const MONTHS: [&str; 5] = ["2026-04", "2026-05", "2026-06", "2026-07", "2026-08"];
const MODELS: [&str; 2] = ["LangA-V4-flash", "LangB-2.0-pro"];
const DAY_MS: i64 = 86_400_000;

fn month(text: &str) -> UtcMonth {
    text.parse().expect("month")
}

/// The first and last instant histories use: two days before June, and the end of August.
fn window() -> (i64, i64) {
    (month("2026-06").start().millis() - 2 * DAY_MS, month("2026-08").end().millis())
}

/// One thing that happened: a credit, or a call held at `at` and perhaps ended `delay` ms later
/// (charged `percent` % of its hold, which may pass 100, or refunded when `percent` is `None`).
#[derive(Debug, Clone)]
enum Event {
    Credit { at: i64, kind: LedgerKind, micros: i64 },
    Call { at: i64, model: usize, hold: i64, end: Option<(i64, Option<i64>)> },
}

fn instant() -> impl Strategy<Value = i64> {
    let (from, to) = window();
    let edges: Vec<i64> = ["2026-06", "2026-07", "2026-08"]
        .iter()
        .flat_map(|m| [month(m).start().millis(), month(m).start().millis() - 1])
        .chain([to - 1])
        .collect();
    prop_oneof![3 => from..to, 1 => proptest::sample::select(edges)]
}

fn event() -> impl Strategy<Value = Event> {
    // Every kind that is not a call's (a kind added later, such as `voucher`, is drawn too); only
    // an adjustment may take money away.
    let kinds: Vec<LedgerKind> =
        LedgerKind::ALL.into_iter().filter(|k| !domain::statement::is_call_kind(k.as_str())).collect();
    let credit = (instant(), proptest::sample::select(kinds), 1..5_000_000_i64, any::<bool>()).prop_map(
        |(at, kind, micros, up)| {
            let micros = if kind == LedgerKind::Adjustment && !up { -micros } else { micros };
            Event::Credit { at, kind, micros }
        },
    );
    let delay = prop_oneof![Just(0_i64), Just(1), 0..3_600_000_i64, 0..40 * DAY_MS];
    let outcome = prop_oneof![1 => Just(None), 3 => (0..=120_i64).prop_map(Some)];
    let end = proptest::option::weighted(0.85, (delay, outcome));
    let call = (instant(), 0..MODELS.len(), 1..3_000_000_i64, end).prop_map(|(at, model, hold, end)| {
        let (_, last) = window();
        // An end past the window never came: the call is still open.
        let end = end
            .filter(|(delay, _)| at + delay < last)
            .map(|(delay, percent)| (at + delay, percent.map(|p| hold * p / 100)));
        Event::Call { at, model, hold, end }
    });
    prop_oneof![credit, call]
}

/// What a history says a month's statement holds, in micro-USD.
#[derive(Debug, Default, PartialEq, Eq)]
struct Expected {
    opening: i64,
    credits: BTreeMap<String, (i64, i64)>,
    charges: BTreeMap<String, (i64, i64)>,
    refunds: (i64, i64),
    held_at_start: i64,
    held_at_end: i64,
    closing: i64,
}

/// The movements of `events` as `(at, kind, amount)`, and each call's `(open, end, hold)`.
fn expected(events: &[Event], m: UtcMonth) -> Expected {
    let (s, e) = (m.start().millis(), m.end().millis());
    let mut x = Expected::default();
    let moved = |at: i64, amount: i64, x: &mut Expected| {
        if at < s {
            x.opening += amount;
        }
        if at < e {
            x.closing += amount;
        }
    };
    for ev in events {
        match ev {
            Event::Credit { at, kind, micros } => {
                moved(*at, *micros, &mut x);
                if (s..e).contains(at) {
                    let line = x.credits.entry(kind.as_str().to_owned()).or_default();
                    *line = (line.0 + 1, line.1 + micros);
                }
            }
            Event::Call { at, model, hold, end } => {
                moved(*at, -hold, &mut x);
                let ended = end.map(|(t, _)| t);
                let open_at = |t: i64| *at < t && ended.is_none_or(|end| end >= t);
                x.held_at_start += if open_at(s) { *hold } else { 0 };
                x.held_at_end += if open_at(e) { *hold } else { 0 };
                if let Some((t, charge)) = end {
                    moved(*t, hold - charge.unwrap_or(0), &mut x);
                    if (s..e).contains(t) {
                        match charge {
                            Some(c) => {
                                let line = x.charges.entry(MODELS[*model].to_owned()).or_default();
                                *line = (line.0 + 1, line.1 + c);
                            }
                            None => x.refunds = (x.refunds.0 + 1, x.refunds.1 + hold),
                        }
                    }
                }
            }
        }
    }
    x
}

fn micros(v: &Value, ctx: &str) -> i64 {
    common::amount(v, ctx).micros()
}

/// The statement object as an [`Expected`], after checking its rule and its shape.
fn read_statement(s: &Value, ctx: &str) -> Expected {
    let lines = |v: &Value, name: &str, count: &str| -> BTreeMap<String, (i64, i64)> {
        let items = v.as_array().unwrap_or_else(|| panic!("{ctx}: not a list: {v}"));
        items
            .iter()
            .map(|l| {
                (
                    l[name].as_str().unwrap_or_default().to_owned(),
                    (l[count].as_i64().unwrap_or(-1), micros(&l["amount"], ctx)),
                )
            })
            .collect()
    };
    let x = Expected {
        opening: micros(&s["opening_balance"], ctx),
        credits: lines(&s["credits"]["by_kind"], "kind", "entries"),
        charges: lines(&s["charges"]["by_model"], "model", "calls"),
        refunds: (s["refunds"]["calls"].as_i64().unwrap_or(-1), micros(&s["refunds"]["amount"], ctx)),
        held_at_start: micros(&s["held"]["at_start"], ctx),
        held_at_end: micros(&s["held"]["at_end"], ctx),
        closing: micros(&s["closing_balance"], ctx),
    };
    let (credits, charges) = (micros(&s["credits"]["total"], ctx), micros(&s["charges"]["total"], ctx));
    assert_eq!(credits, x.credits.values().map(|l| l.1).sum::<i64>(), "{ctx}: credits total");
    assert_eq!(charges, x.charges.values().map(|l| l.1).sum::<i64>(), "{ctx}: charges total");
    assert_eq!(s["charges"]["calls"].as_i64(), Some(x.charges.values().map(|l| l.0).sum::<i64>()), "{ctx}: calls");
    let change = micros(&s["held"]["change"], ctx);
    assert_eq!(change, x.held_at_end - x.held_at_start, "{ctx}: held change");
    assert_eq!(x.opening + credits - charges - change, x.closing, "{ctx}: the statement's rule: {s}");
    x
}

/// The rows of a CSV export, after checking its head and its header line.
fn csv_rows(reply: &common::Reply, columns: &[&str], ctx: &str) -> Vec<BTreeMap<String, String>> {
    assert_eq!(reply.status, 200, "{ctx}: {}", String::from_utf8_lossy(&reply.raw));
    let header = |name: &str| reply.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    assert!(header("content-type").starts_with("text/csv"), "{ctx}: {}", header("content-type"));
    assert!(
        header("content-disposition").starts_with("attachment; filename=\""),
        "{ctx}: {}",
        header("content-disposition")
    );
    assert!(reply.raw.is_empty() || reply.raw.ends_with(b"\r\n"), "{ctx}: RFC 4180 lines end with CRLF");
    let mut reader = csv::Reader::from_reader(reply.raw.as_ref());
    let head: Vec<String> = reader.headers().expect("a header line").iter().map(str::to_owned).collect();
    assert_eq!(head, columns, "{ctx}: the header line");
    reader
        .records()
        .map(|r| {
            let r = r.unwrap_or_else(|e| panic!("{ctx}: a record that does not parse: {e}"));
            head.iter().cloned().zip(r.iter().map(str::to_owned)).collect()
        })
        .collect()
}

fn usd_text(text: &str, ctx: &str) -> i64 {
    common::amount(&json!(text), ctx).micros()
}

/// `m`'s exports sum to its statement `x`; the ledger export holds exactly the month's entries.
async fn check_exports(
    server: &Server,
    key: &str,
    m: UtcMonth,
    x: &Expected,
    ledger: &[domain::LedgerEntry],
    ctx: &str,
) {
    let days = format!("from={}&to={}", UtcDay::of(m.start()), UtcDay::of(domain::Timestamp(m.end().millis() - 1)));
    let reply = server.get(&format!("/api/v1/ledger/export?{days}"), Some(key)).await;
    let rows =
        csv_rows(&reply, &["id", "created_at", "kind", "amount_usd", "balance_after_usd", "task_id", "note"], ctx);
    let month_ids: Vec<String> =
        ledger.iter().filter(|e| (m.start()..m.end()).contains(&e.created_at)).map(|e| e.id.to_string()).collect();
    assert_eq!(
        rows.iter().map(|r| r["id"].clone()).collect::<Vec<_>>(),
        month_ids,
        "{ctx}: the month's entries, in order"
    );
    let sum: i64 = rows.iter().map(|r| usd_text(&r["amount_usd"], ctx)).sum();
    assert_eq!(sum, x.closing - x.opening, "{ctx}: the ledger export sums to closing − opening");
    for (kind, (count, amount)) in &x.credits {
        let of_kind: Vec<_> = rows.iter().filter(|r| &r["kind"] == kind).collect();
        let total: i64 = of_kind.iter().map(|r| usd_text(&r["amount_usd"], ctx)).sum();
        assert_eq!((of_kind.len() as i64, total), (*count, *amount), "{ctx}: {kind} rows sum to its credit line");
    }
    let reply = server.get(&format!("/api/v1/usage/export?{days}"), Some(key)).await;
    let columns = [
        "task_id",
        "created_at",
        "ended_at",
        "model",
        "kind",
        "status",
        "billing_status",
        "held_usd",
        "amount_usd",
        "usage",
    ];
    let rows = csv_rows(&reply, &columns, ctx);
    let mut charges: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut refunds = (0, 0);
    for r in &rows {
        match r["billing_status"].as_str() {
            "settled" => {
                let line = charges.entry(r["model"].clone()).or_default();
                *line = (line.0 + 1, line.1 + usd_text(&r["amount_usd"], ctx));
            }
            "refunded" => refunds = (refunds.0 + 1, refunds.1 + usd_text(&r["held_usd"], ctx)),
            other => panic!("{ctx}: billing status {other}"),
        }
    }
    assert_eq!((charges, refunds), (x.charges.clone(), x.refunds), "{ctx}: the usage export sums to the statement");
}

/// The user's line of the gateway's revenue of `m` (other users share the database): `(calls,
/// amount)`, zeros when it has none.
async fn revenue_line(server: &Server, admin: &str, user: &str, m: UtcMonth, ctx: &str) -> (i64, i64) {
    let reply = server.get(&format!("/api/v1/admin/revenue?month={m}"), Some(admin)).await;
    assert_eq!(reply.status, 200, "{ctx}: revenue: {}", reply.json);
    let users = reply.json["charges"]["by_user"].as_array().cloned().unwrap_or_default();
    let line = users.iter().find(|l| l["user_id"] == user);
    line.map_or((0, 0), |l| (l["calls"].as_i64().unwrap_or(-1), micros(&l["amount"], ctx)))
}

/// Writes `events` (and a first top-up) for a new user, then checks every month of [`MONTHS`].
async fn one_history(server: &Server, admin: &str, events: &[Event]) {
    let user = server.user("0").await;
    let key = server.key(&user.id, &[Scope::OverviewRead]).await.secret;
    let history = History::new(server, &user.id).await;
    let mut all = vec![Event::Credit { at: window().0, kind: LedgerKind::Topup, micros: 1_000_000_000 }];
    all.extend_from_slice(events);
    // Every movement in time order (a call's end after its hold, whatever ties).
    let mut moves: Vec<(i64, usize, bool)> = Vec::new();
    for (i, ev) in all.iter().enumerate() {
        match ev {
            Event::Credit { at, .. } | Event::Call { at, end: None, .. } => moves.push((*at, i, false)),
            Event::Call { at, end: Some((t, _)), .. } => moves.extend([(*at, i, false), (*t, i, true)]),
        }
    }
    moves.sort_by_key(|&(at, _, end)| (at, end));
    let mut tasks: BTreeMap<usize, TaskId> = BTreeMap::new();
    for (at, i, is_end) in moves {
        match (&all[i], is_end) {
            (Event::Credit { kind, micros, .. }, _) => history.credit(at, *kind, *micros).await,
            (Event::Call { model, hold, .. }, false) => {
                tasks.insert(i, history.open(at, MODELS[*model], *hold).await);
            }
            (Event::Call { hold, end: Some((_, charge)), .. }, true) => {
                history.end(at, &tasks[&i], *hold, *charge).await;
            }
            (Event::Call { end: None, .. }, true) => unreachable!("an end without one"),
        }
    }
    let ledger = history.entries().await;
    for m in MONTHS.map(month) {
        let ctx = format!("{}: {m} of {all:?}", server.label);
        let reply = server.get(&format!("/api/v1/statements/{m}"), Some(&key)).await;
        assert_eq!(reply.status, 200, "{ctx}: {}", reply.json);
        assert_eq!(
            (reply.json["month"].as_str(), reply.json["complete"].as_bool()),
            (Some(m.to_string().as_str()), Some(true)),
            "{ctx}"
        );
        let x = read_statement(&reply.json, &ctx);
        assert_eq!(x, expected(&all, m), "{ctx}: the statement is the history's");
        // Closing is the ledger's balance at the month's last instant: the sum of the entries
        // before its end, and the balance after the last of them.
        let before: Vec<_> = ledger.iter().filter(|e| e.created_at < m.end()).collect();
        assert_eq!(x.closing, before.iter().map(|e| e.amount.micros()).sum::<i64>(), "{ctx}: Σ ledger before the end");
        assert_eq!(x.closing, before.last().map_or(0, |e| e.balance_after.micros()), "{ctx}: the balance after");
        check_exports(server, &key, m, &x, &ledger, &ctx).await;
        let charged = (x.charges.values().map(|l| l.0).sum(), x.charges.values().map(|l| l.1).sum());
        assert_eq!(revenue_line(server, admin, user.id.as_str(), m, &ctx).await, charged, "{ctx}: the revenue's line");
    }
    history.close().await;
}

#[test]
fn random_month_histories_reconcile_to_the_micro_usd() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    for db in databases() {
        let server = runtime.block_on(Server::start(&db));
        let (_, admin) = runtime.block_on(server.admin(&[Scope::Admin]));
        let mut runner = TestRunner::new(Config { cases: 64, failure_persistence: None, ..Config::default() });
        let outcome = runner.run(&proptest::collection::vec(event(), 1..40), |events| {
            runtime.block_on(one_history(&server, &admin, &events));
            Ok(())
        });
        if let Err(e) = outcome {
            panic!("{}: {e}", server.label);
        }
        runtime.block_on(server.stop());
    }
}

fn chat(fault: bool) -> Value {
    let messages = json!([{"role": "user", "content": common::unique("Hello ")}]);
    let mut body = json!({"model": MODELS[1], "messages": messages, "max_tokens": 64});
    if fault {
        body["sim_fault"] = json!("status_500");
    }
    body
}

#[tokio::test]
async fn real_calls_of_this_month_reconcile_with_their_exports_and_the_revenue() {
    for db in databases() {
        let env = Env::new(&db, "10", Duration::from_secs(5), &[Scope::LanguageCreate, Scope::OverviewRead]).await;
        let (_, admin) = env.server.admin(&[Scope::Admin]).await;
        let mut charged = 0;
        for fault in [false, false, true] {
            let reply = env.post("/api/v1/chat/completions", &chat(fault)).await;
            if fault {
                assert_eq!(reply.status, 502, "{}: {}", env.ctx("a failed call"), reply.json);
            } else {
                assert_eq!(reply.status, 200, "{}: {}", env.ctx("a call"), reply.json);
                charged += micros(&reply.json["svc"]["billing"]["actual_amount"], &env.ctx("charge"));
            }
        }
        let now = UtcMonth::of(SystemClock.now());
        let ctx = env.ctx(&format!("the statement of {now}"));
        let reply = env.server.get(&format!("/api/v1/statements/{now}"), Some(&env.key)).await;
        assert_eq!((reply.status, reply.json["complete"].as_bool()), (200, Some(false)), "{ctx}: {}", reply.json);
        let x = read_statement(&reply.json, &ctx);
        let expected = Expected {
            opening: 0,
            credits: BTreeMap::from([("topup".to_owned(), (1, 10_000_000))]),
            charges: BTreeMap::from([(MODELS[1].to_owned(), (2, charged))]),
            refunds: (1, x.refunds.1),
            held_at_start: 0,
            held_at_end: 0,
            closing: env.balance().await.micros(),
        };
        assert_eq!(x, expected, "{ctx}: two charges, one refund, nothing held, the balance now");
        assert!(x.refunds.1 > 0, "{ctx}: the failed call's hold came back");
        let history = History::new(&env.server, &env.user.id).await;
        check_exports(&env.server, &env.key, now, &x, &history.entries().await, &ctx).await;
        history.close().await;
        let revenue = env.server.get(&format!("/api/v1/admin/revenue?month={now}"), Some(&admin)).await;
        assert_eq!(revenue.status, 200, "{ctx}: {}", revenue.json);
        let theirs =
            json!({"user_id": env.user.id.as_str(), "calls": 2, "amount": UsdAmount::from_micros(charged).to_string()});
        assert_eq!(revenue.json["charges"]["by_user"], json!([theirs]), "{ctx}: the revenue by user");
        assert_eq!(revenue.json["refunds"]["calls"], 1, "{ctx}: {}", revenue.json);
        assert_eq!(micros(&revenue.json["charges"]["total"], &ctx), charged, "{ctx}: the revenue's charges");
        env.server.stop().await;
    }
}

/// `path` answers 400 `invalid_request` with the envelope.
async fn refused(server: &Server, path: &str, key: &str) {
    let reply = server.get(path, Some(key)).await;
    assert_eq!(reply.status, 400, "{}: {path}: {}", server.label, String::from_utf8_lossy(&reply.raw));
    assert_envelope(&reply.json, path);
    assert_eq!(reply.json["error"]["code"], "invalid_request", "{path}");
}

#[tokio::test]
async fn months_and_export_ranges_are_checked_at_their_edges() {
    for db in databases() {
        let server = Server::start(&db).await;
        let user = server.user("1").await;
        let key = server.key(&user.id, &[Scope::OverviewRead]).await.secret;
        let unscoped = server.key(&user.id, &[Scope::ModelsRead]).await.secret;
        let now = UtcMonth::of(SystemClock.now());
        let label = server.label;
        // The month in progress is the latest with a statement; one before the account is all zeros.
        for m in [now.to_string(), "1970-01".to_owned(), "2026-01".to_owned()] {
            let reply = server.get(&format!("/api/v1/statements/{m}"), Some(&key)).await;
            assert_eq!(reply.status, 200, "{label}: {m}: {}", reply.json);
        }
        let zeros = server.get("/api/v1/statements/1970-01", Some(&key)).await.json;
        let x = read_statement(&zeros, label);
        assert_eq!(x, Expected::default(), "{label}: a month before the account: {zeros}");
        for m in [
            now.next().to_string(),
            "9999-12".into(),
            "2026-13".into(),
            "2026-00".into(),
            "2026-1".into(),
            "26-11".into(),
            "2026-11-01".into(),
            "2026_11".into(),
            "latest".into(),
        ] {
            refused(&server, &format!("/api/v1/statements/{m}"), &key).await;
        }
        // Export ranges: 366 days at most (both ends included), from ≤ to, real days, no other parameter.
        let today = UtcDay::of(SystemClock.now());
        let days = |from: i64, to: i64| format!("from={}&to={}", UtcDay(today.0 - from), UtcDay(today.0 - to));
        for export in ["ledger", "usage"] {
            for ok in [days(365, 0), days(0, 0), String::new(), format!("to={today}")] {
                let reply = server.get(&format!("/api/v1/{export}/export?{ok}"), Some(&key)).await;
                assert_eq!(reply.status, 200, "{label}: {export} {ok}: {}", String::from_utf8_lossy(&reply.raw));
            }
            for bad in [
                days(366, 0),
                days(0, 1),
                "from=2026-02-30".into(),
                "to=2026-11".into(),
                "from=2026-01-01&from=2026-01-02".into(),
                "month=2026-01".into(),
            ] {
                refused(&server, &format!("/api/v1/{export}/export?{bad}"), &key).await;
            }
            let reply = server.get(&format!("/api/v1/{export}/export"), Some(&unscoped)).await;
            assert_eq!(reply.status, 401, "{label}: {export} without overview:read");
        }
        let reply = server.get(&format!("/api/v1/statements/{now}"), Some(&unscoped)).await;
        assert_eq!(reply.status, 401, "{label}: a statement without overview:read");
        // The revenue is the operators'.
        let (_, admin) = server.admin(&[Scope::Admin]).await;
        assert_eq!(server.get("/api/v1/admin/revenue", Some(&key)).await.status, 401, "{label}: a customer's key");
        let reply = server.get("/api/v1/admin/revenue", Some(&admin)).await;
        assert_eq!(
            (reply.status, reply.json["month"].as_str()),
            (200, Some(now.to_string().as_str())),
            "{label}: {}",
            reply.json
        );
        for bad in [format!("month={}", now.next()), "month=2026-13".into(), "user=x".into()] {
            refused(&server, &format!("/api/v1/admin/revenue?{bad}"), &admin).await;
        }
        server.stop().await;
    }
}

/// A server, a user with an `overview:read` key, and a history store writing that user's ledger.
async fn export_setting(db: &common::Db) -> (Server, String, History) {
    let server = Server::start(db).await;
    let user = server.user("0").await;
    let key = server.key(&user.id, &[Scope::OverviewRead]).await.secret;
    let history = History::new(&server, &user.id).await;
    (server, key, history)
}

#[tokio::test]
async fn an_export_of_more_rows_than_a_page_comes_whole_and_in_order() {
    for db in databases() {
        let (server, key, history) = export_setting(&db).await;
        // 2,500 entries sharing a few instants (the writer batches what arrives together), so that
        // pages end inside a run of equal times; and one entry on each side of the day.
        let day = month("2026-03").start().millis() + 9 * DAY_MS;
        history.credit(day - 1, LedgerKind::Topup, 7).await;
        for at in [day, day + 1, day + 2] {
            history.credits_at_once(at, 834, 1).await;
        }
        history.credit(day + DAY_MS, LedgerKind::Topup, 7).await;
        let ledger = history.entries().await;
        let inside: Vec<String> = ledger.iter().filter(|e| e.amount.micros() == 1).map(|e| e.id.to_string()).collect();
        assert_eq!(inside.len(), 2_502, "{}", server.label);
        let d = UtcDay::of(domain::Timestamp(day));
        let reply = server.get(&format!("/api/v1/ledger/export?from={d}&to={d}"), Some(&key)).await;
        let rows = csv_rows(
            &reply,
            &["id", "created_at", "kind", "amount_usd", "balance_after_usd", "task_id", "note"],
            server.label,
        );
        assert_eq!(
            rows.iter().map(|r| r["id"].clone()).collect::<Vec<_>>(),
            inside,
            "{}: every row once, in order",
            server.label
        );
        history.close().await;
        server.stop().await;
    }
}

/// A store failure after the answer's head (a ledger row the store cannot read, on the export's
/// second page) cuts the body: the client gets at most the first page and then an error, never a
/// file that ends cleanly and looks whole.
#[tokio::test]
async fn an_export_cut_by_a_store_failure_never_looks_whole() {
    use http_body_util::BodyExt;
    for db in databases() {
        let (server, key, history) = export_setting(&db).await;
        let day = month("2026-03").start().millis() + 9 * DAY_MS;
        history.credits_at_once(day, 1_500, 1).await;
        let ledger = history.entries().await;
        let broken = ledger.iter().filter(|e| e.amount.micros() == 1).nth(1_200).expect("1,500 entries").id;
        let sql = format!("UPDATE ledger_entries SET kind = $1 WHERE id = {broken}");
        assert_eq!(
            testkit::books::execute_under_the_store(&server.url, &sql, &["not-a-kind"]).await,
            1,
            "{}",
            server.label
        );

        let d = UtcDay::of(domain::Timestamp(day));
        let path = format!("/api/v1/ledger/export?from={d}&to={d}");
        let (parts, mut body, _conn) =
            server.open_with_body(http::Method::GET, &path, Some(&key), "text/plain", &[], b"").await;
        assert_eq!(parts.status, 200, "{}: the head goes out with the first page", server.label);
        let mut got = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match body.frame().await {
                    Some(Ok(frame)) => got.extend_from_slice(frame.data_ref().map_or(&[][..], |b| &b[..])),
                    Some(Err(e)) => return Err(e.to_string()),
                    None => return Ok(()),
                }
            }
        })
        .await
        .expect("the body ends or breaks within 10 s");
        assert!(ended.is_err(), "{}: the body ended cleanly after a store failure", server.label);
        // What reached the client before the cut: at most the header and the first page (a reset
        // connection may take some of it with it, so no more than that is asserted).
        let text = String::from_utf8_lossy(&got);
        let lines = text.split("\r\n").filter(|l| !l.is_empty()).count();
        let most = 1 + usize::try_from(service::EXPORT_PAGE_ROWS).expect("page rows");
        assert!(lines <= most, "{}: {lines} lines arrived before the cut", server.label);
        assert!(
            text.is_empty() || text.starts_with("id,created_at,"),
            "{}: {}",
            server.label,
            &text[..40.min(text.len())]
        );
        history.close().await;
        server.stop().await;
    }
}
