//! Operating a real `gateway serve` process: with `GATEWAY_LOG_FORMAT=json` every log line on
//! stderr is one JSON object, and a billable call's access line carries the request id, the user
//! id, the model, the status, the latency and the amount billed, and never the key.

mod common;

use common::{http_request, sandbox, terminate};
use serde_json::{Value, json};

#[test]
fn json_logs_carry_the_call_and_never_the_key() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim_addr, _sim) = rt.block_on(upstream::sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let (user, key) = common::account(&sandbox, "10", "language:create");
    let env = [("GATEWAY_LOG_FORMAT", "json".to_owned())];
    let (mut server, addr) = common::serve_against(&sandbox, sim_addr, "serve-json", &env);
    let body = json!({"model": "LangA-V4-flash", "messages": [{"role": "user", "content": "log me"}], "max_tokens": 8});
    let (status, answer) = http_request(&addr, "POST", "/api/v1/chat/completions", Some(&key), Some(&body));
    assert_eq!(status, 200, "{answer}");
    let billed = answer["svc"]["billing"]["actual_amount"].as_str().expect("actual_amount").to_owned();
    let task = answer["svc"]["task_id"].as_str().expect("task id").to_owned();
    let (status, _) = http_request(&addr, "GET", "/api/v1/models", Some("sk-gw-not-a-key"), None);
    assert_eq!(status, 401);
    terminate(&mut server.0);

    let stderr = std::fs::read_to_string(sandbox.dir.join("serve-json.err")).expect("read stderr");
    let lines: Vec<Value> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    assert!(lines.iter().all(|l| l["level"].is_string() && l["timestamp"].is_string()), "{stderr}");
    let call = lines
        .iter()
        .find(|l| l["message"] == "request" && l["path"] == "/api/v1/chat/completions")
        .unwrap_or_else(|| panic!("no access line for the call: {stderr}"));
    assert!(call["request_id"].as_str().is_some_and(|id| !id.is_empty()), "{call}");
    assert_eq!(call["status"], 200, "{call}");
    assert_eq!(call["user_id"], user.as_str(), "{call}");
    assert_eq!(call["model"], "LangA-V4-flash", "{call}");
    assert_eq!(call["task_id"], task.as_str(), "{call}");
    assert_eq!(call["billed_usd"], billed.as_str(), "{call}");
    assert!(call["micros"].as_u64().is_some(), "{call}");
    let refused = lines
        .iter()
        .find(|l| l["message"] == "request" && l["path"] == "/api/v1/models")
        .unwrap_or_else(|| panic!("no access line for the refused call: {stderr}"));
    assert_eq!(refused["status"], 401, "{refused}");
    assert!(!stderr.contains(&key) && !stderr.contains("sk-gw-not-a-key"), "a key reached the log");
}
