//! `/health`, `/metrics`, `/openapi.json`, and the JSON 404.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use crewbus_domain::BusError;

use super::AppState;
use crate::edge::error::ApiError;
use crate::metrics::Format;
use crate::usecases::health::HealthReport;

/// Liveness and readiness: `200` when the ledger answers, `503` when it does not. The broker is
/// reported and never fails the probe.
#[utoipa::path(get, path = "/health", tag = "operations", operation_id = "health",
    responses((status = 200, body = HealthReport), (status = 503, body = HealthReport)))]
pub async fn health(State(state): State<AppState>) -> impl IntoResponse {
    let report = state.bus.health().await;
    let status = if report.healthy() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(report))
}

/// Prometheus metrics: the text exposition format 0.0.4, or OpenMetrics 1.0 when `Accept` asks for
/// `application/openmetrics-text` ([`Format::negotiate`]).
#[utoipa::path(get, path = "/metrics", tag = "operations", operation_id = "metrics",
    responses((status = 200,
        description = "Prometheus text 0.0.4, or OpenMetrics text when negotiated",
        content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    (
        [(header::CONTENT_TYPE, format.content_type())],
        state.bus.metrics_text(format).await,
    )
}

/// This document, with this server's configured limits ([`super::openapi::document`]).
pub async fn openapi(State(state): State<AppState>) -> impl IntoResponse {
    Json(super::openapi::document(&state.bus.settings))
}

/// Any other path.
pub async fn not_found() -> ApiError {
    ApiError(BusError::not_found("no such route"))
}

/// A known path with another method: `405` with the API's JSON error (`invalid`).
pub async fn method_not_allowed() -> impl IntoResponse {
    let ApiError(e) = ApiError(BusError::invalid("method not allowed on this path"));
    (
        StatusCode::METHOD_NOT_ALLOWED,
        Json(crate::edge::error::ErrorBody {
            code: e.code().to_owned(),
            message: e.to_string(),
            retry_after_seconds: None,
            field: None,
        }),
    )
}
