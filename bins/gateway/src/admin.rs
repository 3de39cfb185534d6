//! `gateway admin …`: each command prints exactly one JSON object on stdout.

use std::num::NonZeroU32;

use domain::{
    Actor, ApiKey, ApiKeyId, BudgetPeriod, IpAllowList, KeyBudget, KeyLimits, KeyLimitsChange, KeyRates,
    ModelAllowList, Scope, Timestamp, UsdAmount, UserId,
};
use serde_json::{Value, json};
use service::NewUserRequest;

use crate::cli::{Admin, AliasCmd, KeyCmd, ModelCmd, PriceCmd, TaskCmd, UpstreamCmd, UserCmd, VoucherCmd};
use crate::config::Config;
use crate::serve::open;

/// Runs one admin command; `Err` carries the one-line message for stderr.
pub(crate) async fn run(config: &Config, cmd: Admin) -> Result<(), String> {
    if let Some(missing) = no_default_database(config) {
        return Err(format!(
            "no gateway database here ({missing} does not exist): run this from the folder where `gateway serve` \
             runs, or set GATEWAY_DATABASE_URL"
        ));
    }
    let gateway = open(config).await?;
    // Every change goes through the operator handle, which records it in the audit trail.
    let actor = Actor::Cli;
    let operator = gateway.operator(&actor);
    let out: Value = match cmd {
        Admin::User(UserCmd::Create(u)) => {
            let balance = UsdAmount::parse_decimal(&u.balance).map_err(|e| format!("--balance: {e}"))?;
            let created = operator
                .create_user(NewUserRequest {
                    name: u.name,
                    email: u.email,
                    role: u.role,
                    balance,
                    concurrency_limit: u.concurrency_limit,
                    media_quota_bytes: u.media_quota_bytes,
                })
                .await
                .map_err(|e| e.to_string())?;
            let user = &created.user;
            json!({
                "id": user.id.as_str(), "name": user.name, "email": user.email, "role": user.role.as_str(),
                "balance_usd": user.balance.to_string(), "concurrency_limit": user.concurrency_limit,
                "media_quota_bytes": user.media_quota_bytes, "created_at": user.created_at.to_string(),
                "webhook_secret": created.webhook_secret,
            })
        }
        Admin::User(UserCmd::List { search, page, page_size }) => {
            let mut params = vec![("page", page.as_str()), ("page_size", page_size.as_str())];
            if let Some(search) = search.as_deref() {
                params.push(("q", search));
            }
            let page = operator.users(params).await.map_err(|e| e.to_string())?;
            api::wire::to_json(&api::manage::wire::admin_users(&page))
        }
        Admin::User(UserCmd::RotateWebhookSecret { user }) => {
            let secret = operator.rotate_webhook_secret(&UserId(user.clone())).await.map_err(|e| e.to_string())?;
            json!({"user_id": user, "webhook_secret": secret})
        }
        Admin::User(UserCmd::Set { user, disabled, concurrency_limit, media_quota_bytes }) => {
            let change = domain::UserChange { disabled, concurrency_limit, media_quota_bytes };
            let user = operator.change_user(&UserId(user), change).await.map_err(|e| e.to_string())?;
            api::wire::to_json(&api::manage::wire::admin_user(&user))
        }
        Admin::Audit { page, page_size } => {
            let params = [("page", page.as_str()), ("page_size", page_size.as_str())];
            let page = operator.audit(params).await.map_err(|e| e.to_string())?;
            api::wire::to_json(&api::manage::wire::audit(&page))
        }
        Admin::Key(KeyCmd::Create {
            user,
            scopes,
            all_scopes,
            name,
            expires_at,
            models,
            budget_usd,
            budget_period,
            rpm,
            tpm,
            allow_ip,
        }) => {
            let scopes = match (all_scopes, scopes) {
                (true, _) => Scope::ALL.to_vec(),
                (false, Some(list)) => Scope::parse_list(&list).map_err(|e| format!("--scopes: {e}"))?,
                (false, None) => return Err("give --scopes or --all-scopes".into()),
            };
            let limits = KeyLimits {
                expires_at: expires_at.as_deref().map(expiry).transpose()?,
                models: models.as_deref().map(allow_list).transpose()?,
                budget: budget_usd.as_deref().map(|usd| budget(usd, budget_period.as_deref())).transpose()?,
                rates: KeyRates {
                    rpm: rpm.as_deref().map(|n| rate_limit("--rpm", n)).transpose()?,
                    tpm: tpm.as_deref().map(|n| rate_limit("--tpm", n)).transpose()?,
                },
                allow_ips: allow_ip.as_deref().map(ip_list).transpose()?,
            };
            let created = operator.create_key(&UserId(user), scopes, &name, limits).await.map_err(|e| e.to_string())?;
            let mut out = key_json(&gateway, created.key);
            out["key"] = json!(created.secret);
            out
        }
        Admin::Key(KeyCmd::Set { key, expires_at, models, budget_usd, budget_period, rpm, tpm, allow_ip }) => {
            let change = KeyLimitsChange {
                expires_at: expires_at.as_deref().map(|t| or_none(t, expiry)).transpose()?,
                models: models.as_deref().map(|m| or_none(m, allow_list)).transpose()?,
                budget: match budget_usd.as_deref() {
                    Some("none") if budget_period.is_some() => {
                        return Err("--budget-period needs a --budget-usd".into());
                    }
                    Some("none") => Some(None),
                    Some(usd) => Some(Some(budget(usd, budget_period.as_deref())?)),
                    None => None,
                },
                rpm: rpm.as_deref().map(|n| or_none(n, |n| rate_limit("--rpm", n))).transpose()?,
                tpm: tpm.as_deref().map(|n| or_none(n, |n| rate_limit("--tpm", n))).transpose()?,
                allow_ips: allow_ip.as_deref().map(|l| or_none(l, ip_list)).transpose()?,
            };
            let k = operator.set_key_limits(&ApiKeyId(key), change).await.map_err(|e| e.to_string())?;
            // Shown as `key list` shows it, with what it spent so far.
            let keys = gateway.list_keys(&k.user_id).await.map_err(|e| e.to_string())?;
            match keys.iter().find(|v| v.key.id == k.id) {
                Some(view) => api::wire::to_json(&api::wire::key(view)),
                None => key_json(&gateway, k),
            }
        }
        Admin::Key(KeyCmd::List { user }) => {
            let keys = gateway.list_keys(&UserId(user.clone())).await.map_err(|e| e.to_string())?;
            json!({"user_id": user, "keys": keys.iter().map(api::wire::key).collect::<Vec<_>>()})
        }
        Admin::Key(KeyCmd::Revoke { key }) => {
            let k = operator.revoke_key(&ApiKeyId(key)).await.map_err(|e| e.to_string())?;
            // Replicas keep a key they read for `CACHE_TTL`: after that, every one refuses it.
            let within = service::CACHE_TTL.as_millis();
            json!({"id": k.id.as_str(), "user_id": k.user_id.as_str(), "revoked": true,
                   "revoked_at": k.revoked_at.map(|t| t.to_string()),
                   "refused_everywhere_within_ms": within,
                   "note": format!("running gateways refuse the key within {within} ms of revoked_at (each keeps a key it read that long)")})
        }
        Admin::Topup { user, amount, note } => {
            let amount = UsdAmount::parse_decimal(&amount).map_err(|e| format!("--amount: {e}"))?;
            let entry = operator.topup(&UserId(user), amount, &note).await.map_err(|e| e.to_string())?;
            api::wire::to_json(&api::wire::ledger_entry(&entry))
        }
        Admin::Adjust { user, amount, note } => {
            let amount = UsdAmount::parse_decimal(&amount).map_err(|e| format!("--amount: {e}"))?;
            let entry = operator.adjust(&UserId(user), amount, &note).await.map_err(|e| e.to_string())?;
            api::wire::to_json(&api::wire::ledger_entry(&entry))
        }
        Admin::Statement { user, month } => {
            let statement = gateway.statement_for(&UserId(user), &month).await.map_err(|e| e.to_string())?;
            api::wire::to_json(&api::manage::statements::statement(&statement))
        }
        Admin::Model(ModelCmd::Set { model, enabled, concurrency_limit }) => {
            if enabled.is_none() && concurrency_limit.is_none() {
                return Err("give --enabled and/or --concurrency-limit".into());
            }
            let m = operator.set_model(&model, enabled, concurrency_limit).await.map_err(|e| e.to_string())?;
            json!({"model": m.name, "kind": m.kind.as_str(), "enabled": m.enabled,
                   "concurrency_limit": m.concurrency_limit, "pricing_version": m.pricing.map(|p| p.version)})
        }
        Admin::Price(PriceCmd::Set { model, rates }) => {
            let text = std::fs::read_to_string(&rates).map_err(|e| format!("cannot read {}: {e}", rates.display()))?;
            let sheet = catalog::parse_price_sheet(&text).map_err(|e| format!("{}: {e}", rates.display()))?;
            let v = operator.set_price(&model, sheet).await.map_err(|e| e.to_string())?;
            json!({"model": v.model, "pricing_version": v.version, "pricing_version_id": v.id().to_string(),
                   "pricing": catalog::price_sheet_json(&v.sheet), "created_at": v.created_at.to_string()})
        }
        Admin::Alias(AliasCmd::Set { name, models }) => {
            let models = models.into_iter().map(|m| m.trim().to_owned()).filter(|m| !m.is_empty()).collect();
            let alias = operator.set_alias(domain::ModelAlias { name, models }).await.map_err(|e| e.to_string())?;
            json!({"name": alias.name, "models": alias.models})
        }
        Admin::Alias(AliasCmd::List) => {
            let aliases = gateway.model_aliases().await.map_err(|e| e.to_string())?;
            let aliases: Vec<Value> = aliases.iter().map(|a| json!({"name": a.name, "models": a.models})).collect();
            json!({"aliases": aliases})
        }
        Admin::Voucher(VoucherCmd::Create { amount, count, expires_at, note }) => {
            let amount = UsdAmount::parse_decimal(&amount).map_err(|e| format!("--amount: {e}"))?;
            let expires_at = expires_at.as_deref().map(expiry).transpose()?;
            let minted = operator
                .create_vouchers(service::NewVouchers { amount, count, expires_at, note })
                .await
                .map_err(|e| e.to_string())?;
            api::wire::to_json(&api::manage::vouchers::minted(&minted))
        }
        Admin::Voucher(VoucherCmd::List { page, page_size }) => {
            let params = [("page", page.as_str()), ("page_size", page_size.as_str())];
            let batches = operator.voucher_batches(params).await.map_err(|e| e.to_string())?;
            api::wire::to_json(&api::manage::vouchers::batch_list(&batches))
        }
        Admin::Voucher(VoucherCmd::Revoke { batch }) => {
            let revoked = operator.revoke_vouchers(&batch).await.map_err(|e| e.to_string())?;
            api::wire::to_json(&api::manage::vouchers::batch(&revoked))
        }
        Admin::Alias(AliasCmd::Delete { name }) => {
            operator.delete_alias(&name).await.map_err(|e| e.to_string())?;
            json!({"name": name, "deleted": true})
        }
        Admin::Maintenance { state } => {
            let on = state == "on";
            operator.set_maintenance(on).await.map_err(|e| e.to_string())?;
            json!({"maintenance": on})
        }
        Admin::Upstream(UpstreamCmd::List) => {
            let reports = gateway.upstream_reports().await.map_err(|e| e.to_string())?;
            let replicas: Vec<serde_json::Value> = reports
                .into_iter()
                .map(|(replica, live_until, endpoints)| {
                    json!({"replica": replica, "live_until": live_until.to_string(), "endpoints": endpoints})
                })
                .collect();
            json!({"replicas": replicas})
        }
        Admin::Task(TaskCmd::Show { id }) => {
            let (task, record) = gateway.task_for_operator(&id).await.map_err(|e| e.to_string())?;
            api::wire::to_json(&api::manage::wire::admin_task(&task, &record))
        }
    };
    println!("{out}");
    Ok(())
}

