//! Pins what the HTTP edge exposes, so a change to how the routes are declared can show it
//! changed nothing: the document `GET /openapi.json` serves (default settings), byte for byte
//! against `golden/openapi.json`, and the route table — every method and path the document lists,
//! and `/openapi.json`, is routed, and every other method on those paths is `405`.
//!
//! After an intended change to the API, `CREWBUS_BLESS=1 cargo test -p crewbus --lib
//! http::surface` rewrites the golden file; the diff is the change.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

use super::openapi::document;
use crate::usecases::bus::BusSettings;

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/http/golden/openapi.json")
}

/// The document as kept in the golden file: what `GET /openapi.json` serializes (`Json`, compact),
/// serialized by the same serde implementation with serde_json's pretty formatter, which only
/// adds whitespace between tokens — so equal pretty bytes are equal served bytes, and a change
/// reads as a line diff.
fn served() -> String {
    serde_json::to_string_pretty(&document(&BusSettings::default())).unwrap() + "\n"
}

#[test]
fn the_served_openapi_document_is_the_golden_one_byte_for_byte() {
    let pretty = served();
    if std::env::var_os("CREWBUS_BLESS").is_some() {
        std::fs::write(golden_path(), &pretty).unwrap();
    }
    let golden = std::fs::read_to_string(golden_path()).unwrap();
    assert!(
        golden == pretty,
        "the OpenAPI document changed; after an intended change rerun with CREWBUS_BLESS=1 and \
         read the diff of {}",
        golden_path().display()
    );
}

/// Every (method, path) the golden document lists.
fn documented() -> Vec<(Method, String)> {
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(golden_path()).unwrap()).unwrap();
    let mut routes = Vec::new();
    for (path, item) in golden["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.push((method.to_uppercase().parse().unwrap(), path.clone()));
        }
    }
    routes
}

/// A concrete path for a templated one: every `{param}` a nil UUID.
fn concrete(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').unwrap() + start;
        out.push_str("00000000-0000-0000-0000-000000000000");
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Whether the router's fallbacks answered (no such route, or no such method on it) rather than
/// a route.
async fn fallback(app: &axum::Router, method: Method, path: &str) -> Option<StatusCode> {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let routed = match status {
        StatusCode::METHOD_NOT_ALLOWED => false,
        StatusCode::NOT_FOUND => body["message"] != "no such route",
        _ => true,
    };
    (!routed).then_some(status)
}

#[tokio::test]
async fn the_router_serves_every_documented_route_and_no_other_method_on_its_paths() {
    let config = crate::config::Config::default();
    let (composed, _) = crate::compose::memory_with_wakeups(
        &config,
        Arc::new(crewbus_ports::SystemClock),
        crate::compose::memory_config(&config),
        Arc::new(crewbus_memory::MemoryWakeups::new()),
    )
    .unwrap();
    let bus = composed.bus;
    let app = super::router(bus.clone(), crate::mcp::router(bus));
    let mut routes = documented();
    routes.push((Method::GET, "/openapi.json".to_owned()));
    assert_eq!(routes.len(), 47, "{routes:?}");
    let all = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
    ];
    for (method, path) in &routes {
        let uri = concrete(path);
        assert_eq!(
            fallback(&app, method.clone(), &uri).await,
            None,
            "{method} {path} is routed"
        );
        for other in &all {
            if routes.iter().any(|(m, p)| m == other && p == path) {
                continue;
            }
            assert_eq!(
                fallback(&app, other.clone(), &uri).await,
                Some(StatusCode::METHOD_NOT_ALLOWED),
                "{other} {path} is not routed"
            );
        }
    }
}
