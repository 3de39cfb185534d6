//! The command line: `serve`, `migrate`, `settings` and the `admin` commands of the operator contract.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The model gateway.
#[derive(Debug, Parser)]
#[command(name = "gateway", version, about = "A model gateway with USD prepaid billing")]
pub struct Cli {
    /// TOML configuration file (default: gateway.toml when present). GATEWAY_* variables override it.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server (applies migrations first).
    Serve {
        /// Create a funded demo user (and print its key once) when the database has no user. SQLite
        /// does this on its first run anyway; PostgreSQL only with this flag.
        #[arg(long)]
        demo: bool,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Run the upstream simulator as its own server (chat completions under /api/v3).
    SimUpstream {
        /// Address to listen on, such as 127.0.0.1:9000.
        #[arg(long)]
        listen: String,
    },
    /// Print the settings: `--markdown` writes the README's table (variable, value, default,
    /// doc), one row per declaration in `settings!`.
    Settings {
        /// Write the table as Markdown (the only form so far).
        #[arg(long, required = true)]
        markdown: bool,
    },
    /// Operator commands; each prints one JSON object.
    #[command(subcommand)]
    Admin(Box<Admin>),
}

/// `gateway admin …`.
#[derive(Debug, Subcommand)]
pub enum Admin {
    /// Users.
    #[command(subcommand)]
    User(UserCmd),
    /// API keys.
    #[command(subcommand)]
    Key(KeyCmd),
    /// Add money to a balance.
    Topup {
        /// User id.
        #[arg(long)]
        user: String,
        /// Amount in USD, such as 25 or 12.50.
        #[arg(long, allow_negative_numbers = true)]
        amount: String,
        /// Note for the ledger.
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Correct a balance by a signed amount (such as a refunded Stripe payment taken back): an
    /// `adjustment` ledger entry, audited; it may take the balance below zero.
    Adjust {
        /// User id.
        #[arg(long)]
        user: String,
        /// Amount in USD, negative to take money back, such as -20 or 5.
        #[arg(long, allow_negative_numbers = true)]
        amount: String,
        /// Why (required): it is the ledger entry's note.
        #[arg(long)]
        note: String,
    },
    /// A user's statement of a UTC month: the object `GET /api/v1/statements/{month}` answers
    /// (opening and closing balance, credits by kind, charges by model, refunds, holds).
    Statement {
        /// User id.
        #[arg(long)]
        user: String,
        /// The UTC month, YYYY-MM: the month in progress or an earlier one.
        #[arg(long)]
        month: String,
    },
    /// Models.
    #[command(subcommand)]
    Model(ModelCmd),
    /// Prices.
    #[command(subcommand)]
    Price(PriceCmd),
    /// Model aliases: a name callers send as `model` for models tried in order.
    #[command(subcommand)]
    Alias(AliasCmd),
    /// Vouchers: codes a customer redeems for credit (`POST /api/v1/vouchers/redeem`).
    #[command(subcommand)]
    Voucher(VoucherCmd),
    /// Maintenance mode: every generation call answers 503 while on.
    Maintenance {
        /// `on` or `off`.
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// Upstream endpoints.
    #[command(subcommand)]
    Upstream(UpstreamCmd),
    /// Tasks, whoever owns them.
    #[command(subcommand)]
    Task(TaskCmd),
    /// The audit trail of operator actions (command line and management API), newest first.
    Audit {
        /// Page, from 1.
        #[arg(long, default_value = "1")]
        page: String,
        /// Actions per page: 20, 50 or 100.
        #[arg(long, default_value = "20")]
        page_size: String,
    },
}

/// `gateway admin alias …`.
#[derive(Debug, Subcommand)]
pub enum AliasCmd {
    /// Create or replace an alias: a chat, message or response call naming it is tried on each
    /// model in turn, moving on when one fails before its answer (connection, timeout, 429, 5xx,
    /// switched off).
    Set {
        /// The alias: 1 to 64 letters, digits or `-_.:/`, and no model's own name.
        #[arg(long)]
        name: String,
        /// 1 to 4 models of one kind, comma-separated, in the order they are tried.
        #[arg(long, value_delimiter = ',')]
        models: Vec<String>,
    },
    /// Every alias.
    List,
    /// Remove an alias.
    Delete {
        /// The alias.
        #[arg(long)]
        name: String,
    },
}

/// `gateway admin voucher …`.
#[derive(Debug, Subcommand)]
pub enum VoucherCmd {
    /// Mint a batch of codes; they are printed this once and stored hashed.
    Create {
        /// What each code credits, in USD (above zero, at most 100000).
        #[arg(long, allow_negative_numbers = true)]
        amount: String,
        /// How many codes, 1 to 10000.
        #[arg(long, default_value = "1")]
        count: u32,
        /// RFC 3339 time from which the codes are refused (default: never).
        #[arg(long)]
        expires_at: Option<String>,
        /// A note for operators.
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Batches, newest first, with how many codes were redeemed.
    List {
        /// Page, from 1.
        #[arg(long, default_value = "1")]
        page: String,
        /// Batches per page: 20, 50 or 100.
        #[arg(long, default_value = "20")]
        page_size: String,
    },
    /// Revoke a batch's codes not redeemed yet.
    Revoke {
        /// The batch id (`vb_…`).
        #[arg(long)]
        batch: String,
    },
}

/// `gateway admin task …`.
#[derive(Debug, Subcommand)]
pub enum TaskCmd {
    /// A task as its owner sees it, with "upstream": its upstream id, the configured endpoint that
    /// served it (or was tried last) and the attempts its call made.
    Show {
        /// Task id.
        #[arg(long)]
        id: String,
    },
}

/// `gateway admin upstream …`.
#[derive(Debug, Subcommand)]
pub enum UpstreamCmd {
    /// Each live replica's upstream endpoints as it last reported them (every third of its
    /// liveness lease): state, cool-down or open circuit's end, attempts and failures.
    List,
}

/// `gateway admin user …`.
#[derive(Debug, Subcommand)]
pub enum UserCmd {
    /// Create a user; its webhook secret is printed once as "webhook_secret".
    Create(UserCreate),
    /// Users, newest first, one page at a time (find the demo user's id here to issue it a key).
    List {
        /// Only users whose id, name or email contains this text (any case).
        #[arg(long)]
        search: Option<String>,
        /// Page, from 1.
        #[arg(long, default_value = "1")]
        page: String,
        /// Users per page: 20, 50 or 100.
        #[arg(long, default_value = "20")]
        page_size: String,
    },
    /// Replace a user's webhook secret; the new one is printed once as "webhook_secret".
    RotateWebhookSecret {
        /// User id.
        #[arg(long)]
        user: String,
    },
    /// Disable or enable a user (a disabled user's keys are all refused) or change its caps.
    Set {
        /// User id.
        #[arg(long)]
        user: String,
        /// `true` or `false`.
        #[arg(long)]
        disabled: Option<bool>,
        /// Most concurrent calls, 1..100000.
        #[arg(long)]
        concurrency_limit: Option<i64>,
        /// Media storage quota in bytes.
        #[arg(long)]
        media_quota_bytes: Option<i64>,
    },
}

/// Options of `admin user create`.
#[derive(Debug, Args)]
pub struct UserCreate {
    /// Display name.
    #[arg(long)]
    pub name: String,
    /// Email address.
    #[arg(long)]
    pub email: String,
    /// `user` or `admin`.
    #[arg(long, default_value = "user", value_parser = ["user", "admin"])]
    pub role: String,
    /// Opening balance in USD.
    #[arg(long, default_value = "0")]
    pub balance: String,
    /// Most concurrent calls.
    #[arg(long, default_value_t = service::NEW_USER_CONCURRENCY_LIMIT)]
    pub concurrency_limit: i64,
    /// Media storage quota in bytes.
    #[arg(long, default_value_t = service::NEW_USER_MEDIA_QUOTA_BYTES)]
    pub media_quota_bytes: i64,
}

/// `gateway admin key …`.
#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Issue a key; its secret is printed once as "key".
    Create {
        /// Owner's user id.
        #[arg(long)]
        user: String,
        /// Comma-separated scopes: models:read, task:read, task:write, video:create,
        /// image:create, audio:create, language:create, overview:read, keys:manage, billing:manage, admin.
        #[arg(long, conflicts_with = "all_scopes", required_unless_present = "all_scopes")]
        scopes: Option<String>,
        /// Every scope.
        #[arg(long)]
        all_scopes: bool,
        /// Label.
        #[arg(long, default_value = "")]
        name: String,
        /// Refuse the key as expired from this RFC 3339 time on (such as 2026-12-31T23:59:59Z).
        #[arg(long)]
        expires_at: Option<String>,
        /// Comma-separated model names and kinds (language, image, audio, video) the key may reach.
        #[arg(long)]
        models: Option<String>,
        /// The most the key may spend, in USD (such as 5 or 0.05), per --budget-period.
        #[arg(long, allow_negative_numbers = true)]
        budget_usd: Option<String>,
        /// When the budget starts over: total (never, the default), day, week (Monday) or month, UTC.
        #[arg(long, requires = "budget_usd")]
        budget_period: Option<String>,
        /// Requests (generation calls) per UTC minute, counted across replicas.
        #[arg(long)]
        rpm: Option<String>,
        /// Language tokens (prompt + completion) per UTC minute, counted across replicas.
        #[arg(long)]
        tpm: Option<String>,
        /// Comma-separated client networks (CIDR) or addresses the key may be used from.
        #[arg(long)]
        allow_ip: Option<String>,
    },
    /// Change a key's expiry, model allow-list, budget or rate limits; `none` clears one. Prints the
    /// stored key.
    Set {
        /// Key id (`key_…`).
        #[arg(long)]
        key: String,
        /// RFC 3339 time, or `none` (never expires).
        #[arg(long)]
        expires_at: Option<String>,
        /// Comma-separated model names and kinds, or `none` (every model).
        #[arg(long)]
        models: Option<String>,
        /// The spend limit in USD, or `none` (only the balance limits the key).
        #[arg(long, allow_negative_numbers = true)]
        budget_usd: Option<String>,
        /// total, day, week or month (with --budget-usd; default total).
        #[arg(long, requires = "budget_usd")]
        budget_period: Option<String>,
        /// Requests per UTC minute, or `none` (no limit).
        #[arg(long)]
        rpm: Option<String>,
        /// Language tokens per UTC minute, or `none` (no limit).
        #[arg(long)]
        tpm: Option<String>,
        /// Comma-separated client networks or addresses, or `none` (any address).
        #[arg(long)]
        allow_ip: Option<String>,
    },
    /// List a user's keys (revoked ones too) with their settings, never their secrets.
    List {
        /// Owner's user id.
        #[arg(long)]
        user: String,
    },
    /// Revoke a key by id.
    Revoke {
        /// Key id (`key_…`).
        #[arg(long)]
        key: String,
    },
}

/// `gateway admin model …`.
#[derive(Debug, Subcommand)]
pub enum ModelCmd {
    /// Change a model's switch or cap.
    Set {
        /// Public model name.
        #[arg(long)]
        model: String,
        /// `true` or `false`.
        #[arg(long)]
        enabled: Option<bool>,
        /// Platform-wide cap, 1..100000.
        #[arg(long)]
        concurrency_limit: Option<i64>,
    },
}

/// `gateway admin price …`.
#[derive(Debug, Subcommand)]
pub enum PriceCmd {
    /// Create a new price version from a rates file.
    Set {
        /// Public model name.
        #[arg(long)]
        model: String,
        /// JSON file: {"rate": {"amountMicrousd": "…", "denominator": "…", "unit": "…"}, …}.
        #[arg(long)]
        rates: PathBuf,
    },
}
