//! End-to-end tests of the `gateway` binary: the operator contract of `migrate` and `admin …`
//! (one JSON object on stdout; one line on stderr and a non-zero exit on error) and `serve`
//! (demo key on first start, SIGTERM stops it cleanly), each over a fresh SQLite file.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use common::{
    COMMAND_TIMEOUT, Sandbox, address_in, drain, http_get, lines_until, spawn_serve, stdout_lines, terminate,
};
use serde_json::{Value, json};

/// Creates a user with `balance` and returns its id.
fn create_user(sandbox: &Sandbox, balance: &str) -> String {
    let user = sandbox
        .run(&["admin", "user", "create", "--name", "A", "--email", "a@example.com", "--balance", balance])
        .json();
    user["id"].as_str().expect("user id").to_owned()
}

/// `whsec_` and 64 lowercase hex digits (32 random bytes).
fn assert_webhook_secret(secret: &str) {
    let digits = secret.strip_prefix("whsec_").unwrap_or_else(|| panic!("{secret}: no whsec_ prefix"));
    assert_eq!(digits.len(), 64, "{secret}");
    assert!(digits.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')), "{secret}");
}

const RATES: &str = r#"{
  "input_tokens": {"amountMicrousd": "1000000", "denominator": "1000000", "unit": "token"},
  "output_tokens": {"amountMicrousd": 4000000, "denominator": 1000000, "unit": "token"}
}"#;

