//! The scenarios: what each one loads, through what, with how many connections.

/// The chat request every scenario sends.
pub const CHAT_BODY: &str =
    r#"{"model":"LangA-V4-flash","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16"#;
/// Accounts of the many-users scenarios.
pub const MANY_USERS: usize = 32;

/// Who a scenario talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Direct,
    Gateway,
}

/// One row of the benchmark.
#[derive(Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub via: Via,
    pub stream: bool,
    pub connections: usize,
    /// Whether the load is spread over [`MANY_USERS`] accounts (else the one hot account).
    pub many_users: bool,
    /// Gateway processes on the one database, the connections split evenly over them.
    pub replicas: usize,
}

const fn direct(name: &'static str, stream: bool, connections: usize) -> Scenario {
    Scenario { name, via: Via::Direct, stream, connections, many_users: false, replicas: 0 }
}

const fn gateway(name: &'static str, stream: bool, connections: usize, many_users: bool, replicas: usize) -> Scenario {
    Scenario { name, via: Via::Gateway, stream, connections, many_users, replicas }
}

/// In running order; the two-replica rows come last, so one-replica rows run with one process.
pub const SCENARIOS: [Scenario; 12] = [
    direct("direct-c1", false, 1),
    direct("direct-c16", false, 16),
    direct("direct-c64", false, 64),
    gateway("gateway-c1", false, 1, false, 1),
    gateway("gateway-c16", false, 16, false, 1),
    gateway("gateway-c64", false, 64, false, 1),
    gateway("gateway-users32-c64", false, 64, true, 1),
    direct("direct-stream-c1", true, 1),
    gateway("gateway-stream-c1", true, 1, false, 1),
    gateway("gateway-stream-c16", true, 16, false, 1),
    gateway("replicas2-c64", false, 64, false, 2),
    gateway("replicas2-users32-c64", false, 64, true, 2),
];

/// The scenarios named in `filter` (all when it is empty), in table order.
pub fn selected(filter: &[String]) -> Result<Vec<&'static Scenario>, String> {
    if filter.is_empty() {
        return Ok(SCENARIOS.iter().collect());
    }
    let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
    if let Some(unknown) = filter.iter().find(|f| !names.contains(&f.trim())) {
        return Err(format!("unknown scenario {unknown:?}; known: {}", names.join(", ")));
    }
    Ok(SCENARIOS.iter().filter(|s| filter.iter().any(|f| f.trim() == s.name)).collect())
}

/// The request body of a scenario.
pub fn body_of(scenario: &Scenario) -> String {
    match (scenario.stream, scenario.via) {
        (false, _) => format!("{CHAT_BODY}}}"),
        (true, Via::Gateway) => format!("{CHAT_BODY},\"stream\":true}}"),
        // What the gateway sends upstream for a stream: usage forced on.
        (true, Via::Direct) => {
            format!("{CHAT_BODY},\"stream\":true,\"stream_options\":{{\"include_usage\":true}}}}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn scenario_filter() {
        assert_eq!(selected(&[]).map(|s| s.len()), Ok(SCENARIOS.len()));
        let some = selected(&["gateway-c1".into(), "direct-c1".into()]).unwrap_or_default();
        assert_eq!(some.iter().map(|s| s.name).collect::<Vec<_>>(), vec!["direct-c1", "gateway-c1"]);
        assert!(selected(&["nope".into()]).is_err());
    }

    #[test]
    fn bodies_are_json() {
        for body in [format!("{CHAT_BODY}}}"), format!("{CHAT_BODY},\"stream\":true}}")] {
            assert!(serde_json::from_str::<Value>(&body).is_ok_and(|v| v.is_object()));
        }
    }
}
