//! The route table's own checks: routing, each route declared once and whole, every route
//! documented, no route path written twice in the crate.
use serde_json::Map;

use super::*;

fn status(method: Method, path: &str) -> Result<&'static str, (u16, Option<String>)> {
    route(&method, path).map(|r| r.path).map_err(|e| (e.status.as_u16(), e.allow))
}

#[test]
fn routes_methods_404_and_405() {
    assert_eq!(status(Method::GET, "/api/v1/models"), Ok("/api/v1/models"));
    assert_eq!(status(Method::GET, "/api/v1/models/"), Ok("/api/v1/models"), "a trailing slash");
    assert_eq!(status(Method::HEAD, "/healthz"), Ok("/healthz"), "HEAD on a GET route");
    assert_eq!(status(Method::GET, "/api/v1/tasks/task_1"), Ok("/api/v1/tasks/{task_id}"));
    assert_eq!(status(Method::DELETE, "/api/v1/tasks/t1"), Ok("/api/v1/tasks/{task_id}"));
    assert_eq!(status(Method::POST, "/api/v1/tasks"), Ok("/api/v1/tasks"));
    assert_eq!(status(Method::POST, "/v1/v1/messages"), Ok("/v1/messages"), "an alias");
    assert_eq!(status(Method::GET, "/media/u/t/0"), Ok("/media/{key+}"));
    assert_eq!(status(Method::GET, "/console"), Ok("/console/{path*}"));
    assert_eq!(status(Method::GET, "/console/app.js"), Ok("/console/{path*}"));
    assert_eq!(status(Method::POST, "/api/v1/models"), Err((405, Some("GET".into()))));
    assert_eq!(status(Method::PUT, "/api/v1/tasks/t1"), Err((405, Some("GET, DELETE".into()))));
    assert_eq!(status(Method::DELETE, "/api/v1/tasks"), Err((405, Some("GET, POST".into()))));
    assert_eq!(status(Method::PUT, "/api/v1/keys"), Err((405, Some("GET, POST".into()))));
    assert_eq!(status(Method::GET, "/api/v1/admin/keys/k"), Err((405, Some("DELETE, PATCH".into()))));
    assert_eq!(status(Method::POST, "/api/v1/admin/maintenance"), Err((405, Some("GET, PUT".into()))));
    assert_eq!(status(Method::GET, "/api/v1/admin/users/u1/topup"), Err((405, Some("POST".into()))));
    assert_eq!(status(Method::GET, "/api/v1/nothing"), Err((404, None)));
    assert_eq!(status(Method::GET, "/api/v1/tasks/t1/x"), Err((404, None)));
    assert_eq!(status(Method::GET, "/media"), Err((404, None)));
    assert_eq!(status(Method::GET, "/media/u//0"), Err((404, None)));
}

#[test]
fn the_table_declares_each_route_once_and_whole() {
    let mut seen = std::collections::HashSet::new();
    for route in ROUTES {
        for path in std::iter::once(route.path).chain(route.aliases.iter().copied()) {
            assert!(seen.insert((route.method.clone(), path)), "{} {path} is declared twice", route.method);
            let parameters = path.matches('{').count();
            assert!(parameters <= 1, "{path}: at most one parameter");
        }
        // What the route reads and what it does agree: a state change is billed or audited,
        // and a route that takes a key says which scope; a route without a key changes nothing,
        // but for the payment processor's signed events, which credit through the ledger.
        if route.auth == Auth::ProcessorSignature {
            assert_eq!((&route.method, route.effect), (&Method::POST, Effect::Billed), "{}", route.path);
            continue;
        }
        if route.auth.scope().is_none() {
            assert_eq!(route.effect, Effect::Read, "{} {}: a route without a key only reads", route.method, route.path);
        }
        if route.method != Method::GET {
            assert!(route.auth.scope().is_some(), "{} {}: a write takes a key", route.method, route.path);
        }
        if route.method == Method::GET {
            assert_eq!(route.body, BodyKind::None, "{} {}: a GET reads no body", route.method, route.path);
        }
    }
}

#[test]
fn no_route_path_is_written_twice_in_the_crate() {
    // Every path literal lives in this table: dispatch, 405, labels and the document come from it.
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.clone()];
    let mut texts = Vec::new();
    while let Some(dir) = files.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                files.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
                let text = std::fs::read_to_string(&path).expect("read");
                // Tests aside.
                let code = text.split("#[cfg(test)]").next().unwrap_or_default().to_owned();
                texts.push((path, code));
            }
        }
    }
    for route in ROUTES {
        for path in std::iter::once(route.path).chain(route.aliases.iter().copied()) {
            let quoted = format!("\"{path}\"");
            let count: usize = texts.iter().map(|(_, code)| code.matches(&quoted).count()).sum();
            let expected = ROUTES.iter().filter(|r| r.path == path || r.aliases.contains(&path)).count();
            assert_eq!(count, expected, "{quoted} is written {count} times in crates/api/src");
        }
    }
}

#[test]
fn every_route_has_its_operation_and_nothing_else_is_documented() {
    let doc = document();
    let paths = doc["paths"].as_object().expect("paths");
    for route in ROUTES {
        for path in std::iter::once(route.path).chain(route.aliases.iter().copied()) {
            let documented = crate::route::documented(path);
            let operation = &paths.get(&documented).unwrap_or_else(|| panic!("no path {documented}"))
                [route.method.as_str().to_ascii_lowercase()];
            assert!(operation.is_object(), "{} {documented} is not in the document", route.method);
            assert_eq!(operation["summary"], route.summary);
        }
    }
    let operations: usize = paths.values().map(|item| item.as_object().map_or(0, Map::len)).sum();
    let declared: usize = ROUTES.iter().map(|r| 1 + r.aliases.len()).sum();
    assert_eq!(operations, declared);
}

#[test]
fn the_task_path_parameter_is_named_as_the_interface_names_it() {
    let doc = document();
    for method in ["get", "delete"] {
        let operation = &doc["paths"]["/api/v1/tasks/{task_id}"][method];
        assert_eq!(operation["parameters"][0]["name"], "task_id", "{method}: {operation}");
        assert_eq!(operation["parameters"][0]["in"], "path", "{method}");
    }
    assert!(doc["paths"].get("/api/v1/tasks/{id}").is_none());
}

#[test]
fn the_document_is_openapi_3_1_with_every_reference_defined() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let text = doc.to_string();
    for reference in text.split("\"$ref\":\"").skip(1) {
        let target = reference.split('"').next().unwrap_or_default();
        let name = target.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("$ref {target}"));
        assert!(schemas.contains_key(name), "$ref {target} has no definition");
    }
    for name in [
        "ImageRequest",
        "AudioRequest",
        "VideoRequest",
        "ChatRequest",
        "MessagesRequest",
        "ResponsesRequest",
        "TaskObject",
        "ModelList",
        "ErrorEnvelope",
    ] {
        assert!(schemas.contains_key(name), "{name} is defined");
    }
    // Request fields are not nullable; response fields may be.
    assert!(!schemas["AudioConfig"].to_string().contains("null"));
    assert!(schemas["Billing"].to_string().contains("null"));
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path}");
            assert!(op["operationId"].is_string(), "{method} {path}");
        }
    }
}