/// The default SQLite file when the configuration names the default database and that file does
/// not exist: an operator command run from another folder would otherwise make an empty database
/// there and answer as if it knew nobody. `serve` and `migrate` create it; a database named on
/// purpose (`GATEWAY_DATABASE_URL`) is created as before.
fn no_default_database(config: &Config) -> Option<String> {
    let default = Config::default().database_url;
    if config.database_url != default {
        return None;
    }
    let path = default.strip_prefix("sqlite://")?.split('?').next()?.to_owned();
    (!std::path::Path::new(&path).exists()).then_some(path)
}

/// A key as `admin key create` and `admin key set` print it: the API's key object (never its
/// secret or hash).
fn key_json(gateway: &service::Gateway, k: ApiKey) -> Value {
    api::wire::to_json(&api::wire::key(&gateway.view_key(k, None)))
}

/// `--expires-at`: an RFC 3339 time.
fn expiry(text: &str) -> Result<Timestamp, String> {
    text.parse::<Timestamp>().map_err(|e| format!("--expires-at: {e}"))
}

/// `--models`: names and kinds (whether each name is a model, the service checks).
fn allow_list(text: &str) -> Result<ModelAllowList, String> {
    ModelAllowList::parse(text).map_err(|e| format!("--models: {e}"))
}

