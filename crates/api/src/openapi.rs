//! The served OpenAPI 3.1 document (`GET /openapi.json`), assembled from a route table: each
//! route's method, documented path, summary and security come from its declaration
//! ([`crate::route::Route`]), its parameters, body and answers from its operation function
//! ([`crate::doc::Op`]). An alias path repeats its route's operation under another id.

use serde_json::{Map, Value, json};

use crate::doc::Docs;
use crate::route::{Auth, Route};

/// The document of `routes`.
pub fn document_of(routes: &[Route]) -> Value {
    let mut docs = Docs::default();
    let mut paths: Map<String, Value> = Map::new();
    for route in routes {
        let op = (route.doc)(&mut docs);
        let method = route.method.as_str().to_ascii_lowercase();
        let path = route.documented_path();
        let mut answers = Map::new();
        for (status, description, content) in op.responses {
            let mut answer = json!({"description": description});
            if let Some(content) = content {
                answer["content"] = content;
            }
            if status == 429 || status == 503 {
                answer["headers"] = json!({"Retry-After": {"schema": {"type": "integer"}}});
            }
            answers.insert(status.to_string(), answer);
        }
        let mut operation = json!({
            "operationId": operation_id(&method, &path),
            "summary": route.summary,
            "responses": answers,
        });
        operation["security"] = match (route.auth, route.auth.scope()) {
            (_, None) => json!([]),
            (Auth::KeyOrXApiKey(_), Some(scope)) => {
                json!([{"bearer": [scope.as_str()]}, {"x-api-key": [scope.as_str()]}])
            }
            (_, Some(scope)) => json!([{"bearer": [scope.as_str()]}]),
        };
        let mut parameters = op.parameters;
        if route.takes_max_cost() {
            parameters.push(json!({
                "name": "X-Max-Cost", "in": "header", "required": false,
                "description": "The most this call may cost, in USD (such as `0.50`): a hold above it is 402 \
                    `max_cost_exceeded` before anything is held or sent, and the charge never exceeds it",
                "schema": {"type": "string", "pattern": "^\\d+(\\.\\d{1,6})?$"}
            }));
        }
        if !parameters.is_empty() {
            operation["parameters"] = Value::Array(parameters);
        }
        if let Some(body) = op.body {
            operation["requestBody"] = body;
        }
        for alias in route.aliases {
            let mut copy = operation.clone();
            copy["operationId"] = Value::String(operation_id(&method, &crate::route::documented(alias)));
            insert(&mut paths, crate::route::documented(alias), &method, copy);
        }
        insert(&mut paths, path, &method, operation);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Model gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "One gateway in front of chat, image, audio and video models, with prepaid USD balances \
                            and exact per-call billing. Amounts are decimal strings exact to 0.000001 USD.",
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": docs.into_schemas(),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "An API key: `Authorization: Bearer sk-gw-…`"},
                "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
    })
}

fn operation_id(method: &str, path: &str) -> String {
    format!("{method}{}", path.replace(['/', '{', '}', '.'], "_"))
}

fn insert(paths: &mut Map<String, Value>, path: String, method: &str, operation: Value) {
    if let Value::Object(item) = paths.entry(path).or_insert_with(|| json!({})) {
        item.insert(method.to_owned(), operation);
    }
}
