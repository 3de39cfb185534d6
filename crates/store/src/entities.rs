//! SeaORM entities: one module per table. Rows stay inside this crate; callers see domain records.

macro_rules! no_relations {
    () => {
        /// This table's relations are not modelled; joins are written out where needed.
        #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
        pub enum Relation {}

        impl ActiveModelBehavior for ActiveModel {}
    };
}

/// `users`: accounts and their balances.
pub mod users {
    use sea_orm::entity::prelude::*;

    /// A `users` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "users")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: String,
        pub name: String,
        pub email: String,
        pub role: String,
        pub balance_micros: i64,
        pub concurrency_limit: i64,
        pub media_quota_bytes: i64,
        pub created_at: i64,
        /// The secret the user's webhooks are signed with (migration 0004).
        pub webhook_secret: Option<String>,
        /// Bytes of media stored for the user, counted against `media_quota_bytes` (migration 0004).
        pub media_used_bytes: i64,
        /// What the user's settled calls were charged in all, kept by the write path (migration 0009).
        pub spent_micros: i64,
        /// When an operator disabled the account (migration 0018).
        pub disabled_at: Option<i64>,
    }
    no_relations!();
}

/// `api_keys`: hashed keys and their scopes.
pub mod api_keys {
    use sea_orm::entity::prelude::*;

    /// An `api_keys` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "api_keys")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: String,
        pub user_id: String,
        pub name: String,
        pub key_hash: String,
        pub prefix: String,
        pub scopes: String,
        pub revoked_at: Option<i64>,
        pub created_at: i64,
        pub expires_at: Option<i64>,
        pub models: Option<String>,
        /// The spend limit and its period, and the counters the ledger writer keeps (migration 0012).
        pub budget_micros: Option<i64>,
        pub budget_period: Option<String>,
        pub budget_period_start: i64,
        pub budget_spent_micros: i64,
        pub budget_held_micros: i64,
        pub rpm: Option<i64>,
        pub tpm: Option<i64>,
        /// The client address list (migration 0014).
        pub allow_ips: Option<String>,
        /// The key that minted it through the API (migration 0019).
        pub parent_id: Option<String>,
    }
    no_relations!();
}

/// `models`: operator switches and catalog definitions.
pub mod models {
    use sea_orm::entity::prelude::*;

    /// A `models` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "models")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub name: String,
        pub kind: String,
        pub enabled: bool,
        pub concurrency_limit: i64,
        pub definition: String,
        pub active_pricing_version: Option<i64>,
        pub created_at: i64,
        pub updated_at: i64,
    }
    no_relations!();
}

/// `pricing_versions`: immutable price history.
pub mod pricing_versions {
    use sea_orm::entity::prelude::*;

    /// A `pricing_versions` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "pricing_versions")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub model: String,
        pub version: i64,
        pub rates: String,
        pub created_at: i64,
    }
    no_relations!();
}

/// `tasks`: every billable call and video task.
pub mod tasks {
    use sea_orm::entity::prelude::*;

    /// A `tasks` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tasks")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: String,
        pub user_id: String,
        pub model: String,
        pub kind: String,
        pub status: String,
        pub prompt: Option<String>,
        pub provider: String,
        pub input_mode: Option<String>,
        pub media_type: Option<String>,
        pub media_url: Option<String>,
        pub duration: Option<i64>,
        pub resolution: Option<String>,
        pub ratio: Option<String>,
        pub generate_audio: Option<bool>,
        pub pricing_version_id: Option<String>,
        pub usage: Option<String>,
        pub output_url: Option<String>,
        pub last_frame_url: Option<String>,
        pub error_code: Option<String>,
        pub error_message: Option<String>,
        pub webhook_url: Option<String>,
        pub created_at: i64,
        pub updated_at: i64,
        pub completed_at: Option<i64>,
        /// The upstream's id for the task (migration 0003).
        pub upstream_id: Option<String>,
        /// The replica running a synchronous call (migration 0007).
        pub runner: Option<String>,
        /// The API key that made it (migration 0012).
        pub key_id: Option<String>,
        /// The configured upstream endpoint that served it (migration 0017).
        pub upstream_endpoint: Option<String>,
        /// The attempts its upstream call made (migration 0017).
        pub upstream_attempts: Option<i32>,
        /// The most the call may cost, from `X-Max-Cost` (migration 0020).
        pub max_cost_micros: Option<i64>,
        /// What a call that named an alias or a list of models asked for (migration 0021).
        pub requested_model: Option<String>,
    }
    no_relations!();
}