#[test]
fn admin_commands_print_one_json_object() {
    let sandbox = Sandbox::new();
    let migrated = sandbox.run(&["migrate"]).json();
    assert!(migrated["migrations_applied"].as_u64().is_some_and(|n| n >= 1), "fresh database: {migrated}");
    assert_eq!(sandbox.run(&["migrate"]).json()["migrations_applied"], 0, "second migrate applies nothing");

    let user = sandbox
        .run(&["admin", "user", "create", "--name", "A", "--email", "a@example.com", "--balance", "12.5"])
        .json();
    assert_eq!(user["balance_usd"], "12.500000", "{user}");
    assert_eq!(user["name"], "A");
    assert_eq!(user["email"], "a@example.com");
    assert_eq!(user["role"], "user");
    let user_id = user["id"].as_str().expect("id").to_owned();
    assert!(user_id.starts_with("usr_"), "{user_id}");
    let webhook_secret = user["webhook_secret"].as_str().expect("the webhook secret is printed").to_owned();
    assert_webhook_secret(&webhook_secret);

    let listed = sandbox.run(&["admin", "user", "list", "--search", "a@example"]).json();
    let ids: Vec<&str> = listed["data"].as_array().expect("data").iter().filter_map(|u| u["id"].as_str()).collect();
    assert_eq!(ids, [user_id.as_str()], "user list finds the user by email: {listed}");
    let rotated = sandbox.run(&["admin", "user", "rotate-webhook-secret", "--user", &user_id]).json();
    assert_eq!(rotated.as_object().map(|o| o.len()), Some(2), "{rotated}");
    assert_eq!(rotated["user_id"], user_id.as_str(), "{rotated}");
    let new_secret = rotated["webhook_secret"].as_str().expect("the new secret is printed");
    assert_webhook_secret(new_secret);
    assert_ne!(new_secret, webhook_secret, "rotation gives a new secret");
    let other = sandbox.run(&["admin", "user", "create", "--name", "B", "--email", "b@example.com"]).json();
    assert_ne!(other["webhook_secret"], user["webhook_secret"], "every user has its own secret");

    let key = sandbox.run(&["admin", "key", "create", "--user", &user_id, "--scopes", "models:read,task:read"]).json();
    let secret = key["key"].as_str().expect("the secret is printed once as key");
    assert!(secret.starts_with("sk-gw-") && secret.len() >= "sk-gw-".len() + 43, "{secret}");
    assert_eq!(key["user_id"], user_id.as_str());
    assert_eq!(key["scopes"], json!(["models:read", "task:read"]));
    let key_id = key["id"].as_str().expect("key id").to_owned();
    assert!(key_id.starts_with("key_"), "{key_id}");
    assert!(!key_id.contains(secret) && !secret.contains(&key_id), "the id is not the secret");

    let all = sandbox.run(&["admin", "key", "create", "--user", &user_id, "--all-scopes", "--name", "ops"]).json();
    assert!(all["key"].as_str().is_some_and(|k| k.starts_with("sk-gw-")), "{all}");
    assert_ne!(all["key"], key["key"], "every key has its own secret");
    let scopes: Vec<&str> = all["scopes"].as_array().expect("scopes").iter().filter_map(Value::as_str).collect();
    for scope in [
        "models:read",
        "task:read",
        "task:write",
        "video:create",
        "image:create",
        "language:create",
        "audio:create",
        "overview:read",
    ] {
        assert!(scopes.contains(&scope), "--all-scopes lacks {scope}: {scopes:?}");
    }

    let revoked = sandbox.run(&["admin", "key", "revoke", "--key", &key_id]).json();
    assert_eq!(revoked["id"], key_id.as_str(), "{revoked}");
    assert_eq!(revoked["revoked"], true, "{revoked}");
    assert_eq!(revoked["refused_everywhere_within_ms"], 1000, "how soon every replica refuses it: {revoked}");

    let topup =
        sandbox.run(&["admin", "topup", "--user", &user_id, "--amount", "1.000001", "--note", "invoice 7"]).json();
    assert_eq!(topup["amount_usd"], "1.000001", "{topup}");
    assert_eq!(topup["balance_after"], "13.500001", "{topup}");
    assert_eq!(topup["kind"], "topup", "{topup}");

    // The month's statement: the same object as `GET /api/v1/statements/{month}`.
    let month = domain::UtcMonth::of(domain::Clock::now(&domain::SystemClock)).to_string();
    let statement = sandbox.run(&["admin", "statement", "--user", &user_id, "--month", &month]).json();
    assert_eq!(statement["object"], "statement", "{statement}");
    assert_eq!(statement["user_id"], user_id.as_str(), "{statement}");
    assert_eq!(statement["month"], month.as_str(), "{statement}");
    assert_eq!(statement["opening_balance"], "0.000000", "a user made this month: {statement}");
    assert_eq!(statement["credits"]["total"], "13.500001", "{statement}");
    assert_eq!(statement["closing_balance"], "13.500001", "the balance after the top-up: {statement}");

    let model = sandbox.run(&["admin", "model", "set", "--model", "LangA-V4-pro", "--enabled", "false"]).json();
    assert_eq!(model["model"], "LangA-V4-pro", "{model}");
    assert_eq!(model["enabled"], false, "{model}");
    for limit in ["1", "100000"] {
        let model =
            sandbox.run(&["admin", "model", "set", "--model", "LangA-V4-pro", "--concurrency-limit", limit]).json();
        assert_eq!(model["concurrency_limit"].to_string(), limit, "{model}");
        assert_eq!(model["enabled"], false, "changing the cap keeps the switch: {model}");
    }

    let rates = sandbox.file("rates.json", RATES);
    let price = sandbox.run(&["admin", "price", "set", "--model", "LangC-5.2", "--rates", &rates]).json();
    assert_eq!(price["model"], "LangC-5.2", "{price}");
    assert_eq!(price["pricing_version"], 1, "first price of an unpriced model: {price}");
    assert_eq!(price["pricing_version_id"], "LangC-5.2@v1", "{price}");
    assert_eq!(
        price["pricing"],
        json!({
            "input_tokens": {"amountMicrousd": "1000000", "denominator": "1000000", "unit": "token"},
            "output_tokens": {"amountMicrousd": "4000000", "denominator": "1000000", "unit": "token"},
        }),
        "{price}"
    );
    let again = sandbox.run(&["admin", "price", "set", "--model", "LangC-5.2", "--rates", &rates]).json();
    assert_eq!(again["pricing_version"], 2, "a price change adds a version: {again}");

    assert_eq!(sandbox.run(&["admin", "maintenance", "on"]).json(), json!({"maintenance": true}));
    assert_eq!(sandbox.run(&["admin", "maintenance", "off"]).json(), json!({"maintenance": false}));

    let disabled = sandbox.run(&["admin", "user", "set", "--user", &user_id, "--disabled", "true"]).json();
    assert_eq!(disabled["disabled"], true, "{disabled}");
    let enabled = sandbox
        .run(&["admin", "user", "set", "--user", &user_id, "--disabled", "false", "--concurrency-limit", "3"])
        .json();
    assert_eq!((&enabled["disabled"], &enabled["concurrency_limit"]), (&json!(false), &json!(3)), "{enabled}");

    // Every change above is in the audit trail, newest first, made by the command line.
    let audit = sandbox.run(&["admin", "audit", "--page-size", "100"]).json();
    let entries = audit["data"].as_array().expect("data");
    let actions: Vec<&str> = entries.iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(
        actions,
        [
            "user.change",
            "user.change",
            "maintenance",
            "maintenance",
            "model.price",
            "model.price",
            "model.set",
            "model.set",
            "model.set",
            "user.topup",
            "key.revoke",
            "key.create",
            "key.create",
            "user.create",
            "user.webhook_secret",
            "user.create",
        ],
        "{audit}"
    );
    assert!(entries.iter().all(|e| e["actor"] == "cli" && e["actor_key"].is_null()), "{audit}");
    assert_eq!(entries[9]["after"]["balance_usd"], "13.500001", "the top-up's state after: {audit}");
    assert!(!audit.to_string().contains("sk-gw-") && !audit.to_string().contains("whsec_"), "no secret: {audit}");
}

