//! JSON errors: `{"code": "...", "message": "..."}` with a status derived from the variant.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use crewbus_domain::BusError;
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Stable machine-readable code: `not_found`, `invalid`, `too_large`, `conflict`,
    /// `unauthenticated`, `forbidden`, `quota_exceeded`, `rate_limited`, `insufficient_storage`, `unavailable`,
    /// `timeout`, `not_provisioned`, `internal`.
    pub code: String,
    /// A sentence for humans. Never carries broker or database text.
    pub message: String,
    /// With `rate_limited` only: whole seconds until the send would be granted (the
    /// `Retry-After` header over HTTP carries the same number).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// With `invalid` only, when the refusal concerns one field of the request: its name
    /// (`after` of `POST /v1/inbox/watch`: a cursor that is not the caller's, which the client
    /// drops). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// A [`BusError`] on its way to an HTTP client.
#[derive(Debug)]
pub struct ApiError(pub BusError);

impl From<BusError> for ApiError {
    fn from(e: BusError) -> Self {
        ApiError(e)
    }
}

/// The HTTP status of each variant. Another team's ids come back from the use cases as
/// `NotFound` (404), never `Forbidden`.
pub fn status_for(e: &BusError) -> StatusCode {
    match e {
        BusError::NotFound { .. } => StatusCode::NOT_FOUND,
        BusError::Invalid { .. } => StatusCode::BAD_REQUEST,
        BusError::Conflict { .. } => StatusCode::CONFLICT,
        BusError::Forbidden { .. } => StatusCode::FORBIDDEN,
        BusError::Unauthenticated => StatusCode::UNAUTHORIZED,
        BusError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        BusError::QuotaExceeded { .. } | BusError::RateLimited { .. } => {
            StatusCode::TOO_MANY_REQUESTS
        }
        BusError::InsufficientStorage { .. } => StatusCode::INSUFFICIENT_STORAGE,
        BusError::NotProvisioned { .. }
        | BusError::Unavailable { .. }
        | BusError::Timeout { .. } => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The human message of an error response. `Unauthenticated` says what to send (the variant's
/// own text is one word); a missing, malformed, unknown or revoked token are told apart nowhere.
fn message_for(e: &BusError) -> String {
    match e {
        BusError::Unauthenticated => "unauthenticated: send `Authorization: Bearer <token>` with \
                                      an active agent's token (`crewbus serve` prints its dev \
                                      agents' tokens and keeps them in dev-tokens.json; \
                                      `crewbus agent add` prints one)"
            .to_owned(),
        other => other.to_string(),
    }
}

/// The wait a rate-limited request is told (whole seconds); `None` for every other error.
fn retry_after_seconds(e: &BusError) -> Option<u64> {
    match e {
        BusError::RateLimited {
            retry_after_seconds,
        } => Some(*retry_after_seconds),
        _ => None,
    }
}

/// The body an error is shown to a client with (HTTP and MCP alike): its stable code and a
/// sentence without broker or database text. An error with a server-side cause (a 5xx status)
/// is logged here with its source, which goes to the log only.
pub(crate) fn error_body(e: &BusError) -> ErrorBody {
    if status_for(e).is_server_error() {
        tracing::warn!(code = e.code(), error = ?e, "request failed");
    }
    ErrorBody {
        code: e.code().to_owned(),
        message: message_for(e),
        retry_after_seconds: retry_after_seconds(e),
        field: None,
    }
}

/// A [`BusError`] refusing one field of the request, on its way to an HTTP client: the body
/// names the field (`field`).
#[derive(Debug)]
pub struct FieldError {
    /// The request field refused, as the request names it.
    pub field: &'static str,
    /// Why.
    pub error: BusError,
}

impl IntoResponse for FieldError {
    fn into_response(self) -> Response {
        respond(&self.error, Some(self.field))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        respond(&self.0, None)
    }
}

/// The response for `e` (naming `field` when given): its status, the body and the headers it
/// calls for (`WWW-Authenticate`, `Retry-After`).
fn respond(e: &BusError, field: Option<&'static str>) -> Response {
    let status = status_for(e);
    let mut body = error_body(e);
    body.field = field.map(str::to_owned);
    let mut response = (status, Json(body)).into_response();
    if matches!(e, BusError::Unauthenticated) {
        response.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
    }
    if e.is_retryable() {
        // A rate limit says how long; every other temporary error says 1 s.
        let seconds = retry_after_seconds(e).unwrap_or(1).max(1);
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from(seconds),
        );
    }
    response
}

/// Result of every handler.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_contract() {
        let cases = [
            (BusError::TooLarge { size: 2, limit: 1 }, 413),
            (BusError::not_found("x"), 404),
            (BusError::invalid("x"), 400),
            (BusError::Unauthenticated, 401),
            (BusError::conflict("x"), 409),
            (BusError::unavailable("x"), 503),
            (BusError::timeout("x"), 503),
            (BusError::quota_exceeded("x"), 429),
            (
                BusError::RateLimited {
                    retry_after_seconds: 3,
                },
                429,
            ),
            (
                BusError::InsufficientStorage {
                    extra: 1,
                    per_replica: 1,
                    replicas: 1,
                    used: 1,
                    reserved: 1,
                    budget: None,
                    remedy: String::new(),
                },
                507,
            ),
        ];
        for (e, status) in cases {
            assert_eq!(status_for(&e).as_u16(), status, "{e:?}");
        }
    }

    #[test]
    fn a_rate_limit_answers_429_with_its_wait_in_retry_after_and_the_body() {
        let response = ApiError(BusError::RateLimited {
            retry_after_seconds: 7,
        })
        .into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            response.headers()[axum::http::header::RETRY_AFTER],
            "7",
            "Retry-After carries the wait"
        );
        let body = error_body(&BusError::RateLimited {
            retry_after_seconds: 7,
        });
        assert_eq!(body.code, "rate_limited");
        assert_eq!(body.retry_after_seconds, Some(7));
        assert_eq!(
            error_body(&BusError::quota_exceeded("x")).retry_after_seconds,
            None
        );
        let quota = ApiError(BusError::quota_exceeded("x")).into_response();
        assert_eq!(quota.headers()[axum::http::header::RETRY_AFTER], "1");
    }
}