/// `reservations`: one hold per task, and how it ended.
pub mod reservations {
    use sea_orm::entity::prelude::*;

    /// A `reservations` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "reservations")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub task_id: String,
        pub user_id: String,
        pub amount_micros: i64,
        pub status: String,
        pub actual_micros: Option<i64>,
        pub balance_after_micros: i64,
        pub created_at: i64,
        pub updated_at: i64,
        /// The key whose budget it counts against (migration 0012).
        pub budget_key: Option<String>,
    }
    no_relations!();
}

/// `ledger_entries`: every balance movement.
pub mod ledger_entries {
    use sea_orm::entity::prelude::*;

    /// A `ledger_entries` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "ledger_entries")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub user_id: String,
        pub task_id: Option<String>,
        pub kind: String,
        pub amount_micros: i64,
        pub balance_after_micros: i64,
        pub description: String,
        pub created_at: i64,
    }
    no_relations!();
}

/// `settings`: named operator switches such as maintenance mode.
pub mod settings {
    use sea_orm::entity::prelude::*;

    /// A `settings` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "settings")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub name: String,
        pub value: String,
    }
    no_relations!();
}

/// `model_aliases`: operators' names for lists of models tried in order.
pub mod model_aliases {
    use sea_orm::entity::prelude::*;

    /// A `model_aliases` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "model_aliases")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub name: String,
        /// The models, comma-separated, in order.
        pub models: String,
        pub updated_at: i64,
    }
    no_relations!();
}

/// `idempotency_claims`: the first answer to each `Idempotency-Key`, per user and route.
pub mod idempotency_claims {
    use sea_orm::entity::prelude::*;

    /// An `idempotency_claims` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "idempotency_claims")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub user_id: String,
        #[sea_orm(primary_key, auto_increment = false)]
        pub route: String,
        #[sea_orm(primary_key, auto_increment = false)]
        pub idem_key: String,
        pub request_hash: String,
        pub task_id: Option<String>,
        pub response_status: Option<i64>,
        pub response_body: Option<String>,
        pub created_at: i64,
    }
    no_relations!();
}

/// `native_responses`: response ids returned by the response-style endpoint, with their owner.
pub mod native_responses {
    use sea_orm::entity::prelude::*;

    /// A `native_responses` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "native_responses")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub response_id: String,
        pub user_id: String,
        pub task_id: String,
        pub created_at: i64,
    }
    no_relations!();
}

/// `media_objects`: media stored for a user's task (migration 0004).
pub mod media_objects {
    use sea_orm::entity::prelude::*;

    /// A `media_objects` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "media_objects")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub key: String,
        pub user_id: String,
        pub task_id: String,
        pub position: i64,
        pub kind: String,
        pub mime: String,
        pub bytes: i64,
        pub source_url: Option<String>,
        pub asset_id: Option<String>,
        pub created_at: i64,
    }
    no_relations!();
}

/// `webhook_deliveries`: the webhook outbox, one row per announced status of a task (migration 0004)
/// or per event of no task (`balance.low`, migration 0024).
pub mod webhook_deliveries {
    use sea_orm::entity::prelude::*;

    /// A `webhook_deliveries` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "webhook_deliveries")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub task_id: Option<String>,
        pub user_id: String,
        pub url: String,
        pub event: String,
        pub payload: String,
        pub attempts: i64,
        pub next_attempt_at: i64,
        pub lease_owner: Option<String>,
        pub lease_until: Option<i64>,
        pub delivered_at: Option<i64>,
        pub given_up_at: Option<i64>,
        pub last_status: Option<i64>,
        pub last_error: Option<String>,
        pub created_at: i64,
    }
    no_relations!();
}

/// `webhook_attempts`: every attempt of every delivery (migration 0004).
pub mod webhook_attempts {
    use sea_orm::entity::prelude::*;

    /// A `webhook_attempts` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "webhook_attempts")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub delivery_id: i64,
        #[sea_orm(primary_key, auto_increment = false)]
        pub attempt: i64,
        pub status: Option<i64>,
        pub latency_ms: i64,
        pub error: Option<String>,
        pub at: i64,
    }
    no_relations!();
}

/// `admin_audit`: one row per operator action (migration 0018).
pub mod admin_audit {
    use sea_orm::entity::prelude::*;

    /// An `admin_audit` row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "admin_audit")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub at: i64,
        pub actor: String,
        pub actor_key: Option<String>,
        pub action: String,
        pub target: String,
        pub before_state: Option<String>,
        pub after_state: Option<String>,
    }
    no_relations!();
}