#[test]
fn key_limits_are_set_at_creation_and_changed_later() {
    let sandbox = Sandbox::new();
    sandbox.run(&["migrate"]).json();
    let user = create_user(&sandbox, "1");
    let key = sandbox
        .run(&[
            "admin",
            "key",
            "create",
            "--user",
            &user,
            "--scopes",
            "language:create",
            "--expires-at",
            "2099-12-31T23:59:59+01:00",
            "--models",
            "LangB-2.0-pro, video",
        ])
        .json();
    assert!(key["key"].as_str().is_some_and(|k| k.starts_with("sk-gw-")), "{key}");
    assert_eq!(key["expires_at"], "2099-12-31T22:59:59.000Z", "stored in UTC: {key}");
    assert_eq!(key["models"], json!(["LangB-2.0-pro", "video"]), "{key}");
    let id = key["id"].as_str().expect("key id").to_owned();

    let cleared = sandbox.run(&["admin", "key", "set", "--key", &id, "--models", "none"]).json();
    assert_eq!(cleared["id"], id.as_str(), "{cleared}");
    assert_eq!(cleared["models"], Value::Null, "the allow-list is gone: {cleared}");
    assert_eq!(cleared["expires_at"], "2099-12-31T22:59:59.000Z", "the expiry stays: {cleared}");
    assert!(cleared.get("key").is_none(), "set never prints a secret: {cleared}");

    let changed =
        sandbox.run(&["admin", "key", "set", "--key", &id, "--expires-at", "none", "--models", "image,audio"]).json();
    assert_eq!((&changed["expires_at"], &changed["models"]), (&Value::Null, &json!(["image", "audio"])), "{changed}");
    let later = sandbox.run(&["admin", "key", "set", "--key", &id, "--expires-at", "2100-01-01T00:00:00Z"]).json();
    assert_eq!(
        (&later["expires_at"], &later["models"]),
        (&json!("2100-01-01T00:00:00.000Z"), &json!(["image", "audio"]))
    );

    let bad: [(Vec<&str>, &str); 9] = [
        (vec!["create", "--user", &user, "--all-scopes", "--expires-at", "yesterday"], "RFC 3339"),
        (vec!["create", "--user", &user, "--all-scopes", "--expires-at", "2020-01-01T00:00:00Z"], "not in the future"),
        (
            vec!["create", "--user", &user, "--all-scopes", "--models", "NoSuchModel"],
            "neither a known model nor a kind",
        ),
        (vec!["create", "--user", &user, "--all-scopes", "--models", "videos"], "neither a known model nor a kind"),
        (vec!["create", "--user", &user, "--all-scopes", "--models", "video,,image"], "--models"),
        (vec!["set", "--key", &id, "--expires-at", "yesterday"], "RFC 3339"),
        (vec!["set", "--key", &id, "--models", "LangB-2.0-pro,nope"], "\"nope\" is neither"),
        (vec!["set", "--key", &id], "--expires-at, --models, --budget-usd, --rpm, --tpm and/or --allow-ip"),
        (vec!["set", "--key", "key_does_not_exist", "--models", "video"], "not found"),
    ];
    for (args, says) in bad {
        let args: Vec<&str> = ["admin", "key"].into_iter().chain(args).collect();
        let failed = sandbox.run(&args);
        failed.assert_one_line_error();
        assert!(failed.stderr.contains(says), "gateway {args:?} should say {says:?}: {}", failed.stderr);
    }
    let listed = sandbox.run(&["admin", "key", "list", "--user", &user]).json();
    assert_eq!(listed["user_id"], user.as_str(), "{listed}");
    let keys = listed["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 1, "refused creations stored no key: {listed}");
    assert_eq!(keys[0]["id"], id.as_str(), "{listed}");
    assert_eq!(keys[0]["expires_at"], "2100-01-01T00:00:00.000Z", "refused changes stored nothing: {listed}");
    assert_eq!(keys[0]["models"], json!(["image", "audio"]), "{listed}");
    let secret = key["key"].as_str().expect("secret");
    assert!(keys[0].get("key").is_none() && !listed.to_string().contains(secret), "no secret: {listed}");
    sandbox.run(&["admin", "key", "list", "--user", "usr_does_not_exist"]).assert_one_line_error();
}

#[test]
fn key_budgets_are_set_changed_cleared_and_listed() {
    let sandbox = Sandbox::new();
    sandbox.run(&["migrate"]).json();
    let user = create_user(&sandbox, "1");
    let create = ["admin", "key", "create", "--user", &user, "--all-scopes", "--budget-usd", "0.05"];
    let key = sandbox.run(&create).json();
    let budget = &key["budget"];
    assert_eq!((&budget["limit_usd"], &budget["period"]), (&json!("0.050000"), &json!("total")), "{key}");
    assert_eq!((&budget["spent_usd"], &budget["remaining_usd"]), (&json!("0.000000"), &json!("0.050000")), "{key}");
    assert_eq!(budget["period_start"], "1970-01-01T00:00:00.000Z", "a total budget never starts over: {key}");
    let id = key["id"].as_str().expect("key id").to_owned();

    let monthly =
        sandbox.run(&["admin", "key", "set", "--key", &id, "--budget-usd", "12.5", "--budget-period", "month"]);
    let monthly = monthly.json();
    assert_eq!((&monthly["budget"]["limit_usd"], &monthly["budget"]["period"]), (&json!("12.500000"), &json!("month")));
    assert!(
        monthly["budget"]["period_start"].as_str().is_some_and(|t| t.ends_with("-01T00:00:00.000Z")),
        "a month starts on its first day: {monthly}"
    );
    let cleared = sandbox.run(&["admin", "key", "set", "--key", &id, "--budget-usd", "none"]).json();
    assert_eq!(cleared["budget"], Value::Null, "{cleared}");

    let bad: [(Vec<&str>, &str); 5] = [
        (vec!["create", "--user", &user, "--all-scopes", "--budget-usd", "-1"], "below zero"),
        (vec!["create", "--user", &user, "--all-scopes", "--budget-usd", "1.0000001"], "--budget-usd"),
        (
            vec!["create", "--user", &user, "--all-scopes", "--budget-usd", "1", "--budget-period", "year"],
            "--budget-period",
        ),
        (vec!["create", "--user", &user, "--all-scopes", "--budget-period", "day"], "--budget-usd"),
        (vec!["set", "--key", &id, "--budget-usd", "none", "--budget-period", "day"], "--budget-usd"),
    ];
    for (args, says) in bad {
        let args: Vec<&str> = ["admin", "key"].into_iter().chain(args).collect();
        let failed = sandbox.run(&args);
        failed.assert_one_line_error();
        assert!(failed.stderr.contains(says), "gateway {args:?} should say {says:?}: {}", failed.stderr);
    }
    let listed = sandbox.run(&["admin", "key", "list", "--user", &user]).json();
    let keys = listed["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 1, "refused creations stored no key: {listed}");
    assert_eq!((&keys[0]["budget"], &keys[0]["spent_usd"]), (&Value::Null, &json!("0.000000")), "{listed}");
}

#[test]
fn rate_limits_are_set_at_creation_changed_and_cleared() {
    let sandbox = Sandbox::new();
    sandbox.run(&["migrate"]).json();
    let user = create_user(&sandbox, "1");
    let create = ["admin", "key", "create", "--user", &user, "--all-scopes", "--rpm", "60", "--tpm", "100000"];
    let key = sandbox.run(&create).json();
    assert_eq!((&key["rpm"], &key["tpm"]), (&json!(60), &json!(100_000)), "{key}");
    let id = key["id"].as_str().expect("key id").to_owned();
    let plain = sandbox.run(&["admin", "key", "create", "--user", &user, "--all-scopes"]).json();
    assert_eq!((&plain["rpm"], &plain["tpm"]), (&Value::Null, &Value::Null), "no limits by default: {plain}");

    let cleared = sandbox.run(&["admin", "key", "set", "--key", &id, "--rpm", "none"]).json();
    assert_eq!((&cleared["rpm"], &cleared["tpm"]), (&Value::Null, &json!(100_000)), "only rpm cleared: {cleared}");
    let changed = sandbox.run(&["admin", "key", "set", "--key", &id, "--rpm", "5", "--tpm", "none"]).json();
    assert_eq!((&changed["rpm"], &changed["tpm"]), (&json!(5), &Value::Null), "{changed}");

    let bad: [(Vec<&str>, &str); 5] = [
        (vec!["create", "--user", &user, "--all-scopes", "--rpm", "0"], "--rpm: a rate limit is a positive integer"),
        (vec!["create", "--user", &user, "--all-scopes", "--tpm=-5"], "--tpm"),
        (vec!["create", "--user", &user, "--all-scopes", "--tpm", "1.5"], "--tpm"),
        (vec!["set", "--key", &id, "--rpm", "many"], "--rpm"),
        (vec!["set", "--key", &id, "--tpm", "4294967296"], "--tpm"),
    ];
    for (args, says) in bad {
        let args: Vec<&str> = ["admin", "key"].into_iter().chain(args).collect();
        let failed = sandbox.run(&args);
        failed.assert_one_line_error();
        assert!(failed.stderr.contains(says), "gateway {args:?} should say {says:?}: {}", failed.stderr);
    }
    let listed = sandbox.run(&["admin", "key", "list", "--user", &user]).json();
    let keys = listed["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 2, "refused creations stored no key: {listed}");
    let stored = keys.iter().find(|k| k["id"] == id.as_str()).expect("the limited key");
    assert_eq!((&stored["rpm"], &stored["tpm"]), (&json!(5), &Value::Null), "refused changes stored nothing: {listed}");
}

#[test]
fn key_address_lists_are_set_and_cleared() {
    let sandbox = Sandbox::new();
    sandbox.run(&["migrate"]).json();
    let user = create_user(&sandbox, "1");
    let key =
        sandbox.run(&["admin", "key", "create", "--user", &user, "--all-scopes", "--allow-ip", "10.1.2.3/8, ::1"]);
    let key = key.json();
    assert_eq!(key["allow_ips"], json!(["10.0.0.0/8", "::1/128"]), "{key}");
    let id = key["id"].as_str().expect("key id").to_owned();
    let cleared = sandbox.run(&["admin", "key", "set", "--key", &id, "--allow-ip", "none"]).json();
    assert_eq!(cleared["allow_ips"], Value::Null, "{cleared}");
    for bad in ["10.0.0.0/33", "lb.local", ""] {
        let failed = sandbox.run(&["admin", "key", "set", "--key", &id, "--allow-ip", bad]);
        failed.assert_one_line_error();
        assert!(failed.stderr.contains("--allow-ip"), "{bad:?}: {}", failed.stderr);
    }
}

#[test]
fn bad_input_fails_with_one_line_on_stderr() {
    let sandbox = Sandbox::new();
    sandbox.run(&["migrate"]).json();
    let user = create_user(&sandbox, "1");
    let good_rates = sandbox.file("good.json", RATES);
    let bad_rates = [
        ("empty.json", "{}"),
        ("not-json.json", "input_tokens = 1"),
        ("array.json", "[]"),
        ("negative.json", r#"{"input_tokens": {"amountMicrousd": "-1", "denominator": "1", "unit": "token"}}"#),
        ("float.json", r#"{"input_tokens": {"amountMicrousd": 1.5, "denominator": "1", "unit": "token"}}"#),
        ("zero-denominator.json", r#"{"input_tokens": {"amountMicrousd": "1", "denominator": "0", "unit": "token"}}"#),
        ("no-unit.json", r#"{"input_tokens": {"amountMicrousd": "1", "denominator": "1"}}"#),
        (
            "extra-field.json",
            r#"{"input_tokens": {"amountMicrousd": "1", "denominator": "1", "unit": "token", "x": 1}}"#,
        ),
    ];
    let mut cases: Vec<Vec<String>> = Vec::new();
    let mut case = |args: &[&str]| cases.push(args.iter().map(|a| (*a).to_owned()).collect());
    case(&["admin", "topup", "--user", "usr_does_not_exist", "--amount", "1"]);
    case(&["admin", "statement", "--user", "usr_does_not_exist", "--month", "2026-01"]);
    case(&["admin", "statement", "--user", &user, "--month", "2026-13"]);
    case(&["admin", "statement", "--user", &user, "--month", "9999-12"]);
    case(&["admin", "topup", "--user", &user, "--amount", "1.2345678"]);
    case(&["admin", "topup", "--user", &user, "--amount", "abc"]);
    case(&["admin", "topup", "--user", &user, "--amount", "-3"]);
    case(&["admin", "topup", "--user", &user, "--amount", "0"]);
    case(&["admin", "topup", "--user", &user, "--amount", ""]);
    case(&["admin", "key", "create", "--user", &user, "--scopes", "models:write"]);
    case(&["admin", "key", "create", "--user", &user, "--scopes", "models:read,nope"]);
    case(&["admin", "key", "create", "--user", &user, "--scopes", ","]);
    case(&["admin", "key", "create", "--user", "usr_does_not_exist", "--scopes", "models:read"]);
    case(&["admin", "key", "revoke", "--key", "key_does_not_exist"]);
    case(&["admin", "user", "create", "--name", "B", "--email", "not-an-email"]);
    case(&["admin", "user", "create", "--name", "B", "--email", "b@example.com", "--balance", "1.0000001"]);
    case(&["admin", "model", "set", "--model", "NoSuchModel", "--enabled", "false"]);
    case(&["admin", "model", "set", "--model", "LangA-V4-pro", "--concurrency-limit", "0"]);
    case(&["admin", "model", "set", "--model", "LangA-V4-pro", "--concurrency-limit", "100001"]);
    case(&["admin", "model", "set", "--model", "LangA-V4-pro"]);
    case(&["admin", "price", "set", "--model", "NoSuchModel", "--rates", &good_rates]);
    case(&["admin", "price", "set", "--model", "LangC-5.2", "--rates", "does-not-exist.json"]);
    for (name, text) in bad_rates {
        let path = sandbox.file(name, text);
        case(&["admin", "price", "set", "--model", "LangC-5.2", "--rates", &path]);
    }
    case(&["admin", "user", "rotate-webhook-secret", "--user", "usr_does_not_exist"]);
    case(&["admin", "user", "rotate-webhook-secret"]);
    case(&["admin", "maintenance", "maybe"]);
    case(&["admin", "no-such-command"]);
    for args in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        sandbox.run(&args).assert_one_line_error();
    }

    // Nothing above changed anything: the model keeps its cap and LangC-5.2 is still unpriced.
    let model = sandbox.run(&["admin", "model", "set", "--model", "LangA-V4-pro", "--enabled", "true"]).json();
    assert_eq!(model["concurrency_limit"], 1000, "{model}");
    let price = sandbox.run(&["admin", "price", "set", "--model", "LangC-5.2", "--rates", &good_rates]).json();
    assert_eq!(price["pricing_version"], 1, "refused rates files created no version: {price}");
    let topup = sandbox.run(&["admin", "topup", "--user", &user, "--amount", "1"]).json();
    assert_eq!(topup["balance_after"], "2.000000", "refused top-ups moved no money: {topup}");
}

#[test]
fn an_operator_command_away_from_the_gateways_folder_makes_no_database() {
    let sandbox = Sandbox::new();
    let mut cmd = sandbox.command(&["admin", "key", "list", "--user", "usr_x"]);
    cmd.env_remove("GATEWAY_DATABASE_URL");
    let out = cmd.output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("no gateway database here") && err.contains("GATEWAY_DATABASE_URL"), "{err}");
    assert!(!sandbox.dir.join("data").exists(), "no database was made");
}

#[test]
fn key_create_help_names_every_scope() {
    let sandbox = Sandbox::new();
    let help = sandbox.command(&["admin", "key", "create", "--help"]).output().expect("run --help");
    let text = String::from_utf8_lossy(&help.stdout);
    for scope in domain::Scope::ALL {
        assert!(text.contains(scope.as_str()), "{} is not in the help: {text}", scope.as_str());
    }
}

#[test]
fn model_aliases_are_set_listed_deleted_checked_and_audited() {
    let sandbox = Sandbox::new();
    let set =
        sandbox.run(&["admin", "alias", "set", "--name", "fast", "--models", "LangA-V4-pro,LangA-V4-flash"]).json();
    assert_eq!(set, json!({"name": "fast", "models": ["LangA-V4-pro", "LangA-V4-flash"]}));
    let replaced = sandbox.run(&["admin", "alias", "set", "--name", "fast", "--models", "LangA-V4-flash"]).json();
    assert_eq!(replaced["models"], json!(["LangA-V4-flash"]));
    let listed = sandbox.run(&["admin", "alias", "list"]).json();
    assert_eq!(listed, json!({"aliases": [{"name": "fast", "models": ["LangA-V4-flash"]}]}));
    for args in [
        &["admin", "alias", "set", "--name", "LangA-V4-pro", "--models", "LangA-V4-flash"][..],
        &["admin", "alias", "set", "--name", "mixed", "--models", "LangA-V4-flash,Vendor-Imagegen-4.5"],
        &["admin", "alias", "set", "--name", "ghost", "--models", "No-Such-Model"],
        &[
            "admin",
            "alias",
            "set",
            "--name",
            "five",
            "--models",
            "LangA-V4-pro,LangA-V4-flash,LangB-2.0-pro,LangB-2.0-lite,LangB-2.0-mini",
        ],
        &["admin", "alias", "set", "--name", "empty", "--models", ""],
        &["admin", "alias", "delete", "--name", "nothing"],
    ] {
        sandbox.run(args).assert_one_line_error();
    }
    assert_eq!(
        sandbox.run(&["admin", "alias", "delete", "--name", "fast"]).json(),
        json!({"name": "fast", "deleted": true})
    );
    assert_eq!(sandbox.run(&["admin", "alias", "list"]).json(), json!({"aliases": []}));
    let audit = sandbox.run(&["admin", "audit"]).json();
    let actions: Vec<&str> =
        audit["data"].as_array().expect("data").iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(actions, ["alias.delete", "alias.set", "alias.set"], "{audit}");
}

#[test]
fn adjustments_take_money_back_with_a_note_and_are_audited() {
    let sandbox = Sandbox::new();
    let user =
        sandbox.run(&["admin", "user", "create", "--name", "A", "--email", "a@example.com", "--balance", "5"]).json();
    let id = user["id"].as_str().expect("id").to_owned();
    let back = sandbox.run(&["admin", "adjust", "--user", &id, "--amount", "-7.5", "--note", "refund cs_1"]).json();
    assert_eq!(
        (&back["kind"], &back["amount_usd"], &back["balance_after"]),
        (&json!("adjustment"), &json!("-7.500000"), &json!("-2.500000")),
        "{back}"
    );
    for args in [
        &["admin", "adjust", "--user", &id, "--amount", "0", "--note", "x"][..],
        &["admin", "adjust", "--user", &id, "--amount", "1", "--note", " "],
        &["admin", "adjust", "--user", "usr_nobody", "--amount", "1", "--note", "x"],
    ] {
        sandbox.run(args).assert_one_line_error();
    }
    let audit = sandbox.run(&["admin", "audit"]).json();
    assert_eq!(audit["data"][0]["action"], json!("user.adjust"), "{audit}");
}

#[test]
fn vouchers_are_minted_listed_revoked_and_audited() {
    let sandbox = Sandbox::new();
    let minted =
        sandbox.run(&["admin", "voucher", "create", "--amount", "2.5", "--count", "3", "--note", "fair"]).json();
    let codes = minted["codes"].as_array().expect("codes");
    assert_eq!(codes.len(), 3, "{minted}");
    assert!(codes.iter().all(|c| c.as_str().is_some_and(|c| c.starts_with("GV-"))), "{minted}");
    assert_eq!((&minted["amount"], &minted["count"], &minted["note"]), (&json!("2.500000"), &json!(3), &json!("fair")));
    let batch = minted["batch_id"].as_str().expect("batch_id").to_owned();
    let listed = sandbox.run(&["admin", "voucher", "list"]).json();
    assert_eq!(listed["data"][0]["batch_id"], json!(batch), "{listed}");
    assert!(!listed.to_string().contains("GV-"), "a listing shows no code: {listed}");
    let revoked = sandbox.run(&["admin", "voucher", "revoke", "--batch", &batch]).json();
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    for args in [
        &["admin", "voucher", "create", "--amount", "0"][..],
        &["admin", "voucher", "create", "--amount", "-1"],
        &["admin", "voucher", "create", "--amount", "1", "--count", "0"],
        &["admin", "voucher", "create", "--amount", "1", "--expires-at", "2001-01-01T00:00:00Z"],
        &["admin", "voucher", "revoke", "--batch", "vb_nothing"],
    ] {
        sandbox.run(args).assert_one_line_error();
    }
    let audit = sandbox.run(&["admin", "audit"]).json();
    let actions: Vec<&str> =
        audit["data"].as_array().expect("data").iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(actions[..2], ["voucher.revoke", "voucher.create"], "{audit}");
    assert!(!audit.to_string().contains("GV-"), "no code in the audit trail");
}

#[test]
fn a_failing_first_command_on_a_fresh_database_prints_one_line() {
    // The very first command also migrates the database and loads the catalog; whatever it logs
    // about that must not break the one-line error contract.
    let sandbox = Sandbox::new();
    sandbox.run(&["admin", "topup", "--user", "usr_does_not_exist", "--amount", "1"]).assert_one_line_error();
}

#[test]
fn serve_prints_a_demo_key_serves_and_stops_on_sigterm() {
    let sandbox = Sandbox::new();
    let mut server = spawn_serve(&sandbox, &sandbox.dir.join("serve-1.err"));
    let rx = stdout_lines(&mut server.0);
    let lines = lines_until(&rx, |l| l.starts_with("Try:"), COMMAND_TIMEOUT);
    let try_line = lines.last().expect("the Try: line");
    // Try: curl -s http://ADDR/api/v1/models -H 'Authorization: Bearer KEY'
    let addr = address_in(try_line);
    let key = try_line
        .split("Bearer ")
        .nth(1)
        .map(|rest| rest.trim_end_matches('\''))
        .unwrap_or_else(|| panic!("no key in {try_line:?}"))
        .to_owned();
    assert!(key.starts_with("sk-gw-"), "demo key {key:?}");
    assert_ne!(addr, "127.0.0.1:0", "the real port is printed");
    assert!(lines.iter().any(|l| l.contains(&key) && l.contains("shown once")), "the key is announced: {lines:?}");
    let demo_user = lines
        .iter()
        .find_map(|l| l.strip_prefix("Demo user ").and_then(|rest| rest.split_whitespace().next()))
        .unwrap_or_else(|| panic!("the demo user's id is printed: {lines:?}"))
        .to_owned();

    let (status, models) = http_get(&addr, "/api/v1/models", Some(&key));
    assert_eq!(status, 200, "{models}");
    assert_eq!(models["data"].as_array().map(Vec::len), Some(15), "15 models: {models}");
    let (status, overview) = http_get(&addr, "/api/v1/overview", Some(&key));
    assert_eq!(status, 200, "the demo key has every scope: {overview}");
    assert_eq!(http_get(&addr, "/api/v1/models", None).0, 401, "no key, no models");

    // An admin command against the same database is seen by the running server.
    sandbox.run(&["admin", "model", "set", "--model", "LangA-V4-pro", "--enabled", "false"]).json();
    let (_, models) = http_get(&addr, "/api/v1/models", Some(&key));
    assert_eq!(models["data"].as_array().map(Vec::len), Some(14), "disabled by the operator: {models}");

    terminate(&mut server.0);
    let rest = drain(&rx);
    assert!(rest.iter().all(|l| !l.contains("sk-gw-")), "no secret printed at shutdown: {rest:?}");
    let printed: Vec<&String> = lines.iter().chain(&rest).collect();
    assert!(printed.iter().all(|l| !l.contains("whsec_")), "the demo user's webhook secret is not printed");
    let stderr = std::fs::read_to_string(sandbox.dir.join("serve-1.err")).unwrap_or_default();
    assert!(!stderr.contains("whsec_") && !stderr.contains("sk-gw-"), "no secret in the log");

    // Second start on the same database: users exist, so no demo key is printed.
    let mut server = spawn_serve(&sandbox, &sandbox.dir.join("serve-2.err"));
    let rx = stdout_lines(&mut server.0);
    let lines = lines_until(&rx, |l| l.contains("http://127.0.0.1:"), COMMAND_TIMEOUT);
    let addr = address_in(lines.last().expect("the address line"));
    let again = format!("gateway admin key create --user {demo_user} --all-scopes");
    assert!(lines.iter().any(|l| l.contains(&again)), "every start names the demo user and how to key it: {lines:?}");
    assert_eq!(http_get(&addr, "/healthz", None).0, 200, "second server is up at {addr}");
    assert_eq!(http_get(&addr, "/api/v1/models", Some(&key)).0, 200, "the demo key still works");
    terminate(&mut server.0);
    let all: Vec<String> = lines.into_iter().chain(drain(&rx)).collect();
    assert!(all.iter().all(|l| !l.contains("sk-gw-")), "a second start prints no key: {all:?}");
    let stderr = std::fs::read_to_string(sandbox.dir.join("serve-2.err")).unwrap_or_default();
    assert!(!stderr.contains("sk-gw-"), "no secret in the log");
}
