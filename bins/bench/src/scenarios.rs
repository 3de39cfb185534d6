//! The scenarios as data: one row of [`SCENARIOS`] per scenario (what it talks to, whose keys,
//! how many connections, which request), interpreted by the runner (`run.rs`). A new scenario is a row.

use Target::{Gateway, Simulator};
use Users::{Hot, Many};

/// What a scenario's connections talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The upstream simulator itself, the baseline: measured once, with the first database.
    Simulator,
    /// This many `gateway serve` processes on the database under test, the connections split
    /// evenly over them (gateways are only ever added during a run: see [`SCENARIOS`]).
    Gateway(usize),
}

impl Target {
    /// Whether the load goes through gateways (and so is billed and checked).
    pub fn is_gateway(self) -> bool {
        matches!(self, Gateway(_))
    }
}

/// Whose API keys a gateway scenario sends (the simulator takes its one upstream key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Users {
    /// The one hot account (one company, one balance).
    Hot,
    /// This many accounts, the connections spread evenly over them.
    Many(usize),
}

impl Users {
    /// Accounts besides the hot one that this needs.
    pub fn extra_accounts(self) -> usize {
        match self {
            Hot => 0,
            Many(n) => n,
        }
    }
}

/// What a scenario sends on every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The path under the target's API base (`/api/v1` on the gateway, the simulator's base).
    pub route: &'static str,
    /// The JSON body.
    pub body: &'static str,
    /// Whether the answer is an event stream (a success must end with `data: [DONE]`).
    pub stream: bool,
}

/// A chat completion, answered as one JSON object.
pub const CHAT: Request = Request {
    route: "/chat/completions",
    body: r#"{"model":"LangA-V4-flash","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16}"#,
    stream: false,
};

/// The same chat completion as an event stream.
pub const CHAT_STREAM: Request = Request {
    route: "/chat/completions",
    body: r#"{"model":"LangA-V4-flash","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16,"stream":true}"#,
    stream: true,
};

/// [`CHAT_STREAM`] as the gateway sends it upstream (usage forced on): the simulator's baseline.
pub const CHAT_STREAM_UPSTREAM: Request = Request {
    route: "/chat/completions",
    body: r#"{"model":"LangA-V4-flash","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}"#,
    stream: true,
};

/// One scenario: a closed loop of `connections` connections sending `request` to `target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// Its name on the command line (`--scenarios`) and in the report.
    pub name: &'static str,
    /// What it talks to.
    pub target: Target,
    /// Whose keys it sends.
    pub users: Users,
    /// Concurrent connections.
    pub connections: usize,
    /// What every call sends.
    pub request: Request,
}

impl Scenario {
    /// Whether `--wrk` drives it too: closed loops of one account on one gateway (or the
    /// simulator) that wrk's one script and one URL can reproduce; no streams.
    pub fn wrk_too(&self) -> bool {
        !self.request.stream && self.users == Hot && matches!(self.target, Simulator | Gateway(1))
    }
}

impl Scenario {
    /// The row a gateway row is compared with in the report: the simulator's row of the same
    /// connections that streams as it does (`gateway-c1` → `direct-c1`).
    pub fn baseline(&self) -> Option<&'static Scenario> {
        if !self.target.is_gateway() {
            return None;
        }
        SCENARIOS.iter().find(|s| {
            s.target == Simulator && s.connections == self.connections && s.request.stream == self.request.stream
        })
    }
}

const fn row(name: &'static str, target: Target, users: Users, connections: usize, request: Request) -> Scenario {
    Scenario { name, target, users, connections, request }
}

/// Every scenario, in running order. Gateway rows never need fewer gateways than a row before
/// them (the runner only adds gateways), so the two-replica rows come last.
#[rustfmt::skip]
pub const SCENARIOS: &[Scenario] = &[
    //  name                     target      users     conns  request
    row("direct-c1",             Simulator,  Hot,      1,     CHAT),
    row("direct-c16",            Simulator,  Hot,      16,    CHAT),
    row("direct-c64",            Simulator,  Hot,      64,    CHAT),
    row("gateway-c1",            Gateway(1), Hot,      1,     CHAT),
    row("gateway-c16",           Gateway(1), Hot,      16,    CHAT),
    row("gateway-c64",           Gateway(1), Hot,      64,    CHAT),
    row("gateway-users32-c64",   Gateway(1), Many(32), 64,    CHAT),
    row("direct-stream-c1",      Simulator,  Hot,      1,     CHAT_STREAM_UPSTREAM),
    row("gateway-stream-c1",     Gateway(1), Hot,      1,     CHAT_STREAM),
    row("gateway-stream-c16",    Gateway(1), Hot,      16,    CHAT_STREAM),
    row("replicas2-c64",         Gateway(2), Hot,      64,    CHAT),
    row("replicas2-users32-c64", Gateway(2), Many(32), 64,    CHAT),
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
    fn bodies_are_json_and_say_whether_they_stream() {
        for request in [CHAT, CHAT_STREAM, CHAT_STREAM_UPSTREAM] {
            let body: Value = serde_json::from_str(request.body).unwrap();
            assert_eq!(body.get("stream").and_then(Value::as_bool).unwrap_or(false), request.stream);
            assert!(request.route.starts_with('/'));
        }
    }

    #[test]
    fn baselines() {
        let baseline =
            |name: &str| SCENARIOS.iter().find(|s| s.name == name).and_then(Scenario::baseline).map(|s| s.name);
        assert_eq!(baseline("gateway-c1"), Some("direct-c1"));
        assert_eq!(baseline("gateway-stream-c1"), Some("direct-stream-c1"));
        assert_eq!(baseline("replicas2-c64"), Some("direct-c64"));
        assert_eq!(baseline("gateway-stream-c16"), None);
        assert_eq!(baseline("direct-c1"), None);
    }

    #[test]
    fn the_table_is_well_formed() {
        let mut names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SCENARIOS.len(), "scenario names are unique");
        let mut gateways = 1;
        for s in SCENARIOS {
            assert!(s.connections > 0, "{}", s.name);
            if let Gateway(n) = s.target {
                assert!(n >= gateways, "{} needs fewer gateways than a row before it", s.name);
                gateways = n;
            }
        }
    }
}
