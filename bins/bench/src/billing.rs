//! The billing check after a gateway scenario: each account's task statistics against the
//! successful answers bench counted for it.

use std::collections::HashMap;

use serde_json::Value;

use crate::load::{self, Endpoint};

/// Billing rows compared with the successful chat answers the gateways gave, summed over the
/// accounts a scenario used (each account is also compared on its own).
#[derive(Debug)]
pub struct BillingCheck {
    /// The scenario and database it follows (`gateway-c64 on sqlite`).
    pub after: String,
    /// Accounts compared.
    pub accounts: usize,
    /// Successful answers bench got, warm-up included: what every figure below must equal.
    pub expected: u64,
    /// The overview's `stats.succeeded`.
    pub succeeded: u64,
    /// The overview's `stats.total`.
    pub total: u64,
    /// The overview's `stats.active` (must be 0).
    pub active: u64,
    /// `GET /api/v1/tasks?status=completed`'s `pagination.total`.
    pub completed: u64,
    /// Whether every account's own figures equal its own successes.
    pub each_matches: bool,
}

impl BillingCheck {
    /// Whether every figure equals the successes and no call is still active.
    pub fn matches(&self) -> bool {
        self.each_matches
            && self.succeeded == self.expected
            && self.total == self.expected
            && self.completed == self.expected
            && self.active == 0
    }
}

fn json_u64(v: &Value, pointer: &str) -> Result<u64, String> {
    v.pointer(pointer).and_then(Value::as_u64).ok_or_else(|| format!("no number at {pointer} in {v}"))
}

/// Reads the task statistics of every account the scenario used and compares each with the
/// successful answers that account got so far (`succeeded`, by API key).
pub async fn billing_check(
    used: &[Endpoint],
    succeeded: &HashMap<String, u64>,
    after: String,
) -> Result<BillingCheck, String> {
    let get = |endpoint: &Endpoint, path: &'static str| {
        let endpoint = endpoint.with_path(path);
        async move {
            let (status, text) = load::fetch(&endpoint).await?;
            if status != 200 {
                return Err(format!("GET {path}: status {status}: {text}"));
            }
            serde_json::from_str::<Value>(&text).map_err(|e| format!("GET {path}: {e}"))
        }
    };
    let mut check = BillingCheck {
        after,
        accounts: 0,
        expected: 0,
        succeeded: 0,
        total: 0,
        active: 0,
        completed: 0,
        each_matches: true,
    };
    let mut seen = std::collections::HashSet::new();
    for endpoint in used {
        if !seen.insert(endpoint.bearer()) {
            continue;
        }
        let expected = succeeded.get(endpoint.bearer()).copied().unwrap_or(0);
        let overview = get(endpoint, "/api/v1/overview").await?;
        let tasks = get(endpoint, "/api/v1/tasks?status=completed&page_size=20").await?;
        let own = BillingCheck {
            after: String::new(),
            accounts: 1,
            expected,
            succeeded: json_u64(&overview, "/stats/succeeded")?,
            total: json_u64(&overview, "/stats/total")?,
            active: json_u64(&overview, "/stats/active")?,
            completed: json_u64(&tasks, "/pagination/total")?,
            each_matches: true,
        };
        check.each_matches &= own.matches();
        check.accounts += 1;
        check.expected += own.expected;
        check.succeeded += own.succeeded;
        check.total += own.total;
        check.active += own.active;
        check.completed += own.completed;
    }
    Ok(check)
}