/// `--budget-usd` and `--budget-period` (default `total`): a limit of at least zero.
fn budget(usd: &str, period: Option<&str>) -> Result<KeyBudget, String> {
    let limit = UsdAmount::parse_decimal(usd).map_err(|e| format!("--budget-usd: {e}"))?;
    if limit.is_negative() {
        return Err(format!("--budget-usd: {usd} is below zero"));
    }
    let period = period.map_or(Ok(BudgetPeriod::Total), str::parse).map_err(|e| format!("--budget-period: {e}"))?;
    Ok(KeyBudget { limit, period })
}

/// `--allow-ip`: networks and addresses.
fn ip_list(text: &str) -> Result<IpAllowList, String> {
    IpAllowList::parse(text).map_err(|e| format!("--allow-ip: {e}"))
}

/// `--rpm` / `--tpm`: a positive integer.
fn rate_limit(flag: &str, text: &str) -> Result<NonZeroU32, String> {
    KeyRates::parse_limit(text).map_err(|e| format!("{flag}: {e}"))
}

/// A `key set` value: `none` clears the setting, anything else is read by `parse`.
fn or_none<T>(text: &str, parse: fn(&str) -> Result<T, String>) -> Result<Option<T>, String> {
    if text == "none" { Ok(None) } else { parse(text).map(Some) }
}
